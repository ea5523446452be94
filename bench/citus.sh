#!/usr/bin/env bash
# Scenario 7 of the benchmark: a Citus cluster of this machine (a
# coordinator and two workers, started by scripts/citus.sh on ports
# $RL_CITUS_PORT and the next two, 25440-25442 on PostgreSQL 15, removed
# afterwards), the limiter distributed beside an
# application table, against the plain-SQL upsert on a table distributed
# the same way (bench/src/citus.rs). Writes bench/report/citus/report.md.
# QUICK=1 shrinks it for a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_tools
install_extension
log "building the benchmark client"
cargo build -q --release -p rate_limiter_bench

cluster=$(mktemp -d /tmp/rate_limiter_citus_bench.XXXXXX)
trap 'bash scripts/citus.sh stop "$cluster"' EXIT
urls=$(RL_CITUS_INSTALLED=1 bash scripts/citus.sh start "$cluster")
coordinator=${urls%%$'\n'*}

log "running scenario 7 (about 3 minutes)"
export RATE_LIMITER_BENCH_URL=$coordinator
export RATE_LIMITER_BENCH_PGBENCH="-h 127.0.0.1 -p $RL_CITUS_PORT -U postgres postgres"
export RATE_LIMITER_BENCH_OUT=bench/report/citus
export RATE_LIMITER_BENCH_SCENARIOS=7
[ -n "${QUICK:-}" ] && export RATE_LIMITER_BENCH_QUICK=1
./target/release/rate_limiter_bench
gnuplot -e "IN='bench/report/citus/ratios.tsv'; OUT='bench/report/citus/chart.png'" bench/chart.gp
cat bench/report/citus/report.md
