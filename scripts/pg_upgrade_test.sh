#!/usr/bin/env bash
# pg_upgrade from PostgreSQL 15 to 18 of a database holding limits (issue
# 18, item 4): a 15 cluster writes state under real calls
# (scripts/upgrade_workload.sql, and the limit shapes of this version:
# scripts/upgrade_workload_shapes.sql), `pg_upgrade` moves it into an 18 cluster,
# and every limit must answer exactly as before (scripts/upgrade_answers.sql),
# the rows must all be there, amcheck must find nothing, and the limits must
# keep consuming from where they were.
#
# The old server is PostgreSQL 15 built from Debian's source package (the
# assertion-enabled build of RL_ASSERTS=1, scripts/lib.sh), not Debian's
# installed 15.20 binary: that binary writes an attribute option
# `pg_attver` on every column of every table, which PostgreSQL 18 refuses
# ("unrecognized parameter"), so pg_upgrade from it fails for any database
# with a table in it, ours or not (tried with one plain table; README,
# "Upgrades").
#
# Needs the extension installed into both (scripts/test.sh's run of every
# version has done that when it calls this; otherwise this installs it).
# Prints "pg_upgrade: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
for build in "RL_PG=15 RL_ASSERTS=1" "RL_PG=18"; do
    # The current version's library and script, or install them.
    sharedir=$(env $build bash -c 'source scripts/lib.sh; "$PG_CONFIG" --sharedir' 2>/dev/null || true)
    if [ -z "$sharedir" ] || [ ! -f "$sharedir/extension/rate_limiter--$version.sql" ]; then
        env $build bash -c 'source scripts/lib.sh; ensure_tools && install_extension'
    fi
done
old_bin=$(RL_PG=15 RL_ASSERTS=1 bash -c 'source scripts/lib.sh; echo "$PG_BIN"')
new_bin=$(RL_PG=18 bash -c 'source scripts/lib.sh; echo "$PG_BIN"')
new_lib=$(dirname "$new_bin")/lib
port=${RL_UPGRADE_PORT:-24359}

work=$(mktemp -d /tmp/rate_limiter_pg_upgrade.XXXXXX)
chown postgres:postgres "$work"
chmod a+x "$(dirname "$work")"
as_postgres() { sudo -u postgres env -u RUST_BACKTRACE "LD_LIBRARY_PATH=$new_lib" "$@"; }
server() { # server BIN DATA start|stop
    if [ "$3" = start ]; then
        as_postgres "$1/pg_ctl" -D "$2" -l "$2.log" -w -o "-p $port -k $work -c listen_addresses=127.0.0.1" start >/dev/null
    else
        as_postgres "$1/pg_ctl" -D "$2" -m fast -w stop >/dev/null
    fi
}
trap 'server "$old_bin" "$work/old" stop 2>/dev/null || true; server "$new_bin" "$work/new" stop 2>/dev/null || true; rm -rf "$work"' EXIT
psql_at() { psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d upgrade "$@"; }

passed=0 failed=0
same() { [ -s "$1" ] && cmp -s "$1" "$2"; } # same, and not empty
check() { # check DESCRIPTION COMMAND...
    if "${@:2}"; then
        passed=$((passed + 1)); echo "ok: $1"
    else
        failed=$((failed + 1)); echo "FAILED: $1"
    fi
}

# 18's initdb turns data checksums on by default, 15's off; pg_upgrade needs
# both the same, so the new cluster is made without them (as the release
# notes of 18 advise for upgrades from clusters without checksums).
for side in old new; do
    bin=$old_bin options=()
    [ $side = new ] && bin=$new_bin options=(--no-data-checksums)
    as_postgres env LC_ALL=C "$bin/initdb" -D "$work/$side" -U postgres --auth=trust --no-sync \
        --encoding=UTF8 --locale=C "${options[@]}" >/dev/null
done

echo "== PostgreSQL $("$old_bin/postgres" --version | awk '{print $3}') writes the state"
server "$old_bin" "$work/old" start
as_postgres "$old_bin/createdb" -h "$work" -p "$port" upgrade
psql_at -c "CREATE EXTENSION rate_limiter" -f scripts/upgrade_workload.sql -f scripts/upgrade_workload_shapes.sql >/dev/null
answers=$(grep -v '^--' scripts/upgrade_answers.sql)
psql_at -c "$answers" >"$work/before.txt"
psql_at -c "SELECT count(*) FROM rate_limiter.rate_limits" >"$work/rows-before.txt"
# Every composite's answer for every key (docs/composites.md): composites
# have no rows of their own.
composites="SET rate_limiter.now_override = '2026-01-01 00:00:07+00';
SELECT c.name || '|' || k.key || '|' || r.ok || '|' || coalesce(r.retry_after::text, '') || '|' || r.remaining
FROM rate_limiter.composites AS c, (SELECT DISTINCT key FROM rate_limiter.rate_limits WHERE key IS NOT NULL) AS k,
     LATERAL rate_limiter.rate_check(c.name, k.key, 1) AS r ORDER BY 1;"
