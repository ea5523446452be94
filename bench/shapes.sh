#!/usr/bin/env bash
# What a limit's shape costs a call (docs/shapes.md): rate_limit of a
# defined sliding window against a token bucket and a fixed window of the
# same rate, and of a calendar window (a day in New York) against the
# fixed window, and of a composite of two token buckets (docs/composites.md)
# against one token bucket, in both editions, in the same run:
#   - instructions per call (callgrind in a single-user backend, as
#     bench/instructions.sh counts them: the difference of CALLS and 50
#     calls in one statement, so that the backend's start and the
#     statement cancel out), on new keys and on existing keys;
#   - time per call on a running server: one statement of TIMED calls per
#     contender, the contenders interleaved, ROUNDS rounds (each in the
#     order of the one before reversed, so that no contender always runs
#     next to the same one), the median; and each ratio as the median of
#     the rounds' own ratios (the two statements a few seconds apart: this
#     machine's speed drifts by 20% and more over minutes, which a ratio of
#     two medians carries). Each statement runs in a transaction rolled
#     back, after a VACUUM of the state table, with autovacuum off for it:
#     every statement starts from the rows as filled, as the instruction
#     counts do.
#
#   bash bench/shapes.sh   (about ten minutes; prints two Markdown tables)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
CALLS=${CALLS:-1000}
TIMED=${TIMED:-20000}
ROUNDS=${ROUNDS:-21}
prepare_bench
bash scripts/portable.sh >/dev/null

