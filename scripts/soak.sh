#!/usr/bin/env bash
# Soak: calls from many connections while VACUUM FULL,
# CLUSTER, REINDEX CONCURRENTLY, TRUNCATE, plain VACUUM and an eager
# autovacuum work on the state table; then amcheck of the state table and
# the bound checked from what committed; then prune() on many rows (time,
# WAL written, locks held, and whether other callers wait for it).
#
#   bash scripts/soak.sh                  # 300 s of load, prune of 10,000,000 rows
#   SOAK_SECONDS=60 PRUNE_ROWS=1000000 bash scripts/soak.sh
#
# Not part of scripts/test.sh (it runs for minutes): its report is
# docs/soak-report.md (this script's output). RL_PG picks the version (15).
#
# How the bound is checked. Every call that admits also inserts a row into
# soak_admitted in the same transaction, so soak_admitted holds exactly the
# admissions that committed. TRUNCATE empties rate_limits and soak_admitted
# in one statement (a reset of the state is a refill, so the log starts
# again with it). The limits refill 1 token a day, so during the run a key
# can admit at most its capacity (+ 0.01 of refill): for every key
# admitted <= capacity, and admitted + the tokens stored for it = capacity
# (+ refill): no admission lost from the state, none made twice.
set -euo pipefail
cd "$(dirname "$0")/.."
export RL_PORT=${RL_PORT:-24369}
source scripts/lib.sh
ensure_tools
install_extension

seconds=${SOAK_SECONDS:-300}
prune_rows=${PRUNE_ROWS:-10000000}
clients=${SOAK_CLIENTS:-16}
keys=2000
capacity=50
global_capacity=1000

work=$(mktemp -d /tmp/rate_limiter_soak.XXXXXX)
cluster=$work/cluster
trap 'stop_cluster "$cluster"; rm -rf "$work"' EXIT
RL_SERVER_OPTIONS="-c autovacuum_naptime=1 -c autovacuum_vacuum_threshold=50 -c autovacuum_vacuum_scale_factor=0.01 -c autovacuum_analyze_threshold=50 -c log_autovacuum_min_duration=0 -c max_wal_size=4GB" \
    start_cluster "$cluster"
export LD_LIBRARY_PATH=${PG_LIBRARY_PATH}
sql() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$RL_PORT" -U postgres -d soak "$@"; }
sudo -u postgres "$PG_BIN/createdb" -h "$cluster" -p "$RL_PORT" soak
sql >/dev/null <<SQL
CREATE EXTENSION rate_limiter;
CREATE EXTENSION amcheck;
SELECT rate_limiter.define('soak', rate_limiter.token_bucket(1, '1 day', capacity => $capacity));
SELECT rate_limiter.define('soak_global', rate_limiter.token_bucket(1, '1 day', capacity => $global_capacity, shards => 8));
CREATE TABLE soak_admitted (name text NOT NULL, key text);
SQL

cat >"$work/calls.sql" <<SQL
\set k random(1, $keys)
INSERT INTO soak_admitted SELECT 'soak', :k::text FROM rate_limiter.rate_limit('soak', :k::text) AS r WHERE r.ok;
INSERT INTO soak_admitted SELECT 'soak_global', NULL FROM rate_limiter.rate_limit('soak_global', NULL) AS r WHERE r.ok;
SQL