psql_at -c "$composites" >"$work/composites-before.txt"
# What one more call at 00:00:07 answers, on the old server (rolled back).
next="SET rate_limiter.now_override = '2026-01-01 00:00:07+00';
BEGIN;
SELECT k || '|' || r.ok || '|' || r.remaining
FROM unnest(ARRAY['user1', 'user2', 'k0']) AS k, LATERAL rate_limiter.rate_limit(CASE WHEN k LIKE 'user%' THEN 'chat' ELSE 'signup' END, k, 2) AS r;
ROLLBACK;"
psql_at -c "$next" >"$work/next-before.txt"
server "$old_bin" "$work/old" stop

echo "== pg_upgrade to $("$new_bin/postgres" --version | awk '{print $3}')"
upgraded=no
# --retain keeps pg_upgrade's logs (the servers it starts log there too).
if (cd "$work" && as_postgres "$new_bin/pg_upgrade" -b "$old_bin" -B "$new_bin" -d "$work/old" -D "$work/new" \
    -p "$port" -P "$port" --socketdir="$work" -U postgres --retain >"$work/pg_upgrade.log" 2>&1); then
    upgraded=yes
else
    tail -n 30 "$work/pg_upgrade.log"
    find "$work/new" -path '*pg_upgrade_output.d*' -name 'pg_upgrade_dump_*.log' -exec grep -B3 -A12 -m1 "ERROR\|FATAL" {} + 2>/dev/null || true
fi
check "pg_upgrade succeeds" [ $upgraded = yes ]

if [ $upgraded = yes ]; then
    server "$new_bin" "$work/new" start
    psql_at -c "$answers" >"$work/after.txt" 2>&1 || true
    psql_at -c "SELECT count(*) FROM rate_limiter.rate_limits" >"$work/rows-after.txt" 2>&1 || true
    check "every limit answers as before ($(wc -l <"$work/before.txt") limits)" same "$work/before.txt" "$work/after.txt"
    check "every state row is there ($(cat "$work/rows-before.txt") rows)" same "$work/rows-before.txt" "$work/rows-after.txt"
    psql_at -c "$composites" >"$work/composites-after.txt" 2>&1 || true
    check "every composite answers as before ($(wc -l <"$work/composites-before.txt") keys)" same "$work/composites-before.txt" "$work/composites-after.txt"
    psql_at -c "$next" >"$work/next-after.txt" 2>&1 || true
    check "the next calls consume from where the state was ($(tr '\n' ' ' <"$work/next-before.txt"))" same "$work/next-before.txt" "$work/next-after.txt"
    corrupt=$(psql_at -c "CREATE EXTENSION IF NOT EXISTS amcheck" \
        -c "SELECT count(*) FROM verify_heapam('rate_limiter.rate_limits')" 2>&1 || echo error)
    indexes=$(psql_at -c "SELECT count(bt_index_check(indexrelid, true)) FROM pg_index WHERE indrelid = 'rate_limiter.rate_limits'::regclass" 2>&1 || echo error)
    check "amcheck: verify_heapam finds nothing ($corrupt), every index checks ($indexes)" \
        [ "$corrupt" = 0 -a "$indexes" != error -a "$indexes" != 0 ]
    if ! cmp -s "$work/before.txt" "$work/after.txt"; then diff "$work/before.txt" "$work/after.txt" || true; fi
    if ! cmp -s "$work/next-before.txt" "$work/next-after.txt"; then diff "$work/next-before.txt" "$work/next-after.txt" || true; fi
fi

# The old server is the assertion-enabled build: no assertion may have
# failed in it, while it wrote the state or while pg_upgrade read it, and
# no server log may show a leak or a crash (scripts/lib.sh,
# server_log_problems). The old server's own log must be there (a missing
# log would hide a failure).
old_logs=("$work/old.log")
while IFS= read -r log; do old_logs+=("$log"); done < <(find "$work/new" -path '*pg_upgrade_output.d*' -name 'pg_upgrade_server.log' 2>/dev/null)
problems=$(bash -c 'source scripts/lib.sh; server_log_problems "$@"' _ "${old_logs[@]}")
check "the old server's logs are clean: no assertion failed, nothing leaked, no backend crashed (${#old_logs[@]} logs)" [ -s "$work/old.log" -a -z "$problems" ]
[ -z "$problems" ] || head -n 40 <<<"$problems"

echo "pg_upgrade: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
