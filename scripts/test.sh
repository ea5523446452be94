#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what is missing,
# builds and installs the extension, then runs
#   1. unit and property tests of the pure math       (cargo test)
#   2. SQL golden-file tests                          (pg_regress)
#   3. lock-behaviour specs with interleaved sessions (pg_isolation_regress)
#   4. tests with many real concurrent connections, through pgbouncer, and
#      across a SIGKILL of the postmaster             (cargo test)
# against a throwaway cluster, and prints a summary line
# "tests: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_tools
install_extension

passed=0
failed=0
broken=()   # steps whose runner failed (including failing to build or start)
count_cargo() { # adds up "test result: ok. N passed; M failed" lines
    local p f
    p=$(grep -Eo '[0-9]+ passed' "$1" | awk '{s+=$1} END {print s+0}')
    f=$(grep -Eo '[0-9]+ failed' "$1" | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p)); failed=$((failed + f))
}
count_pg() { # pg_regress prints "test NAME ... ok" or "... FAILED" per test
    local p f
    p=$(grep -Ec '\.\.\. ok' "$1" || true)
    f=$(grep -Ec '\.\.\. FAILED' "$1" || true)
    passed=$((passed + p)); failed=$((failed + f))
}

results=$(mktemp -d)
log "1. unit and property tests of the pure math"
cargo test -p rate_limiter_algorithm 2>&1 | tee "$results/unit.log" || broken+=("unit")
count_cargo "$results/unit.log"

cluster=$(mktemp -d /tmp/rate_limiter_test.XXXXXX)
pooler=$(mktemp -d /tmp/rate_limiter_pooler.XXXXXX)
trap 'stop_pgbouncer "$pooler"; stop_cluster "$cluster"' EXIT
start_cluster "$cluster"
start_pgbouncer "$pooler"

log "2. SQL golden-file tests (pg_regress)"
chmod -R a+rwX "$results"
if "$PGXS_DIR/src/test/regress/pg_regress" \
    --inputdir=tests/pg_regress --outputdir="$results/regress" \
    --host="$cluster" --port="$RL_PORT" --user=postgres --dbname=rate_limiter_regress \
    --schedule=tests/pg_regress/schedule 2>&1 | tee "$results/regress.log"; then :; else broken+=("pg_regress"); fi
[ -f "$results/regress/regression.diffs" ] && cat "$results/regress/regression.diffs"
count_pg "$results/regress.log"

log "3. lock-behaviour specs (pg_isolation_regress)"
if "$PGXS_DIR/src/test/isolation/pg_isolation_regress" \
    --inputdir=tests/isolation --outputdir="$results/isolation" \
    --host="$cluster" --port="$RL_PORT" --user=postgres --dbname=rate_limiter_isolation \
    --schedule=tests/isolation/schedule 2>&1 | tee "$results/isolation.log"; then :; else broken+=("isolation"); fi
[ -f "$results/isolation/regression.diffs" ] && cat "$results/isolation/regression.diffs"
count_pg "$results/isolation.log"

log "4. concurrency, pooler, crash and client tests against the real server"
cargo test -p rate_limiter_integration_tests -- --test-threads=1 --nocapture 2>&1 | tee "$results/integration.log" || broken+=("integration")
count_cargo "$results/integration.log"

rm -rf "$results"
echo
[ ${#broken[@]} -gt 0 ] && echo "steps that failed: ${broken[*]}"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ] && [ ${#broken[@]} -eq 0 ]
