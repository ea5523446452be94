#!/usr/bin/env bash
# Runs every benchmark scenario in one go and writes bench/report/report.md
# and bench/report/chart.png. Starts a throwaway PostgreSQL cluster (as
# `postgres`, in a temporary directory, port $RL_BENCH_PORT) and a throwaway
# redis-server on 127.0.0.1:$RL_REDIS_PORT without persistence, and two
# more with an append-only file on the next two ports (appendfsync always,
# everysec) for scenario 3; removes them all afterwards.
# QUICK=1 shrinks every scenario for a smoke run; SCENARIOS=1,6 runs only
# those (the report then holds only them).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
REDIS_PORT=${RL_REDIS_PORT:-6390}
prepare_bench
log "building the benchmark client"
cargo build -q --release -p rate_limiter_bench

work=$(mktemp -d /tmp/rate_limiter_bench.XXXXXX)
cleanup() {
    for port in "$REDIS_PORT" $((REDIS_PORT + 1)) $((REDIS_PORT + 2)); do
        redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    done
    stop_cluster "$work/pg"
    rm -rf "$work"
}
trap cleanup EXIT
start_cluster "$work/pg"
sudo -u postgres "$PG_BIN/psql" -q -h "$work/pg" -p "$RL_PORT" -d postgres \
    -c "ALTER SYSTEM SET shared_buffers = '1GB'" -c "ALTER SYSTEM SET max_wal_size = '4GB'" >/dev/null
sudo -u postgres env -u RUST_BACKTRACE "$PG_BIN/pg_ctl" -D "$work/pg/data" -w restart >/dev/null
sudo -u postgres "$PG_BIN/createdb" -h "$work/pg" -p "$RL_PORT" bench
# The portable edition (docs/guarantees.md, "Portable edition") in a
# database of its own, for scenario 1's comparison of the editions.
bash scripts/portable.sh >/dev/null
sudo -u postgres "$PG_BIN/createdb" -h "$work/pg" -p "$RL_PORT" bench_portable
sudo -u postgres env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    -h "$work/pg" -p "$RL_PORT" -d bench_portable -f "$PWD/dist/rate_limiter-portable.sql" >/dev/null
start_redis() { # port, then options
    local port=$1
    shift
    mkdir -p "$work/redis-$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' "$@" \
        --dir "$work/redis-$port" --daemonize yes --logfile "$work/redis-$port.log" >/dev/null
}
start_redis "$REDIS_PORT" --appendonly no
start_redis $((REDIS_PORT + 1)) --appendonly yes --appendfsync always
start_redis $((REDIS_PORT + 2)) --appendonly yes --appendfsync everysec

log "running the scenarios (about 50 minutes)"
export RATE_LIMITER_BENCH_URL="host=127.0.0.1 port=$RL_PORT user=postgres dbname=bench"
export RATE_LIMITER_BENCH_PORTABLE_URL="host=127.0.0.1 port=$RL_PORT user=postgres dbname=bench_portable"
export RATE_LIMITER_BENCH_PGBENCH="-h 127.0.0.1 -p $RL_PORT -U postgres bench"
export RATE_LIMITER_BENCH_REDIS="redis://127.0.0.1:$REDIS_PORT/"
export RATE_LIMITER_BENCH_REDIS_ALWAYS="redis://127.0.0.1:$((REDIS_PORT + 1))/"
export RATE_LIMITER_BENCH_REDIS_EVERYSEC="redis://127.0.0.1:$((REDIS_PORT + 2))/"
export RATE_LIMITER_BENCH_OUT=bench/report
# Scenario 6 restarts the server with and without the library preloaded.
export RATE_LIMITER_BENCH_PG_BIN=$PG_BIN RATE_LIMITER_BENCH_PGDATA=$work/pg/data
export RATE_LIMITER_BENCH_PG_OPTIONS=$RATE_LIMITER_TEST_PG_OPTIONS
export RATE_LIMITER_BENCH_PG_OPTIONS_WITHOUT_PRELOAD=$RATE_LIMITER_TEST_PG_OPTIONS_WITHOUT_PRELOAD
[ -n "${QUICK:-}" ] && export RATE_LIMITER_BENCH_QUICK=1
[ -n "${SCENARIOS:-}" ] && export RATE_LIMITER_BENCH_SCENARIOS=$SCENARIOS
./target/release/rate_limiter_bench
gnuplot -e "IN='bench/report/ratios.tsv'; OUT='bench/report/chart.png'" bench/chart.gp
cat bench/report/report.md