work=$(mktemp -d /tmp/rate_limiter_shapes.XXXXXX)
trap 'stop_cluster "$work/pg"; rm -rf "$work"' EXIT
RL_PRELOAD=0 start_cluster "$work/pg"
psql_as() { sudo -u postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/pg" -p "$RL_PORT" "$@"; }
define="SELECT rate_limiter.define('token_bucket', rate_limiter.token_bucket(1000000, '1 day'));
SELECT rate_limiter.define('fixed_window', rate_limiter.fixed_window(1000000, '1 day', start => '2000-01-01'));
SELECT rate_limiter.define('sliding_window', rate_limiter.sliding_window(1000000, '1 day', start => '2000-01-01'));
SELECT rate_limiter.define('calendar_window', rate_limiter.calendar_window(1000000, 'day', 'America/New_York'));
SELECT rate_limiter.define('token_bucket_2', rate_limiter.token_bucket(1000000, '1 day'));
SELECT rate_limiter.define_all('composite', ARRAY['token_bucket', 'token_bucket_2']);"
fill="SELECT count(*) FROM generate_series(1, $TIMED) AS g,
    LATERAL (SELECT rate_limiter.rate_limit(n, g::text)
             FROM unnest(ARRAY['token_bucket', 'fixed_window', 'sliding_window', 'calendar_window',
                               'token_bucket_2']) AS n) AS r"
psql_as -d postgres -c "CREATE DATABASE native" -c "CREATE DATABASE portable" >/dev/null
quiet="ALTER TABLE rate_limiter.rate_limits SET (autovacuum_enabled = false)"
psql_as -d native -c "CREATE EXTENSION rate_limiter" -c "$define" -c "$fill" \
    -c "VACUUM ANALYZE rate_limiter.rate_limits" -c "$quiet" >/dev/null
psql_as -d portable -f dist/rate_limiter-portable.sql -c "$define" -c "$fill" \
    -c "VACUUM ANALYZE rate_limiter.rate_limits" -c "$quiet" >/dev/null

# The timed rounds, on the running server: seconds per statement of TIMED
# calls of NAME on the existing keys, in DATABASE.
timed() {
    psql_as -d "$1" -c "VACUUM rate_limiter.rate_limits" -c '\timing on' -c "BEGIN" \
        -c "SELECT count(*) FROM generate_series(1, $TIMED) AS g, LATERAL rate_limiter.rate_limit('$2', g::text) AS r" \
        -c "ROLLBACK" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | sed -n 2p
}
declare -A times
order=(native.token_bucket native.fixed_window native.sliding_window native.calendar_window native.composite
    portable.token_bucket portable.fixed_window portable.sliding_window portable.calendar_window portable.composite)
for round in $(seq 1 "$ROUNDS"); do
    for contender in "${order[@]}"; do
        times[$contender]+="$(timed "${contender%%.*}" "${contender#*.}") "
    done
    for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
        contender=${order[i]} order[i]=${order[j]} order[j]=$contender
    done
done
sudo -u postgres "$PG_BIN/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null

# instructions DATABASE SQL: the instructions a single-user backend
# executes for SQL (one statement per line).
instructions() {
    printf '%s\n' "$2" >"$work/input.sql"
    chmod a+r "$work/input.sql"
    sudo -u postgres valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PG_BIN/postgres" --single -D "$work/pg/data" "$1" \
        <"$work/input.sql" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# per_call DATABASE NAME OFFSET: thousands of instructions per
# rate_limit(NAME, key) on keys OFFSET + 1 .. (new keys past TIMED, the
# existing ones from 0), in a transaction rolled back.
per_call() {
    local call="SELECT count(*) FROM generate_series($3 + 1, $3 + %s) AS g, LATERAL rate_limiter.rate_limit('$2', g::text) AS r"
    local few many
    # (VACUUM in a backend of its own before each count: the rows a
    # rolled-back run inserted are gone, and the count has no VACUUM in it.)
    instructions "$1" "VACUUM rate_limiter.rate_limits" >/dev/null
    few=$(instructions "$1" "BEGIN"$'\n'"$(printf "$call" 50)"$'\n'"ROLLBACK")
    instructions "$1" "VACUUM rate_limiter.rate_limits" >/dev/null
    many=$(instructions "$1" "BEGIN"$'\n'"$(printf "$call" "$CALLS")"$'\n'"ROLLBACK")
    python3 -c "print(f'{($many - $few) / ($CALLS - 50) / 1000:.1f}')"
}
median() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

declare -A counts
echo "| thousands of instructions per call | new keys | existing keys | µs per call, existing keys (median of $ROUNDS rounds, min–max) |"
echo "|---|---:|---:|---:|"
for database in native portable; do
    for name in token_bucket fixed_window sliding_window calendar_window composite; do
        new=$(per_call "$database" "$name" "$TIMED")
        existing=$(per_call "$database" "$name" 0)
        counts[$database.$name]="$new $existing"
        # shellcheck disable=SC2086
        read -r -a samples <<<"${times[$database.$name]}"
        per=$(python3 -c "
import statistics, sys
ms = [float(x) for x in sys.argv[1:]]
per = [m * 1000 / $TIMED for m in ms]
print(f'{statistics.median(per):.2f} ({min(per):.2f}–{max(per):.2f})')" "${samples[@]}")
        echo "| $database edition: $name | $new | $existing | $per |"
    done
done
echo
echo "| ratio (same run) | new keys, instructions | existing keys, instructions | existing keys, time: median of the rounds' ratios (quartiles) | existing keys, ratio of the median times |"
echo "|---|---:|---:|---:|---:|"
for database in native portable; do
    for pair in "sliding_window token_bucket" "sliding_window fixed_window" "calendar_window fixed_window" \
        "composite token_bucket"; do
        read -r a b <<<"$pair"
        read -r a_new a_existing <<<"${counts[$database.$a]}"
        read -r b_new b_existing <<<"${counts[$database.$b]}"
        # shellcheck disable=SC2086
        a_time=$(median ${times[$database.$a]})
        # shellcheck disable=SC2086
        b_time=$(median ${times[$database.$b]})
        # shellcheck disable=SC2086
        rounds=$(python3 -c "
import statistics, sys
a, b = sys.argv[1].split(), sys.argv[2].split()
ratios = [float(x) / float(y) for x, y in zip(a, b)]
q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
print(f'{statistics.median(ratios):.3f}x ({q[0]:.2f}x–{q[2]:.2f}x)')" "${times[$database.$a]}" "${times[$database.$b]}")
        python3 -c "print(f'| $database: $a / $b | {$a_new / $b_new:.3f}x | {$a_existing / $b_existing:.3f}x | $rounds | {$a_time / $b_time:.3f}x |')"
    done
done
