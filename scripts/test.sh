#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs what is missing,
# builds and installs the extension, then runs
#   1. unit and property tests of the pure math       (cargo test), and
#      the layout rules of the code (no file over 600 lines, no module
#      cycle, Citus behind one seam: scripts/check_layout.py)
#   2. SQL golden-file tests                          (pg_regress)
#   3. lock-behaviour specs with interleaved sessions (pg_isolation_regress)
#   4. tests with many real concurrent connections, through pgbouncer, and
#      across a SIGKILL of the postmaster             (cargo test); then
#      pg_cron (15), amcheck of every state table the tests left, and the
#      hot standby promoted (last)
#   5. (PostgreSQL 15) the Debian package, installed with dpkg into a
#      clean Debian 12 made with debootstrap           (scripts/package_test.sh)
#  5b. (PostgreSQL 15) the README's install on your own server, its lines
#      run in another clean Debian 12            (scripts/source_install_test.sh)
#   6. (PostgreSQL 15, with and without assertions, and 18) tests against a
#      Citus cluster, a coordinator and two workers, with Citus built from
#      ../shared/citus (scripts/citus.sh), then the pg_regress schedule
#      tests/pg_regress/citus_schedule against the coordinator and a worker
#      of the distributed install
#   7. (PostgreSQL 15 and 18) the portable edition (docs/guarantees.md,
#      "Portable edition"; built first by scripts/portable.sh): its
#      pg_regress schedule and the isolation specs from its plain SQL file,
#      then through pg_tle (built from ../shared/pg_tle), on a server
#      without the native library or extension (tests/portable/suite.sh)
# against a throwaway cluster, and prints a summary line
# "tests: N passed, M failed", on every supported PostgreSQL version (15,
# 16, 17, 18) in turn, then once more on PostgreSQL 15 built with
# assertions (everything but pg_cron and the package, which are Debian's
# builds for Debian's server; and a check that no assertion failed in any
# server's log), then pg_upgrade from
# 15 to 18 (scripts/pg_upgrade_test.sh). RL_PG=16 (or 15, 17, 18) runs it
# on that version only; RL_PG=15 RL_ASSERTS=1 on the assertion-enabled build.
set -euo pipefail
cd "$(dirname "$0")/.."

