#!/usr/bin/env bash
# Instructions per call: scenario 1's calls, each counted by callgrind in a
# single-user backend (postgres --single under valgrind --tool=callgrind).
# A count does not move with the machine's load as a time does (this
# machine's times move by 20-50% from run to run), so it shows a change of
# a few percent; it is not a time: a cache miss counts as one instruction.
#
# Each contender runs 50 calls, then CALLS (default 1000) calls, in one
# statement each, in two backends; the difference of the two totals over
# CALLS - 50 is the cost of one call, the backend's start and the
# statement's own cost cancelling out. "new keys": every call creates its
# key's row; "updates": the same statement again, every key existing.
# Read-only contenders find the keys that rate_limit made.
#
# A second table counts scenario 3's form: one prepared statement per call,
# each an EXECUTE inside an open transaction (50, then CALLS of them, as
# above): the statement's planning-free execution, the executor's start-up
# and end, and the call. Writers get new keys (as scenario 3's calls do),
# readers the keys rate_limit made. The single-user backend prints each
# result row to its (discarded) output, a few thousand instructions that a
# client connection spends on sending the row instead.
#
# A third table (`bash bench/instructions.sh preload`, printed alone) is
# what preloading the library costs a server: the same counts with
# shared_preload_libraries = rate_limiter against the library not loaded
# at start (then `rate_limiter` loads at its first call, in both counted
# backends alike, so that cancels out): statements that never call the
# limiter (SELECT 1, a primary-key SELECT) pay only for what the library
# installs at load, and scenario 1's calls pay for the statistics, which
# count only when preloaded.
#
#   bash bench/instructions.sh          (about three minutes; prints two Markdown tables)
#   bash bench/instructions.sh preload  (about three minutes; prints the third)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
CALLS=${CALLS:-1000}
prepare_bench
bash scripts/portable.sh >/dev/null

