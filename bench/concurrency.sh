#!/usr/bin/env bash
# What a concurrency limit costs and how busy it keeps its slots
# (docs/concurrency.md), in both editions, in the same run:
#   1. acquire + commit of a transaction lease on a warm key against a
#      token bucket's rate_limit + commit (S1's setup: one pgbench client,
#      one call per transaction, KEYS existing keys picked at random):
#      transactions per second, ROUNDS interleaved rounds of SECONDS each,
#      the median; the ratio is the token bucket's rate over acquire's
#      (the time of an acquire + commit over a rate_limit + commit);
#   2. 300% demand on one key with max = 8, S8's style: open-loop arrivals
#      (pgbench -R, Poisson) at three times what 8 slots held WORK_MS each
#      serve, 48 clients; an admitted transaction holds its slot WORK_MS
#      (pg_sleep) and counts itself in an unlogged table, a refused one
#      ends at once. Throughput is admitted / (8 / WORK_MS). A refused
#      arrival is gone, so even a limiter that costs nothing cannot keep
#      the slots busy all the time: a freed slot waits for the next
#      arrival. The bound is Erlang's loss formula (8 servers, offered load
#      3 x 8, holding time WORK_MS): admitted / bound says how close the
#      limiter comes to an ideal one. The latency of all transactions
#      shows that refusals do not wait (an admitted one takes WORK_MS).
#   3. 300% demand as a worker pool: 24 workers for max = 8, each in a
#      closed loop (the same transaction; after a refusal it waits
#      RETRY_MS on the client side, then asks again). Here a freed slot
#      waits only for the next worker's retry, so an ideal limiter keeps
#      the slots busy all the time: it admits what 8 workers running the
#      same transaction without a limiter do (the baseline, in the same
#      rounds: the work's WORK_MS plus its insert and commit). POOL_ROUNDS
#      interleaved rounds, the medians.
#
#   bash bench/concurrency.sh   (about eight minutes; prints three Markdown tables)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
KEYS=${KEYS:-1000}
ROUNDS=${ROUNDS:-7}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-5}
WORK_MS=${WORK_MS:-50}
OVERLOAD_SECONDS=${OVERLOAD_SECONDS:-20}
RETRY_MS=${RETRY_MS:-10}
POOL_ROUNDS=${POOL_ROUNDS:-3}
prepare_bench
bash scripts/portable.sh >/dev/null

