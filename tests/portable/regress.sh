#!/usr/bin/env bash
# Runs the pg_regress schedule against the portable edition
# (docs/guarantees.md, "Portable edition"): tests/portable/schedule, whose
# tests are the native extension's (tests/pg_regress/sql, with the same
# expected files) and the portable edition's own (tests/portable/sql and
# expected: what the portable edition may do differently, each file saying
# why at its top), through
# tests/portable/psql_launcher.sh, which installs the portable edition
# where a test says CREATE EXTENSION rate_limiter.
#
#   bash tests/portable/regress.sh plain|pg_tle HOST PORT OUT
#
# Expects dist/ built (scripts/portable.sh) and, for pg_tle, a server with
# pg_tle preloaded and no rate_limiter.control on its disk. Run from the
# repository (paths in the tests are relative to it).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
mode=${1:?plain or pg_tle} host=${2:?HOST} port=${3:?PORT} out=${4:?OUT}
case "$mode" in
plain) install=tests/portable/install_plain.sql ;;
pg_tle) install=tests/portable/install_pg_tle.sql ;;
*) echo "mode must be plain or pg_tle" >&2; exit 2 ;;
esac
# The tests and expected files of both, the portable edition's own last.
inputs=$(mktemp -d /tmp/rate_limiter_portable_regress.XXXXXX)
trap 'rm -rf "$inputs"' EXIT
mkdir -p "$inputs/sql" "$inputs/expected" "$out"
for dir in tests/pg_regress tests/portable; do
    for kind in sql expected; do
        [ -d "$dir/$kind" ] || continue
        for file in "$dir/$kind"/*; do
            ln -sfn "$PWD/$file" "$inputs/$kind/$(basename "$file")"
        done
    done
done
chmod -R a+rwX "$out"
drivers=()
[ -n "$PG_LIBRARY_PATH" ] && drivers=(env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH")
RATE_LIMITER_INSTALL=$install "${drivers[@]}" "$PGXS_DIR/src/test/regress/pg_regress" --bindir="$PG_BIN" \
    --launcher="$PWD/tests/portable/psql_launcher.sh" \
    --inputdir="$inputs" --outputdir="$out" \
    --host="$host" --port="$port" --user=postgres --dbname=rate_limiter_portable_regress \
    --schedule=tests/portable/schedule