work=$(mktemp -d /tmp/rate_limiter_instructions.XXXXXX)
trap 'stop_cluster "$work/pg"; rm -rf "$work"' EXIT
RL_PRELOAD=0 start_cluster "$work/pg"
psql_as() { sudo -u postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/pg" -p "$RL_PORT" "$@" >/dev/null; }
define="SELECT rate_limiter.define('bench', rate_limiter.token_bucket(100, '1 minute', capacity => 100))"
psql_as -d postgres -c "CREATE DATABASE native" -c "CREATE DATABASE portable"
psql_as -d native -c "CREATE EXTENSION rate_limiter" -c "$define" \
    -f bench/baselines/plpgsql.sql -f bench/baselines/floor.sql
psql_as -d portable -f dist/rate_limiter-portable.sql -c "$define"
sudo -u postgres "$PG_BIN/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null

# instructions DATABASE SQL: the instructions a single-user backend
# executes for SQL (one statement per line), with the libraries of
# PRELOAD preloaded (none by default).
PRELOAD=
instructions() {
    printf '%s\n' "$2" >"$work/input.sql"
    chmod a+r "$work/input.sql"
    sudo -u postgres valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PG_BIN/postgres" --single -D "$work/pg/data" -c shared_preload_libraries="$PRELOAD" "$1" \
        <"$work/input.sql" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# statement N CALL [COUNTED]: one statement calling CALL for g in 1..N,
# counting COUNTED (default *). Read-only contenders count a column of
# their rows, as scenario 1 does, so that each reads what it is compared
# for: under count(*) the planner drops the primary-key SELECT's columns
# and makes it an index-only scan, which reads no column of the row.
statement() { echo "SELECT count(${3:-*}) FROM generate_series(1, $1) AS g, LATERAL $2 AS r"; }
# truncate_all DATABASE: the statement emptying every contender's table.
truncate_all() {
    if [ "$1" = native ]; then
        echo "TRUNCATE rate_limiter.rate_limits, baseline.plpgsql_limits, baseline.floor_limits"
    else
        echo "TRUNCATE rate_limiter.rate_limits"
    fi
}
# per_call DATABASE CALL [FILL [COUNTED]]: "new keys" and "updates",
# thousands of instructions per call; FILL (a call) makes the keys first;
# COUNTED as in statement.
per_call() {
    local database=$1 call=$2 fill=${3:-} counted=${4:-}
    local truncate
    truncate=$(truncate_all "$database")
    # (The primary-key SELECT as a nested loop of index probes, as in
    # scenario 1: a hash join would read the table once for all keys.)
    local prefix="SET enable_hashjoin = off"$'\n'"SET enable_mergejoin = off"$'\n'$truncate
    [ -n "$fill" ] && prefix+=$'\n'$(statement "$CALLS" "$fill")$'\n'"ANALYZE rate_limiter.rate_limits"
    local few many again
    few=$(instructions "$database" "$prefix"$'\n'"$(statement 50 "$call" "$counted")")
    many=$(instructions "$database" "$prefix"$'\n'"$(statement "$CALLS" "$call" "$counted")")
    again=$(instructions "$database" "$prefix"$'\n'"$(statement "$CALLS" "$call" "$counted")"$'\n'"$(statement "$CALLS" "$call" "$counted")")
    python3 -c "print(f'{($many - $few) / ($CALLS - 50) / 1000:.1f} | {($again - $many) / $CALLS / 1000:.1f}')"
}

# per_statement DATABASE STATEMENT [FILL]: thousands of instructions per
# EXECUTE of STATEMENT (prepared, its one parameter the key) inside an open
# transaction; the keys are new unless FILL (a call) makes them first.
per_statement() {
    local database=$1 sql=$2 fill=${3:-}
    local prefix
    prefix=$(truncate_all "$database")
    [ -n "$fill" ] && prefix+=$'\n'$(statement "$CALLS" "$fill")$'\n'"ANALYZE rate_limiter.rate_limits"
    prefix+=$'\n'"PREPARE p(text) AS $sql"$'\n'"BEGIN"
    executes() { seq 1 "$1" | sed "s/.*/EXECUTE p('&')/"; echo COMMIT; }
    local few many
    few=$(instructions "$database" "$prefix"$'\n'"$(executes 50)")
    many=$(instructions "$database" "$prefix"$'\n'"$(executes "$CALLS")")
    python3 -c "print(f'{($many - $few) / ($CALLS - 50) / 1000:.1f}')"
}

# per_query DATABASE STATEMENT [FILL]: thousands of instructions per
# STATEMENT sent as a query of its own (parsed and planned each time: the
# planner's hooks run), inside an open transaction, `&` in it replaced by
# the query's number; the keys made first by FILL (a call), if given.
per_query() {
    local database=$1 sql=$2 fill=${3:-}
    local prefix
    prefix=$(truncate_all "$database")
    [ -n "$fill" ] && prefix+=$'\n'$(statement "$CALLS" "$fill")$'\n'"ANALYZE rate_limiter.rate_limits"
    prefix+=$'\n'"BEGIN"
    queries() { seq 1 "$1" | sed "s/.*/$sql/"; echo COMMIT; }
    local few many
    few=$(instructions "$database" "$prefix"$'\n'"$(queries 50)")
    many=$(instructions "$database" "$prefix"$'\n'"$(queries "$CALLS")")
    python3 -c "print(f'{($many - $few) / ($CALLS - 50) / 1000:.1f}')"
}

limit="rate_limiter.rate_limit('bench', g::text)"
pk_select="SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = \$1 AND shard = 0"

if [ "${1:-}" = preload ]; then
    # ratio A B: A / B to two decimals.
    ratio() { python3 -c "print(f'{$1 / $2:.3f}x')"; }
    echo "| thousands of instructions | not loaded | preloaded | preloaded / not loaded |"
    echo "|---|---:|---:|---:|"
    row() {
        local label=$1 off on
        shift
        PRELOAD=
        off=$("$@")
        PRELOAD=rate_limiter
        on=$("$@")
        echo "| $label | $off | $on | $(ratio "$on" "$off") |"
    }
    row "SELECT 1, a query of its own in an open transaction" per_query native "SELECT 1"
    row "primary-key SELECT of the state row, a query of its own" per_query native "SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = '&' AND shard = 0" "$limit"
    row "SELECT lower('&'), upper('&'): two function calls in the target list" per_query native "SELECT lower('&'), upper('&')"
    row "SELECT 1, per EXECUTE in an open transaction" per_statement native "SELECT 1"
    row "primary-key SELECT of the state row, per EXECUTE" per_statement native "$pk_select" "$limit"
    new() { per_call native "$limit" | cut -d'|' -f1 | tr -d ' '; }
    updates() { per_call native "$limit" | cut -d'|' -f2 | tr -d ' '; }
    row "scenario 1: rate_limit, new keys (per call)" new
    row "scenario 1: rate_limit, updates (per call)" updates
    exit 0
fi

echo "| call | new keys | updates |"
echo "|---|---:|---:|"
echo "| native extension: rate_limit | $(per_call native "$limit") |"
echo "| portable edition: rate_limit | $(per_call portable "$limit") |"
echo "| (a) PL/pgSQL | $(per_call native "baseline.plpgsql_token_bucket('bench', g::text, 1, 100, 60000, 100)") |"
echo "| (b) floor (SQL function) | $(per_call native "baseline.floor_token_bucket('bench', g::text, 1, 100, 60000, 100)") |"
pk_row="(SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'bench' AND key = g::text AND shard = 0)"
echo "| native extension: rate_check | — | $(per_call native "rate_limiter.rate_check('bench', g::text)" "$limit" r.ok | cut -d'|' -f2) |"
echo "| primary-key SELECT of the state row (value and ts) | — | $(per_call native "$pk_row" "$limit" r.ts | cut -d'|' -f2) |"
echo "| a set-returning function alone: generate_series(g, g) | — | $(per_call native "generate_series(g, g)" "" r | cut -d'|' -f2) |"
echo "| the primary-key SELECT under count(*) (an index-only probe, for reference) | — | $(per_call native "$pk_row" "$limit" | cut -d'|' -f2) |"

# (One line: the single-user backend reads a statement per line.)
floor="INSERT INTO baseline.floor_limits AS l (name, key, value, ts) VALUES ('bench', \$1, 100 - 1, clock_timestamp()) ON CONFLICT (name, key) DO UPDATE SET value = least(l.value + greatest(0, extract(epoch FROM clock_timestamp() - l.ts) * 1000) * 100 / 60000, 100) - 1, ts = greatest(l.ts, clock_timestamp()) WHERE least(l.value + greatest(0, extract(epoch FROM clock_timestamp() - l.ts) * 1000) * 100 / 60000, 100) - 1 >= 0 RETURNING value"
echo
echo "| statement, per EXECUTE in an open transaction | new keys | existing keys |"
echo "|---|---:|---:|"
echo "| SELECT 1 | — | $(per_statement native "SELECT 1") |"
echo "| primary-key SELECT of the state row | — | $(per_statement native "$pk_select" "$limit") |"
echo "| native extension: rate_check | — | $(per_statement native "SELECT ok, retry_after, remaining FROM rate_limiter.rate_check('bench', \$1)" "$limit") |"
echo "| native extension: rate_limit | $(per_statement native "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('bench', \$1)") | — |"
echo "| portable edition: rate_limit | $(per_statement portable "SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('bench', \$1)") | — |"
echo "| (a) PL/pgSQL | $(per_statement native "SELECT * FROM baseline.plpgsql_token_bucket('bench', \$1, 1, 100, 60000, 100)") | — |"
echo "| (b) floor (bare statement) | $(per_statement native "$floor") | — |"
