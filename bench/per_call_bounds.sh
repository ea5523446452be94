#!/usr/bin/env bash
# The work one call may take, native against portable (docs/guarantees.md,
# "Bounded work"): rate_check with a 1 MiB key on a fixed window without
# start (its key hashed once), and on a 32,767-shard fixed window (no
# shard has a row). Both editions in databases of their own on one
# throwaway cluster; ROUNDS (default 9) interleaved rounds, each call on
# a name not used before, in a session that has made a small call of
# the same shape; the median of each, and the ratio. Writes
# bench/report/per_call_bounds.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ROUNDS=${ROUNDS:-9}
work=$(mktemp -d /tmp/rate_limiter_bounds.XXXXXX)
cleanup() { stop_cluster "$work/pg"; rm -rf "$work"; }
trap cleanup EXIT
start_cluster "$work/pg"
bash scripts/portable.sh >/dev/null
psql_as() { sudo -u postgres env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
    -h "$work/pg" -p "$RL_PORT" "$@"; }
sudo -u postgres "$PG_BIN/createdb" -h "$work/pg" -p "$RL_PORT" native
sudo -u postgres "$PG_BIN/createdb" -h "$work/pg" -p "$RL_PORT" portable
psql_as -d native -c "CREATE EXTENSION rate_limiter" >/dev/null
psql_as -d portable -f "$PWD/dist/rate_limiter-portable.sql" >/dev/null
# One call's time in milliseconds, as psql's \timing reports it, in a
# session that has made a small call of each shape first (the portable
# edition's functions are then compiled, as in any session after its
# first call).
time_call() { # database, statement
    psql_as -d "$1" -c "SET rate_limiter.max_inline_shards = 32767" \
        -c "SELECT ok FROM rate_limiter.rate_check('warm', 'k', config => rate_limiter.fixed_window(10, '1 minute'))" \
        -c "SELECT ok FROM rate_limiter.rate_check('warm', 'k', config => rate_limiter.fixed_window(10, '1 minute', shards => 2))" \
        -c '\timing on' -c "$2" \
        | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
}
declare -A samples
for round in $(seq 1 "$ROUNDS"); do
    for edition in native portable; do
        samples[$edition,key]+="$(time_call "$edition" "SELECT ok FROM rate_limiter.rate_check('big_key_$round',
            pg_catalog.repeat('k', 1048576), config => rate_limiter.fixed_window(10, '1 minute'))") "
        samples[$edition,shards]+="$(time_call "$edition" "SELECT ok FROM rate_limiter.rate_check('many_shards_$round',
            'k', config => rate_limiter.fixed_window(100000, '1 minute', shards => 32767))") "
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
{
    echo "# Work per call: native against portable"
    echo
    echo "\`bash bench/per_call_bounds.sh\` ($(date -u +%F), PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'),"
    echo "$ROUNDS interleaved rounds, median of each; a call on a name not used before, in a session"
    echo "that made a small call of each shape first)."
    echo
    echo "| rate_check | native (ms) | portable (ms) | portable / native |"
    echo "|---|---:|---:|---:|"
    for case in key shards; do
        n=$(echo "${samples[native,$case]}" | median)
        p=$(echo "${samples[portable,$case]}" | median)
        label=$([ "$case" = key ] && echo "1 MiB key, fixed window without start" || echo "32,767-shard fixed window")
        echo "| $label | $n | $p | $(awk -v p="$p" -v n="$n" 'BEGIN { printf "%.1fx", p / n }') |"
    done
} > bench/report/per_call_bounds.md
cat bench/report/per_call_bounds.md