# The maintenance loop: one command every second, in turn, until the load
# ends; what each did is counted, and its errors kept.
maintenance() {
    local commands=(
        "VACUUM FULL rate_limiter.rate_limits"
        "CLUSTER rate_limiter.rate_limits USING rate_limits_name_key_shard_key"
        "REINDEX TABLE CONCURRENTLY rate_limiter.rate_limits"
        # In the order the calls lock them (an INSERT's target, then the
        # state table the call in it locks), or it deadlocks with them.
        "TRUNCATE soak_admitted, rate_limiter.rate_limits"
        "VACUUM (ANALYZE) rate_limiter.rate_limits"
    )
    local i=0
    while [ ! -f "$work/done" ]; do
        local command=${commands[$((i % ${#commands[@]}))]}
        if sql -c "$command" 2>>"$work/maintenance.errors"; then
            echo "$command" >>"$work/maintenance.done"
        else
            echo "$command" >>"$work/maintenance.failed"
        fi
        i=$((i + 1))
        sleep 1
    done
}

log "load: $clients connections for $seconds s on $keys keys and a global limit with 8 shards, with maintenance"
maintenance &
maintainer=$!
started=$(sql -c "SELECT now()")
pgbench_log=$work/pgbench.log
# pgbench aborts a client on an error it does not retry (it retries
# serialization failures and deadlocks, --max-tries): its exit status and
# the aborted clients are checked below, as well as its failed transactions.
pgbench_status=0
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RL_PORT" -U postgres -c "$clients" -j 2 -T "$seconds" \
    --max-tries=10 -f "$work/calls.sql" soak >"$pgbench_log" 2>&1 || pgbench_status=$?
touch "$work/done"
wait "$maintainer" || true
transactions=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$pgbench_log")
failed_transactions=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$pgbench_log")
tps=$(sed -n 's/^tps = \([0-9]*\).*/\1/p' "$pgbench_log" | head -n 1)
aborted_clients=$(grep -c 'client [0-9]* aborted' "$pgbench_log" || true)
pgbench_errors=$(grep -E 'aborted|ERROR|error:' "$pgbench_log" | head -n 5 | tr '\n' ' ' || true)
autovacuums=$(grep -c 'automatic vacuum of table "soak.rate_limiter.rate_limits"' "$cluster/server.log" || true)

log "checks"
over_bound=$(sql -c "SELECT count(*) FROM (SELECT key FROM soak_admitted WHERE name = 'soak' GROUP BY key HAVING count(*) > $capacity) AS k")
global_admitted=$(sql -c "SELECT count(*) FROM soak_admitted WHERE name = 'soak_global'")
# admitted + stored tokens against capacity, per key (a key with no row
# and no admission is full; refill during the run is at most 0.01 token).
mismatched=$(sql <<SQL
SELECT count(*) FROM (
    SELECT a.key, a.admitted, s.value
    FROM (SELECT key, count(*) AS admitted FROM soak_admitted WHERE name = 'soak' GROUP BY key) AS a
    CROSS JOIN LATERAL rate_limiter.status('soak', a.key) AS s
    WHERE a.admitted + s.value < $capacity - 1e-9 OR a.admitted + s.value > $capacity + 0.01
) AS bad
SQL
)
global_state=$(sql -c "SELECT round(value::numeric, 4) FROM rate_limiter.status('soak_global', NULL)")
# The sharded global limit too: what committed (its admissions) plus its
# stored tokens (summed over the 8 shards) is its capacity, give or take
# the refill since the last TRUNCATE (1 token a day: under 0.01 in a run).
global_off=$(sql -c "SELECT count(*) FROM rate_limiter.status('soak_global', NULL) AS s
                     WHERE $global_admitted + s.value < $global_capacity - 1e-9
                        OR $global_admitted + s.value > $global_capacity + 0.01")
keys_admitted=$(sql -c "SELECT count(DISTINCT key) FROM soak_admitted WHERE name = 'soak'")
admissions=$(sql -c "SELECT count(*) FROM soak_admitted WHERE name = 'soak'")
heap_problems=$(sql -c "SELECT count(*) FROM verify_heapam('rate_limiter.rate_limits')")
index_checks=$(sql -c "SELECT count(bt_index_check(indexrelid, true)) FROM pg_index WHERE indrelid = 'rate_limiter.rate_limits'::regclass" 2>&1 || echo error)

log "prune() of $prune_rows rows"
sql >/dev/null <<SQL
TRUNCATE rate_limiter.rate_limits;
-- Rows of a name without a definition, last used two days ago: prune(older_than => '1 day') deletes them all.
INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts)
SELECT 'retired', i::text, 0, 1, now() - interval '2 days' FROM generate_series(1, $prune_rows) AS i;
-- And one live limit, used during the prune by another session.
SELECT count(*) FROM rate_limiter.rate_limit('soak', 'live1');
VACUUM (ANALYZE) rate_limiter.rate_limits;
CHECKPOINT;
SQL
table_size=$(sql -c "SELECT pg_size_pretty(pg_total_relation_size('rate_limiter.rate_limits'))")
wal_before=$(sql -c "SELECT pg_current_wal_lsn()")
sql -c "SELECT rate_limiter.prune(older_than => '1 day')" -c "SELECT pg_current_wal_lsn()" >"$work/prune.out" 2>&1 &
pruner=$!
prune_started=$SECONDS
max_locks=0 lock_kinds="" caller_max_ms=0 caller_calls=0
# While it runs: the locks the pruning backend holds (sampled each second)
# and how long a call on a live limit takes meanwhile.
while kill -0 "$pruner" 2>/dev/null; do
    read -r locks kinds < <(sql -F ' ' -c "SELECT count(*), coalesce(string_agg(DISTINCT locktype || ':' || mode, ','), '-') FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.query LIKE '%rate_limiter.prune%' AND a.pid <> pg_backend_pid()" 2>/dev/null || echo "0 -")
    [ "${locks:-0}" -gt "$max_locks" ] && max_locks=$locks lock_kinds=$kinds
    # From before the call to after it, inside the server (the key, 'live1',
    # depends on t0, so the call runs after t0 is read).
    ms=$(sql -c "SELECT round((extract(epoch FROM clock_timestamp() - a.t0) * 1000)::numeric, 1)
                 FROM (SELECT clock_timestamp() AS t0) AS a,
                      LATERAL (SELECT count(*) FROM rate_limiter.rate_limit('soak', 'live' || (a.t0 IS NOT NULL)::int)) AS b" 2>/dev/null || echo 0)
    caller_calls=$((caller_calls + 1))
    awk -v a="$ms" -v b="$caller_max_ms" 'BEGIN { exit !(a > b) }' && caller_max_ms=$ms
    sleep 1
done
wait "$pruner" || true
prune_seconds=$((SECONDS - prune_started))
deleted=$(head -n 1 "$work/prune.out")
wal_after=$(sed -n 2p "$work/prune.out")
wal_bytes=$(sql -c "SELECT pg_size_pretty(pg_wal_lsn_diff('$wal_after', '$wal_before'))" 2>/dev/null || echo "?")
left=$(sql -c "SELECT count(*) FROM rate_limiter.rate_limits")

ok() { if [ "$1" = yes ]; then echo "ok"; else echo "**FAILED**"; fi; }
verdict=0
check() { if eval "$1"; then echo yes; else echo no; fi; }
bound_ok=$(check "[ '$over_bound' = 0 ] && [ '$global_admitted' -le $global_capacity ]")
state_ok=$(check "[ '$mismatched' = 0 ] && [ '$global_off' = 0 ]")
amcheck_ok=$(check "[ '$heap_problems' = 0 ] && [ '$index_checks' != error ] && [ '$index_checks' -ge 1 ]")
errors_ok=$(check "[ '$pgbench_status' = 0 ] && [ '$aborted_clients' = 0 ] && [ -n '$failed_transactions' ] && [ '$failed_transactions' = 0 ] && [ ! -s '$work/maintenance.failed' ]")
prune_ok=$(check "[ '$deleted' = '$prune_rows' ] && [ '$left' = 1 ]")
for result in "$bound_ok" "$state_ok" "$amcheck_ok" "$errors_ok" "$prune_ok"; do [ "$result" = yes ] || verdict=1; done

cat <<REPORT
# Soak report (scripts/soak.sh)

- PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), $(nproc) cores, $(date -u +%Y-%m-%d); load started $started;
  rate_limiter at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src sql 2>/dev/null || echo " (with uncommitted changes)").
- Load: $clients connections (pgbench, each transaction one keyed call on 1 of $keys keys and
  one call on a global limit with 8 shards, each admission logged in the same transaction),
  $seconds s: $transactions transactions ($tps tps), failed: ${failed_transactions:-?}; pgbench exit status
  $pgbench_status, aborted clients: $aborted_clients${pgbench_errors:+ ($pgbench_errors)}.
- Maintenance on the state table meanwhile, one command a second in turn:
$(sort "$work/maintenance.done" 2>/dev/null | uniq -c | sed 's/^ */  - /')
  - failed: $(sort "$work/maintenance.failed" 2>/dev/null | uniq -c | tr '\n' ';' || true) $(head -c 300 "$work/maintenance.errors" 2>/dev/null | tr '\n' ' ')
  - autovacuum of the state table (server log): $autovacuums runs.

| check | result |
|---|---|
| bound: no key admitted more than its capacity ($capacity) since the last TRUNCATE; global $global_admitted ≤ $global_capacity | $(ok "$bound_ok") ($admissions admissions on $keys_admitted keys; keys over: $over_bound) |
| state = what committed: admitted + stored tokens = capacity for every key, and for the global limit over its 8 shards | $(ok "$state_ok") (keys off: $mismatched; global tokens left $global_state + admitted $global_admitted = $global_capacity: $([ "$global_off" = 0 ] && echo yes || echo no)) |
| amcheck: verify_heapam, bt_index_check(heapallindexed) on every index | $(ok "$amcheck_ok") (heap problems: $heap_problems; indexes checked: $index_checks) |
| no failed call (pgbench exit status 0, no aborted client, no failed transaction), no failed maintenance command | $(ok "$errors_ok") |
| prune() deleted every retired row and kept the live one | $(ok "$prune_ok") ($deleted deleted, $left left) |

prune() of $prune_rows rows (a name without a definition, last used two days ago;
table $table_size before): **$prune_seconds s**, WAL written: **$wal_bytes**.
Locks the pruning backend held (most at one sample, sampled each second): $max_locks
($lock_kinds). Meanwhile, calls on a live limit from another session ($caller_calls, one a second) took at most
$caller_max_ms ms each: prune locks only the rows it deletes.
REPORT
exit $verdict
