#!/usr/bin/env bash
# What blocks cost a call (docs/blocks.md, "Cost"), in instructions per
# call (callgrind in a single-user backend, as bench/instructions.sh
# counts them: the difference of CALLS and 50 calls in one statement, so
# that the backend's start and the statement cancel out), on existing
# keys, in the same run:
#   - a refusal for want of tokens (every key used up) against a blocked
#     key's refusal (every key blocked by hand, tokens left);
#   - admitted calls of a name without blocks, of a name with blocks on
#     other keys, and of a limit with automatic blocks (with_block) whose
#     calls do not use it up.
#
#   bash bench/blocks.sh   (about two minutes; prints a Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
CALLS=${CALLS:-1000}
prepare_bench

work=$(mktemp -d /tmp/rate_limiter_blocks.XXXXXX)
trap 'stop_cluster "$work/pg"; rm -rf "$work"' EXIT
RL_PRELOAD=0 start_cluster "$work/pg"
psql_as() { sudo -u postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$work/pg" -p "$RL_PORT" "$@" >/dev/null; }
psql_as -d postgres -c "CREATE DATABASE bench"
psql_as -d bench <<SQL
CREATE EXTENSION rate_limiter;
SELECT rate_limiter.define('plain', rate_limiter.token_bucket(1000000, '1 day'));
SELECT rate_limiter.define('used_up', rate_limiter.token_bucket(1, '1000 days'));
SELECT rate_limiter.define('blocked', rate_limiter.token_bucket(1000000, '1 day'));
SELECT rate_limiter.define('some_blocked', rate_limiter.token_bucket(1000000, '1 day'));
SELECT rate_limiter.define('automatic', rate_limiter.with_block(
    rate_limiter.token_bucket(1000000, '1 day'), '1 minute'));
-- Every key of every name has a row; used_up's hold no token.
SELECT count(*) FROM generate_series(1, $CALLS) AS g,
    LATERAL (SELECT rate_limiter.rate_limit(n, g::text) FROM unnest(ARRAY['plain', 'used_up', 'blocked',
                                                                          'some_blocked', 'automatic']) AS n) AS r;
INSERT INTO rate_limiter.blocks (name, key, until, strikes)
SELECT 'blocked', g::text, 'infinity'::timestamptz, 1 FROM generate_series(1, $CALLS) AS g
UNION ALL
SELECT 'some_blocked', 'other' || g, 'infinity'::timestamptz, 1 FROM generate_series(1, $CALLS) AS g;
VACUUM ANALYZE rate_limiter.rate_limits, rate_limiter.blocks;
SQL
sudo -u postgres "$PG_BIN/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null

# instructions SQL: the instructions a single-user backend executes for SQL.
instructions() {
    printf '%s\n' "$1" >"$work/input.sql"
    chmod a+r "$work/input.sql"
    sudo -u postgres valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$PG_BIN/postgres" --single -D "$work/pg/data" bench \
        <"$work/input.sql" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# per_call NAME: thousands of instructions per rate_limit(NAME, key) on
# the existing keys, and how many of CALLS were admitted.
per_call() {
    local call="SELECT count(*) FILTER (WHERE r.ok) FROM generate_series(1, %s) AS g, LATERAL rate_limiter.rate_limit('$1', g::text) AS r"
    local few many
    # (Each run in a transaction rolled back: the next finds the same
    # state; VACUUM first, so that the dead versions an earlier run left
    # do not take the room the updates need to be HOT.)
    local prefix="VACUUM rate_limiter.rate_limits"$'\n'"BEGIN"
    few=$(instructions "$prefix"$'\n'"$(printf "$call" 50)"$'\n'"ROLLBACK")
    many=$(instructions "$prefix"$'\n'"$(printf "$call" "$CALLS")"$'\n'"ROLLBACK")
    python3 -c "print(f'{($many - $few) / ($CALLS - 50) / 1000:.1f}')"
}
echo "| thousands of instructions per call, existing keys | per call |"
echo "|---|---:|"
for name in used_up blocked plain some_blocked automatic; do
    case $name in
    used_up) label="refused for want of tokens" ;;
    blocked) label="refused: the key is blocked" ;;
    plain) label="admitted, a name without blocks" ;;
    some_blocked) label="admitted, a name with 1,000 blocked keys (not this one)" ;;
    automatic) label="admitted, a limit with automatic blocks (not used up)" ;;
    esac
    echo "| $label | $(per_call "$name") |"
done
