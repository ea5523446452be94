#!/usr/bin/env bash
# The pg_regress and isolation schedules against a server run under
# Valgrind: PostgreSQL 15 built from Debian's source with
# assertions and USE_VALGRIND (RL_ASSERTS=1 in scripts/lib.sh), every
# process of the server under memcheck with PostgreSQL's own suppressions
# (src/tools/valgrind.supp). Prints a report: the schedules' results, the
# errors Valgrind found, and which of them have a frame in rate_limiter.so.
#
# Not part of scripts/test.sh (about half an hour): docs/valgrind-report.md
# is its output. Exit status 0 when no error has a rate_limiter frame and
# every test passed.
set -euo pipefail
cd "$(dirname "$0")/.."
export RL_PG=15 RL_ASSERTS=1 RL_PORT=${RL_PORT:-24379}
source scripts/lib.sh
ensure_tools
install_extension

work=$(mktemp -d /tmp/rate_limiter_valgrind.XXXXXX)
chmod a+rwx "$work"
dir=$work/cluster
mkdir -p "$dir" "$work/valgrind"
chown postgres:postgres "$dir" "$work/valgrind"
trap 'sudo -u postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
let_postgres_reach "$PG_BIN"
sudo -u postgres env LC_ALL=C "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync \
    --encoding=UTF8 --locale=C >/dev/null

# pg_ctl starts this instead of postgres: the postmaster and every backend
# it forks run under memcheck, each process logging to its own file.
cat >"$work/postgres-under-valgrind" <<WRAPPER
#!/bin/sh
exec valgrind --quiet --trace-children=yes --track-origins=yes --read-var-info=no \\
    --num-callers=40 --leak-check=no --error-markers=VALGRINDERROR-BEGIN,VALGRINDERROR-END \\
    --suppressions=$PG_TREE/valgrind.supp --log-file=$work/valgrind/%p.log \\
    $PG_BIN/postgres "\$@"
WRAPPER
chmod a+rx "$work/postgres-under-valgrind"
log "starting the server under Valgrind (slow)"
sudo -u postgres env PGCTLTIMEOUT=600 "$PG_BIN/pg_ctl" -p "$work/postgres-under-valgrind" -D "$dir/data" \
    -l "$dir/server.log" -w -t 600 \
    -o "-p $RL_PORT -k $dir -c listen_addresses=127.0.0.1 -c max_connections=50 -c max_prepared_transactions=20 -c shared_preload_libraries=rate_limiter -c statement_timeout=0" \
    start >/dev/null

started=$SECONDS
log "pg_regress schedule"
"$PGXS_DIR/src/test/regress/pg_regress" --bindir="$PG_BIN" \
    --inputdir=tests/pg_regress --outputdir="$work/regress" \
    --host="$dir" --port="$RL_PORT" --user=postgres --dbname=rate_limiter_regress \
    --schedule=tests/pg_regress/schedule >"$work/regress.log" 2>&1 || true
log "isolation schedule"
# statement_timeout.spec's timeout, long enough under memcheck (everything
# about 50 times slower) for its call to be inside the EXCEPTION block
# that reports the timeout when it fires.
PGOPTIONS="-c rate_limiter_test.statement_timeout=5s" \
"$PGXS_DIR/src/test/isolation/pg_isolation_regress" --bindir="$PG_BIN" \
    --inputdir=tests/isolation --outputdir="$work/isolation" \
    --host="$dir" --port="$RL_PORT" --user=postgres --dbname=rate_limiter_isolation \
    --schedule=tests/isolation/schedule >"$work/isolation.log" 2>&1 || true
elapsed=$((SECONDS - started))
sudo -u postgres "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 600 stop >/dev/null

regress_ok=$(grep -Ec '\.\.\. ok' "$work/regress.log" || true)
regress_failed=$(grep -Ec '\.\.\. FAILED' "$work/regress.log" || true)
isolation_ok=$(grep -Ec '\.\.\. ok' "$work/isolation.log" || true)
isolation_failed=$(grep -Ec '\.\.\. FAILED' "$work/isolation.log" || true)
processes=$(find "$work/valgrind" -name '*.log' | wc -l)
# Each error is one VALGRINDERROR-BEGIN ... END block; keep the blocks.
awk '/VALGRINDERROR-BEGIN/ {block = ""; inside = 1} inside {block = block $0 "\n"} /VALGRINDERROR-END/ {print block "----"; inside = 0}' \
    "$work"/valgrind/*.log >"$work/errors.txt" 2>/dev/null || true
errors=$(grep -c '^----$' "$work/errors.txt" || true)
ours=$(awk 'BEGIN {RS = "----\n"} /rate_limiter\.so/ {n++} END {print n + 0}' "$work/errors.txt")
traps=$(grep -c '^TRAP:' "$dir/server.log" || true)

cat <<REPORT
# Valgrind report (scripts/valgrind.sh)

- PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') built from Debian's source package with
  \`$("$PG_CONFIG" --configure | tr -d "'")\`; Valgrind $(valgrind --version | sed 's/valgrind-//'),
  memcheck with \`--track-origins=yes\` and PostgreSQL's \`src/tools/valgrind.supp\`; the
  library preloaded; $(date -u +%Y-%m-%d); rate_limiter at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src sql tests 2>/dev/null || echo " (with uncommitted changes)").
- pg_regress schedule: $regress_ok passed, $regress_failed failed. Isolation schedule:
  $isolation_ok passed, $isolation_failed failed. Both took $elapsed s under Valgrind.
- Server processes that ran under memcheck: $processes. Assertion failures (TRAP): $traps.
- **Errors Valgrind reported: $errors. Of them with a frame in rate_limiter.so: $ours.**
REPORT
if [ "$errors" -gt 0 ]; then
    echo
    echo "The errors (the first 200 lines):"
    echo '```'
    head -n 200 "$work/errors.txt"
    echo '```'
fi
for failed_log in "$work/regress/regression.diffs" "$work/isolation/regression.diffs"; do
    if [ -s "$failed_log" ]; then
        echo
        echo "Differences ($(basename "$(dirname "$failed_log")"), the first 60 lines):"
        echo '```'
        head -n 60 "$failed_log"
        echo '```'
    fi
done
[ "$ours" = 0 ] && [ "$regress_failed" = 0 ] && [ "$isolation_failed" = 0 ] && [ "$traps" = 0 ]