# Without RL_PG: the whole suite on every supported version, a summary line
# per version, then the total.
run_started=$SECONDS
if [ -z "${RL_PG:-}" ]; then
    passed=0 failed=0 status=0 summary=()
    # What a new machine must build for the later runs, PostgreSQL 18 and
    # Citus 14.0.1 against it, then PostgreSQL 15 with assertions and Citus
    # 13.2.2 against that (together about a third of a new machine's
    # run), is built in the background while the runs of 15-17 test
    # (which leave a core idle much of the time); the run of 18 waits for
    # it. The packages and cargo-pgrx are installed first, so that the two
    # never run apt or cargo install at once, and the background touches
    # no pgrx registration (RL_TOOLS_READY: the run of 18 registers 18).
    source scripts/lib.sh
    started=$SECONDS
    ensure_tools
    prebuild_log=$(mktemp)
    (
        RL_PG=18 bash -c 'source scripts/lib.sh; ensure_postgres' &&
            RL_PG=18 RL_TOOLS_READY=1 bash scripts/citus.sh build &&
            RL_PG=15 RL_ASSERTS=1 bash scripts/citus.sh build
    ) >"$prebuild_log" 2>&1 &
    prebuild=$!
    summary+=("packages and cargo-pgrx: $((SECONDS - started)) s")
    for version in 15 16 17 18 15-assertions; do
        log=$(mktemp)
        asserts=0
        [ "$version" = 15-assertions ] && asserts=1
        if [ "$version" = 18 ]; then
            started=$SECONDS
            if wait "$prebuild"; then
                summary+=("PostgreSQL 18 and Citus 14.0.1, PostgreSQL 15 with assertions and Citus 13.2.2, built in the background: waited $((SECONDS - started)) s")
            else
                summary+=("the background build of PostgreSQL 18, 15 with assertions and their Citus failed (the runs below build what is missing); its last lines:")
                while IFS= read -r last; do summary+=("    $last"); done < <(tail -n 15 "$prebuild_log")
            fi
        fi
        started=$SECONDS
        # Steps that need no particular server version (the pure math, the
        # layout rules) run once, in the first run.
        once=0
        [ "$version" = 15 ] && once=1
        # The longest hammer tests run where they test something of their
        # own (docs/testing.md, "Where the time goes"): RL_LONG lists them.
        long=all
        case $version in
            16 | 17) long=none ;;
            15-assertions) long=native ;;
        esac
        if RL_PG=${version%-assertions} RL_ASSERTS=$asserts RL_ONCE=$once RL_LONG=$long bash scripts/test.sh 2>&1 | tee "$log"; then :; else status=1; fi
        line=$(grep -E '^tests: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1 || true)
        # The steps whose runner failed (a build, a server that would not
        # start, a runner's own error), as the version's run names them.
        steps=$(grep -E '^steps that failed: ' "$log" | tail -n 1 | sed -E 's/^steps that failed: //' || true)
        if [ -z "$line" ]; then
            # Say why at the end, where a truncated CI log still shows it.
            summary+=("PostgreSQL $version: no summary (the run broke before its tests); its last lines:")
            while IFS= read -r last; do summary+=("    $last"); done < <(tail -n 25 "$log")
            rm -f "$log"
            status=1
            continue
        fi
        read -r p f < <(sed -E 's/^tests: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/' <<<"$line")
        passed=$((passed + p)) failed=$((failed + f))
        summary+=("PostgreSQL $version: $p passed, $f failed ($((SECONDS - started)) s)${steps:+; steps that failed: $steps}")
        while IFS= read -r timing; do summary+=("    ${timing#step time: }"); done < <(grep -E '^step time: ' "$log" || true)
        while IFS= read -r why; do summary+=("    ${why#why: }"); done < <(grep -E '^why: ' "$log" | head -n 40 || true)
        rm -f "$log"
    done
    rm -f "$prebuild_log"
    # pg_upgrade needs both ends installed, as the runs above left them.
    log=$(mktemp)
    started=$SECONDS
    if bash scripts/pg_upgrade_test.sh 2>&1 | tee "$log"; then :; else status=1; fi
    line=$(grep -E '^pg_upgrade: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1 || echo "pg_upgrade: 0 passed, 1 failed")
    rm -f "$log"
    read -r p f < <(sed -E 's/^pg_upgrade: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/' <<<"$line")
    passed=$((passed + p)) failed=$((failed + f))
    summary+=("pg_upgrade 15 -> 18: $p passed, $f failed ($((SECONDS - started)) s)")
    echo
    printf '%s\n' "${summary[@]}"
    echo "the whole run: $((SECONDS - run_started)) s"
    echo "tests: $passed passed, $failed failed"
    exit $status
fi

source scripts/lib.sh

# Each step's time, as "step time: N s  NAME" lines (the run over every
# version repeats them in its summary).
step_name= step_started=$SECONDS
end_step() {
    if [ -n "$step_name" ]; then echo "step time: $((SECONDS - step_started)) s  ${step_name%%[:;(]*}"; fi
    step_name=
}
step() { # step NAME: ends the step before, starts this one
    end_step
    step_name=$1 step_started=$SECONDS
    log "$1"
}

step "setup: the packages, PostgreSQL $RL_PG$([ "$RL_ASSERTS" = 1 ] && echo " with assertions"), the extension built and installed"
ensure_tools
install_extension

passed=0
failed=0
broken=()   # steps whose runner failed (including failing to build or start)
count_cargo() { # adds up "test result: ok. N passed; M failed" lines (only
    # those: a test's own output may say "passed" or "failed" too)
    local p f
    p=$(grep -E '^test result: ' "$1" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
    f=$(grep -E '^test result: ' "$1" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
    passed=$((passed + p)); failed=$((failed + f))
}
count_pg() { # per test, pg_regress 15 prints "test NAME ... ok" (or
    # "... FAILED"), 16 and later "ok N - NAME" (or "not ok N - NAME")
    local p f
    p=$(grep -Ec '\.\.\. ok|^ok [0-9]+ ' "$1" || true)
    f=$(grep -Ec '\.\.\. FAILED|^not ok [0-9]+ ' "$1" || true)
    passed=$((passed + p)); failed=$((failed + f))
}

# Says why a step's runner failed: the last lines of its log, each line
# "why: ...", which the run over every version repeats in its summary at
# the end (where a CI log cut short still shows it).
explain() {
    echo "why: $1 failed; the last lines of its log:"
    tail -n 30 "$2" | sed 's/^/why:     /'
}

# The test drivers of PostgreSQL 16-18 must find their own libpq.
drivers=()
[ -n "$PG_LIBRARY_PATH" ] && drivers=(env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH")

results=$(mktemp -d)
step "0. the portable edition's release files (scripts/portable.sh), the demo and benchmark clients build"
bash scripts/portable.sh 2>&1 | tee "$results/portable_build.log" || broken+=("portable build")
cargo build -q -p rate_limiter_demo -p rate_limiter_bench 2>&1 | tee "$results/clients.log" || broken+=("clients")

# Needs no particular server: once per run over every version (RL_ONCE=0
# in the others), and in a run of one version. The integration tests that
# need only one version (the differential test's 5,000 short sequences)
# read it as RATE_LIMITER_TEST_ONCE.
export RATE_LIMITER_TEST_ONCE=${RL_ONCE:-1}
if [ "${RL_ONCE:-1}" = 1 ]; then
    step "1. unit and property tests of the pure math; the code's layout rules (scripts/check_layout.py)"
    cargo test --no-fail-fast -p rate_limiter_algorithm 2>&1 | tee "$results/unit.log" || broken+=("unit")
    count_cargo "$results/unit.log"
    python3 scripts/check_layout.py 2>&1 | tee "$results/layout.log" || true
    count_pg "$results/layout.log"
fi

cluster=$(mktemp -d /tmp/rate_limiter_test.XXXXXX)
pooler=$(mktemp -d /tmp/rate_limiter_pooler.XXXXXX)
standby=$(mktemp -d /tmp/rate_limiter_standby.XXXXXX)
trap 'stop_pgbouncer "$pooler"; stop_cluster "$standby"; stop_cluster "$cluster"' EXIT
# wal_level=logical: logical_decoding.rs decodes what the calls write.
RL_WAL_LEVEL=logical start_cluster "$cluster"
start_pgbouncer "$pooler"
start_standby "$cluster" "$standby"

step "2. SQL golden-file tests (pg_regress)"
chmod -R a+rwX "$results"
if "${drivers[@]}" "$PGXS_DIR/src/test/regress/pg_regress" --bindir="$PG_BIN" \
    --inputdir=tests/pg_regress --outputdir="$results/regress" \
    --host="$cluster" --port="$RL_PORT" --user=postgres --dbname=rate_limiter_regress \
    --schedule=tests/pg_regress/schedule 2>&1 | tee "$results/regress.log"; then :; else broken+=("pg_regress"); fi
[ -f "$results/regress/regression.diffs" ] && cat "$results/regress/regression.diffs"
count_pg "$results/regress.log"

step "3. lock-behaviour specs (pg_isolation_regress)"
if "${drivers[@]}" "$PGXS_DIR/src/test/isolation/pg_isolation_regress" --bindir="$PG_BIN" \
    --inputdir=tests/isolation --outputdir="$results/isolation" \
    --host="$cluster" --port="$RL_PORT" --user=postgres --dbname=rate_limiter_isolation \
    --schedule=tests/isolation/schedule 2>&1 | tee "$results/isolation.log"; then :; else broken+=("isolation"); fi
[ -f "$results/isolation/regression.diffs" ] && cat "$results/isolation/regression.diffs"
count_pg "$results/isolation.log"

step "4. concurrency, pooler, crash and client tests against the real server"
# The three longest hammer tests (together about 230 s a run): the
# portable edition's (plain SQL: nothing of it depends on the server's
# version, and the C assertions check none of it) run with RL_LONG=all,
# sharding.rs with all or native. A run of one version runs them all.
integration=()
case ${RL_LONG:-all} in
    none) skipped=" sharding portable_concurrency portable_differential " ;;
    native) skipped=" portable_concurrency portable_differential " ;;
    *) skipped=" " ;;
esac
if [ "$skipped" != " " ]; then
    echo "not in this run (RL_LONG=${RL_LONG}):$skipped"
    for file in tests/integration/tests/*.rs; do
        name=$(basename "$file" .rs)
        [[ $skipped == *" $name "* ]] || integration+=(--test "$name")
    done
fi
cargo test --no-fail-fast -p rate_limiter_integration_tests "${integration[@]}" -- --test-threads=1 --nocapture 2>&1 | tee "$results/integration.log" || broken+=("integration")
count_cargo "$results/integration.log"
if [ "${RATE_LIMITER_TEST_CRON:-}" = 1 ]; then
    step "4b. prune() scheduled with real pg_cron (the README's cron.schedule line)"
    cargo test --no-fail-fast -p rate_limiter_integration_tests --test cron -- --ignored --nocapture 2>&1 | tee "$results/cron.log" || broken+=("cron")
    count_cargo "$results/cron.log"
fi

step "4c. amcheck of every state table the tests left (verify_heapam, bt_index_check with heapallindexed)"
cargo test --no-fail-fast -p rate_limiter_integration_tests --test amcheck -- --ignored --nocapture 2>&1 | tee "$results/amcheck.log" || broken+=("amcheck")
count_cargo "$results/amcheck.log"

step "4d. the hot standby promoted (last: it ends the standby)"
cargo test --no-fail-fast -p rate_limiter_integration_tests --test promotion -- --ignored --nocapture 2>&1 | tee "$results/promotion.log" || broken+=("promotion")
count_cargo "$results/promotion.log"

# No server log of the run may show a failed assertion ("TRAP:", on the
# assertion-enabled build), a resource that a statement left open (a
# relcache, TupleDesc, buffer or snapshot reference leak) or a backend
# that died of a signal other than the tests' own SIGKILLs
# (scripts/lib.sh, server_log_problems). Each log named must be there and
# not empty: a log that is missing would hide them.
clean_logs() { # clean_logs WHAT LOG...
    local log missing=() found
    for log in "${@:2}"; do
        [ -s "$log" ] || missing+=("$log")
    done
    found=$(server_log_problems "${@:2}")
    if [ ${#missing[@]} -gt 0 ]; then
        failed=$((failed + 1)); echo "FAILED: the server logs are clean ($1): missing or empty: ${missing[*]}"
    elif [ -z "$found" ]; then
        passed=$((passed + 1)); echo "ok: the server logs are clean ($1: $(($# - 1)) logs)"
    else
        failed=$((failed + 1)); echo "FAILED: the server logs are clean ($1):"; head -n 40 <<<"$found"
    fi
}
clean_logs "the test server and its standby" "$cluster/server.log" "$standby/server.log"

if [ "$RL_PG" = 15 ] && [ "$RL_ASSERTS" != 1 ]; then
    step "5. the Debian package, installed into a clean Debian 12 (debootstrap)"
    bash scripts/package_test.sh 2>&1 | tee "$results/package.log" || broken+=("package")
    line=$(grep -E '^package: [0-9]+ passed, [0-9]+ failed$' "$results/package.log" || echo "package: 0 passed, 1 failed")
    read -r p f < <(sed -E 's/^package: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f))
    step "5b. the README's install on your own server, in a clean Debian 12 (debootstrap)"
    bash scripts/source_install_test.sh 2>&1 | tee "$results/source_install.log" || broken+=("source install")
    line=$(grep -E '^source install: [0-9]+ passed, [0-9]+ failed$' "$results/source_install.log" || echo "source install: 0 passed, 1 failed")
    read -r p f < <(sed -E 's/^source install: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/' <<<"$line")
    passed=$((passed + p)); failed=$((failed + f))
fi

# On PostgreSQL 15 with assertions (there the planner hook, the delegated
# calls and two-phase commit run under the server's assertions) and 18:
# Citus 13.2.2 and 14.0.1, each built once. Not on Debian's 15 as well,
# where the same Citus 13.2.2 runs on the same major version without
# assertions (RL_CITUS_ON_15=1 adds it, in a run of that version).
if { [ "$RL_PG" = 15 ] && { [ "$RL_ASSERTS" = 1 ] || [ "${RL_CITUS_ON_15:-0}" = 1 ]; }; } || [ "$RL_PG" = 18 ]; then
    step "6. a Citus cluster: a coordinator and two workers (Citus $([ "$RL_PG" = 15 ] && echo 13.2.2 || echo 14.0.1))"
    citus=$(mktemp -d /tmp/rate_limiter_citus.XXXXXX)
    trap 'bash scripts/citus.sh stop "$citus"; stop_pgbouncer "$pooler"; stop_cluster "$standby"; stop_cluster "$cluster"' EXIT
    # Starts the cluster in $citus: its conninfos in citus_urls, what it
    # said in citus_start.log.
    start_citus() {
        RL_CITUS_INSTALLED=1 bash scripts/citus.sh start "$citus" >"$results/citus_urls" 2>"$results/citus_start.log"
    }
    urls=
    if bash scripts/citus.sh build 2>&1 | tee "$results/citus_build.log"; then
        if ! start_citus; then
            # Once more, on other ports, so that something outside the
            # suite (a port taken, say) does not fail the run; why the
            # first start failed is still repeated at the end.
            explain "the Citus cluster's first start (tried again on ports $((RL_CITUS_PORT + 100))-$((RL_CITUS_PORT + 102)))" "$results/citus_start.log"
            bash scripts/citus.sh stop "$citus"
            export RL_CITUS_PORT=$((RL_CITUS_PORT + 100))
            start_citus || true
        fi
        urls=$(grep '^host=' "$results/citus_urls" | paste -sd ';' || true)
    fi
    if [ -n "$urls" ]; then
        RATE_LIMITER_TEST_CITUS_URLS=$urls RATE_LIMITER_TEST_CITUS_DIR=$citus cargo test --no-fail-fast -p rate_limiter_integration_tests --test citus --test citus_call_shapes --test citus_growth -- --ignored --test-threads=1 --nocapture 2>&1 | tee "$results/citus.log" || broken+=("citus")
        count_cargo "$results/citus.log"
        # The pg_regress schedule on the distributed install, through the
        # coordinator and through a worker.
        bash scripts/citus.sh regress "$results/citus_regress" 2>&1 | tee "$results/citus_regress.log" || broken+=("citus pg_regress")
        count_pg "$results/citus_regress.log"
        clean_logs "the Citus nodes" "$citus"/node*.log
    else
        broken+=("citus cluster")
        cat "$results/citus_build.log" "$results/citus_start.log" >"$results/citus_setup.log" 2>/dev/null || true
        explain "the Citus cluster's build or start" "$results/citus_setup.log"
    fi
    bash scripts/citus.sh stop "$citus"
fi

# The portable edition, on a server of its own where the native library is
# not loaded and the native extension not installed (tests/portable/suite.sh
# moves its control file aside for the run).
if [ "$RL_ASSERTS" != 1 ] && { [ "$RL_PG" = 15 ] || [ "$RL_PG" = 18 ]; }; then
    step "7. the portable edition: pg_regress and isolation (plain SQL install), then through pg_tle ($([ "$RL_PG" = 15 ] && echo 1.5.2 || echo 2f4b7b3)): pg_regress, a non-superuser owner's install, the update path"
    bash tests/portable/suite.sh "$results/portable" 2>&1 | tee "$results/portable.log" || broken+=("portable suite")
    count_pg "$results/portable.log"
fi

# Each failed test by name, and the first lines of each panic, as "why:"
# lines that the run over every version repeats at the end.
if [ "$failed" -gt 0 ]; then
    {
        grep -hE '^test .*\.\.\. FAILED|^not ok [0-9]+ |^FAILED' "$results"/*.log | head -n 20
        grep -h -A2 'panicked at' "$results"/*.log | grep -v '^--$' | head -n 18
    } 2>/dev/null | sed 's/^/why: /' || true
fi
end_step
rm -rf "$results"
echo
[ ${#broken[@]} -gt 0 ] && echo "steps that failed: ${broken[*]}"
echo "PostgreSQL $RL_PG$([ "$RL_ASSERTS" = 1 ] && echo " (assertions)")"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ] && [ ${#broken[@]} -eq 0 ]