work=$(mktemp -d /tmp/rate_limiter_concurrency.XXXXXX)
chmod a+rx "$work"
trap 'stop_cluster "$work/pg"; rm -rf "$work"' EXIT
RL_PRELOAD=0 start_cluster "$work/pg"
psql_as() { sudo -u postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/pg" -p "$RL_PORT" "$@"; }
pgbench_as() { sudo -u postgres "$PG_BIN/pgbench" -h "$work/pg" -p "$RL_PORT" -n "$@"; }
define="SELECT rate_limiter.define('bucket', rate_limiter.token_bucket(1000000, '1 day'));
SELECT rate_limiter.define('slots', rate_limiter.concurrency(4));
SELECT rate_limiter.define('pool', rate_limiter.concurrency(8));
CREATE UNLOGGED TABLE done (n int);"
warm="SELECT count(*) FROM generate_series(1, $KEYS) AS g,
    LATERAL (SELECT rate_limiter.rate_limit('bucket', g::text)) AS b,
    LATERAL (SELECT rate_limiter.acquire('slots', g::text)) AS a"
psql_as -d postgres -c "CREATE DATABASE native" -c "CREATE DATABASE portable" >/dev/null
psql_as -d native -c "CREATE EXTENSION rate_limiter" -c "$define" -c "$warm" -c "VACUUM ANALYZE" >/dev/null
psql_as -d portable -f dist/rate_limiter-portable.sql -c "$define" -c "$warm" -c "VACUUM ANALYZE" >/dev/null

cat >"$work/bucket.sql" <<EOF
\set k random(1, $KEYS)
SELECT ok FROM rate_limiter.rate_limit('bucket', :k::text);
EOF
cat >"$work/acquire.sql" <<EOF
\set k random(1, $KEYS)
SELECT ok FROM rate_limiter.acquire('slots', :k::text);
EOF
cat >"$work/overload.sql" <<EOF
BEGIN;
SELECT ok FROM rate_limiter.acquire('pool', 'k') \gset
\if :ok
SELECT pg_sleep($WORK_MS / 1000.0);
INSERT INTO done VALUES (1);
\endif
COMMIT;
EOF
cat >"$work/work.sql" <<EOF
BEGIN;
SELECT pg_sleep($WORK_MS / 1000.0);
INSERT INTO done VALUES (1);
COMMIT;
EOF
# The worker pool's: overload.sql, then a wait after a refusal.
cp "$work/overload.sql" "$work/pool.sql"
cat >>"$work/pool.sql" <<EOF
\if :ok
\else
\sleep $RETRY_MS ms
\endif
EOF
chmod a+r "$work"/*.sql
tps() { pgbench_as -c 1 -T "$SECONDS_PER_ROUND" -f "$work/$2.sql" "$1" | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
median() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

declare -A rates
for round in $(seq 1 "$ROUNDS"); do
    for database in native portable; do
        for script in bucket acquire; do
            rates[$database.$script]+="$(tps "$database" "$script") "
        done
    done
done
echo "| one client, a call + commit per transaction, $KEYS warm keys (median of $ROUNDS rounds of ${SECONDS_PER_ROUND} s) | token bucket rate_limit, tps | acquire (transaction lease), tps | acquire / rate_limit, time |"
echo "|---|---:|---:|---:|"
for database in native portable; do
    # shellcheck disable=SC2086
    bucket=$(median ${rates[$database.bucket]})
    # shellcheck disable=SC2086
    acquire=$(median ${rates[$database.acquire]})
    python3 -c "print(f'| $database edition | {$bucket:.0f} | {$acquire:.0f} | {$bucket / $acquire:.3f}x |')"
done
echo

# 300% demand: Poisson arrivals at three times what the slots serve.
arrivals=$(python3 -c "print(int(3 * 8 * 1000 / $WORK_MS))")
bound=$(python3 -c "
a, c = 3 * 8.0, 8
b = 1.0
for k in range(1, c + 1):
    b = a * b / (k + a * b)
print($arrivals * (1 - b))")
echo "| 300% demand on one key: $arrivals arrivals/s (Poisson), max = 8, ${WORK_MS} ms of work, ${OVERLOAD_SECONDS} s | admitted/s | throughput / (8 / work) | admitted / Erlang bound ($(printf '%.1f' "$bound")/s) | refused/s | mean latency, ms (all) |"
echo "|---|---:|---:|---:|---:|---:|"
for database in native portable; do
    psql_as -d "$database" -c "TRUNCATE done" >/dev/null
    out=$(pgbench_as -c 48 -j 2 -R "$arrivals" -T "$OVERLOAD_SECONDS" -f "$work/overload.sql" "$database")
    total=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    latency=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' <<<"$out")
    admitted=$(psql_as -d "$database" -At -c "SELECT count(*) FROM done")
    python3 -c "
a, t, s = $admitted, $total, $OVERLOAD_SECONDS
print(f'| $database edition | {a / s:.1f} | {a * $WORK_MS / 1000 / (8 * s):.3f} | {a / s / $bound:.3f} | {(t - a) / s:.1f} | $latency |')"
done
echo

# 300% demand as a worker pool: 24 workers for 8 slots, each asking again
# RETRY_MS after a refusal; against 8 workers running the same transaction
# without a limiter (what 8 in flight can do at most). Interleaved rounds,
# medians.
declare -A pool
for round in $(seq 1 "$POOL_ROUNDS"); do
    pool[baseline]+="$(pgbench_as -c 8 -j 2 -T "$OVERLOAD_SECONDS" -f "$work/work.sql" native | sed -n 's/^tps = \([0-9.]*\).*/\1/p') "
    for database in native portable; do
        psql_as -d "$database" -c "TRUNCATE done" >/dev/null
        out=$(pgbench_as -c 24 -j 2 -T "$OVERLOAD_SECONDS" -f "$work/pool.sql" "$database")
        total=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
        admitted=$(psql_as -d "$database" -At -c "SELECT count(*) FROM done")
        pool[$database.admitted]+="$(python3 -c "print($admitted / $OVERLOAD_SECONDS)") "
        pool[$database.refused]+="$(python3 -c "print(($total - $admitted) / $OVERLOAD_SECONDS)") "
    done
done
# shellcheck disable=SC2086
baseline=$(median ${pool[baseline]})
echo "| 300% demand as a worker pool: 24 workers, max = 8, ${WORK_MS} ms of work, ${RETRY_MS} ms before asking again (median of $POOL_ROUNDS rounds of ${OVERLOAD_SECONDS} s) | admitted/s | admitted / 8 workers without a limiter ($(printf '%.1f' "$baseline")/s) | throughput / (8 / ${WORK_MS} ms) | refused/s |"
echo "|---|---:|---:|---:|---:|"
for database in native portable; do
    # shellcheck disable=SC2086
    admitted=$(median ${pool[$database.admitted]})
    # shellcheck disable=SC2086
    refused=$(median ${pool[$database.refused]})
    python3 -c "
a = $admitted
print(f'| $database edition | {a:.1f} | {a / $baseline:.3f} | {a * $WORK_MS / 8000:.3f} | {$refused:.1f} |')"
done
