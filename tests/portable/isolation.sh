#!/usr/bin/env bash
# Runs the isolation specs (tests/isolation, the same specs and expected
# files as the native extension's, but for the portable edition's own
# outputs in tests/portable/isolation/expected, each explained in the
# README there) against the portable edition (docs/guarantees.md,
# "Portable edition"), installed from its plain SQL file in a database of
# its own (the native schedule's first spec, setup, creates the extension
# there instead: it is left out).
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
grep -Ev '^test: setup$' tests/isolation/schedule >"$schedule"
# The specs and expected files of the native extension, with the portable
# edition's own outputs (tests/portable/isolation/expected, each explained
# in tests/portable/isolation/README.md) in place of the native ones.
inputs=$(mktemp -d /tmp/rate_limiter_portable_isolation.XXXXXX)
trap 'rm -f "$schedule"; rm -rf "$inputs"' EXIT
mkdir -p "$inputs/expected"
ln -s "$PWD/tests/isolation/specs" "$inputs/specs"
for file in tests/isolation/expected/* tests/portable/isolation/expected/*; do
    ln -sfn "$PWD/$file" "$inputs/expected/$(basename "$file")"
done
mkdir -p "$out"
chmod -R a+rwX "$out"
"${drivers[@]}" "$PGXS_DIR/src/test/isolation/pg_isolation_regress" --bindir="$PG_BIN" \
    --inputdir="$inputs" --outputdir="$out" --use-existing \
    --host="$host" --port="$port" --user=postgres --dbname="$database" \
    --schedule="$schedule"
