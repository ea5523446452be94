#!/usr/bin/env bash
# Runs the isolation specs (tests/isolation, the same specs and expected
# files as the native extension's) against the portable edition (SPEC
# section 12), installed from its plain SQL file in a database of its own
# (the native schedule's first spec, setup, creates the extension there
# instead: it is left out).
#
#   bash tests/portable/isolation.sh HOST PORT OUT
#
# Expects dist/ built (scripts/portable.sh). Run from the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
host=${1:?HOST} port=${2:?PORT} out=${3:?OUT}
database=rate_limiter_portable_isolation
drivers=()
[ -n "$PG_LIBRARY_PATH" ] && drivers=(env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH")
psql_here() { "${drivers[@]}" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$host" -p "$port" -U postgres "$@"; }
psql_here -d postgres -c "DROP DATABASE IF EXISTS $database" -c "CREATE DATABASE $database"
psql_here -d "$database" -f dist/rate_limiter-portable.sql
schedule=$(mktemp)
trap 'rm -f "$schedule"' EXIT
# Left out, besides setup: the specs where the portable edition does not
# yet behave as the native one (issue 33 stays open for them):
#   shards, shards_held  a sharded call locks both shards of its pair
#                        (FOR UPDATE SKIP LOCKED on each) where the native
#                        one holds only the shard it writes, so a second
#                        call waits where the native one passes over;
#   reset_race           under REPEATABLE READ, a call that waited for a
#                        rate_reset() that deleted its row ends in 40001
#                        where the native call starts a new row.
grep -Ev '^test: (setup|shards|shards_held|reset_race)$' tests/isolation/schedule >"$schedule"
mkdir -p "$out"
chmod -R a+rwX "$out"
"${drivers[@]}" "$PGXS_DIR/src/test/isolation/pg_isolation_regress" --bindir="$PG_BIN" \
    --inputdir=tests/isolation --outputdir="$out" --use-existing \
    --host="$host" --port="$port" --user=postgres --dbname="$database" \
    --schedule="$schedule"
