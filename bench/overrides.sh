#!/usr/bin/env bash
# What per-key overrides cost a call (docs/overrides.md, "Cost"): a name
# whose keys have no override against a name with 1,000,000 overrides, the
# same calls on the same keys, in the same run.
#
# The keys: even k is 'o<k/2>', which has an override under the overridden
# name (half of them a plan of the same kind, half a fixed-window config
# of their own, whose rows carry a regime); odd k is '<k>', which has none.
# Both names are the same token bucket otherwise; the plain name has no
# override at all. Every key k in 1..2,000,000 has a state row under both
# names (as in a database whose customers all call): a call reads and
# updates an existing row in a state table of 4,000,000 rows.
#
# 1. Time: pgbench, 2 clients, one call per transaction, keys random in
#    1..2,000,000 (so under the overridden name half the calls probe an
#    override that no backend has cached), ROUNDS interleaved rounds of
#    SECONDS per contender; the medians and their ratio.
# 2. Instructions (callgrind, single-user backend, as bench/instructions.sh
#    counts them): per call of CALLS calls in one statement on existing
#    keys, in a new backend ("cold": every override probed) and again in
#    the same backend ("cached").
#
#   bash bench/overrides.sh   (about eight minutes; prints Markdown tables)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ROUNDS=${ROUNDS:-5} SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-10} CALLS=${CALLS:-1000}
OVERRIDES=${OVERRIDES:-1000000}
prepare_bench

work=$(mktemp -d /tmp/rate_limiter_overrides.XXXXXX)
trap 'stop_cluster "$work/pg"; rm -rf "$work"' EXIT
start_cluster "$work/pg"
psql_as() { sudo -u postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/pg" -p "$RL_PORT" "$@"; }
psql_as -d postgres -c "CREATE DATABASE bench" >/dev/null
psql_as -d bench >/dev/null <<SQL
CREATE EXTENSION rate_limiter;
SELECT rate_limiter.define('plain', rate_limiter.token_bucket(100, '1 minute'));
SELECT rate_limiter.define('overridden', rate_limiter.token_bucket(100, '1 minute'));
SELECT rate_limiter.define('pro', rate_limiter.token_bucket(1000, '1 minute'));
INSERT INTO rate_limiter.overrides (name, key, plan, kind, rate, period, shards)
SELECT 'overridden', 'o' || i,
       CASE WHEN i % 2 = 0 THEN 'pro' END,
       CASE WHEN i % 2 = 1 THEN 'fixed window'::rate_limiter.kind END,
       CASE WHEN i % 2 = 1 THEN 50 END,
       CASE WHEN i % 2 = 1 THEN interval '1 minute' END,
       CASE WHEN i % 2 = 1 THEN 1 END
FROM generate_series(1, $OVERRIDES) AS i;
-- One name after the other: no heap page holds rows of both names (an
-- update of one name's row would otherwise find its page pruned by the
-- other's updates, and be a cheaper HOT update for whichever runs later).
INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts, regime)
SELECT n.name, CASE WHEN k % 2 = 0 THEN 'o' || (k / 2) ELSE k::text END, 0, 50, now(),
       CASE WHEN n.name = 'overridden' AND k % 2 = 0 AND (k / 2) % 2 = 1
            THEN hashtextextended('fixed window/60000000/1' COLLATE "C", 0) END
FROM (VALUES (1, 'plain'), (2, 'overridden')) AS n(position, name), generate_series(1, 2000000) AS k
ORDER BY n.position, k;
VACUUM ANALYZE rate_limiter.overrides, rate_limiter.rate_limits;
SQL
overrides=$(psql_as -d bench -Atc "SELECT count(*) FROM rate_limiter.overrides")
size=$(psql_as -d bench -Atc "SELECT pg_size_pretty(pg_total_relation_size('rate_limiter.overrides'))")

key="CASE WHEN :k % 2 = 0 THEN 'o' || (:k / 2) ELSE :k::text END"
for name in plain overridden; do
    printf '%s\n' '\set k random(1, 2000000)' \
        "SELECT ok FROM rate_limiter.rate_limit('$name', $key);" >"$work/$name.sql"
done
chmod a+r "$work"/*.sql
tps() {
    sudo -u postgres "$PG_BIN/pgbench" -n -c 2 -j 2 -M prepared -T "$SECONDS_PER_ROUND" \
        -h 127.0.0.1 -p "$RL_PORT" -U postgres -f "$work/$1.sql" bench 2>/dev/null |
        sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
declare -A runs=([plain]="" [overridden]="")
for round in $(seq 1 "$ROUNDS"); do
    for name in plain overridden; do
        runs[$name]+="$(tps "$name") "
    done
done
median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.0f}')" $1; }
plain_tps=$(median "${runs[plain]}")
overridden_tps=$(median "${runs[overridden]}")

# Instructions: the cluster stopped, single-user backends on its data.
sudo -u postgres "$PG_BIN/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null
instructions() {
    printf '%s\n' "$1" >"$work/input.sql"
    chmod a+r "$work/input.sql"
    sudo -u postgres valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PG_BIN/postgres" --single -D "$work/pg/data" -c shared_preload_libraries=rate_limiter bench \
        <"$work/input.sql" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
statement() {
    echo "SELECT count(*) FROM generate_series($1, $2) AS g, LATERAL rate_limiter.rate_limit('$3', CASE WHEN g % 2 = 0 THEN 'o' || (g / 2) ELSE g::text END) AS r"
}
# per_call NAME: thousands of instructions per call on existing keys, in a
# new backend (every override probed) and again in it (cached); each run
# on keys no earlier run used, so that each reads what the others left.
first=1000
per_call() {
    local name=$1 few many again
    few=$(instructions "$(statement "$first" $((first + 49)) "$name")")
    first=$((first + 50))
    many=$(instructions "$(statement "$first" $((first + CALLS - 1)) "$name")")
    again=$(instructions "$(statement "$first" $((first + CALLS - 1)) "$name")"$'\n'"$(statement "$first" $((first + CALLS - 1)) "$name")")
    first=$((first + CALLS))
    python3 -c "print(f'{($many - $few) / ($CALLS - 50) / 1000:.1f} {($again - $many) / $CALLS / 1000:.1f}')"
}
read -r plain_new plain_updates <<<"$(per_call plain)"
read -r overridden_new overridden_updates <<<"$(per_call overridden)"
ratio() { python3 -c "print(f'{$1 / $2:.3f}x')"; }

echo "$overrides overrides ($size with its index), PostgreSQL $RL_PG, $(date -u +%F)."
echo
echo "| pgbench, 2 clients, median of $ROUNDS interleaved rounds of ${SECONDS_PER_ROUND} s | transactions per second | time per call / plain |"
echo "|---|---:|---:|"
echo "| name without overrides | $plain_tps | 1.000x |"
echo "| name with $overrides overrides (half the calls on an overridden key) | $overridden_tps | $(ratio "$plain_tps" "$overridden_tps") |"
echo "| rounds (plain) | ${runs[plain]% } | |"
echo "| rounds (overridden) | ${runs[overridden]% } | |"
echo
echo "| thousands of instructions per call, existing keys | a new backend (overrides probed) | again in it (overrides cached) |"
echo "|---|---:|---:|"
echo "| name without overrides | $plain_new | $plain_updates |"
echo "| name with $overrides overrides | $overridden_new | $overridden_updates |"
echo "| ratio | $(ratio "$overridden_new" "$plain_new") | $(ratio "$overridden_updates" "$plain_updates") |"
