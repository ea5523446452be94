#!/usr/bin/env bash
# The portable edition's suite (docs/guarantees.md, "Portable edition"), on
# PostgreSQL $RL_PG, on a server of its own where the native library is not
# loaded (so the rate_limiter.* settings are placeholders, as on a managed
# platform) and the native extension is not installed (pg_tle refuses a name
# whose control file exists on the server's disk, so rate_limiter.control is
# moved aside for the run and put back after); pg_tle is preloaded:
#
#   0. the pg_regress schedule of the portable edition
#      (tests/portable/schedule) installed from its plain SQL file, and the
#      isolation specs (tests/portable/isolation.sh);
#   1. the pg_regress schedule again, every CREATE EXTENSION rate_limiter
#      in it being pg_tle's;
#   2. the install as a user does it on RDS or Supabase: a database owner
#      who is not superuser, holding pgtle_admin, runs
#      dist/rate_limiter-pg_tle.sql and CREATE EXTENSION rate_limiter; the
#      extension and its objects are that role's; the README's role block
#      runs as written; the application role consumes, cannot read the
#      tables, and a rollback undoes its call;
#   3. the update path: a later version built from the same SQL
#      (RL_PORTABLE_VERSION) registered by its own file, then ALTER
#      EXTENSION rate_limiter UPDATE: every definition and state row and
#      every grant kept, the answers go on from the state.
#
#   bash tests/portable/suite.sh OUT
#
# Prints pg_regress's lines and "ok N - ..." / "not ok N - ..." per check
# (scripts/test.sh counts both). Expects dist/ built (scripts/portable.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
out=${1:?OUT}
mkdir -p "$out"
chmod a+rwx "$out"

bash scripts/pg_tle.sh build || { echo "not ok 1 - pg_tle builds for PostgreSQL $RL_PG"; exit 1; }

# The native extension's control file, aside for the run.
control="$("$PG_CONFIG" --sharedir)/extension/rate_limiter.control"
hidden="$control.hidden-for-the-pg_tle-test"
[ -f "$hidden" ] && mv -f "$hidden" "$control"   # a run that died before putting it back
cluster=$(mktemp -d /tmp/rate_limiter_pg_tle.XXXXXX)
restore() {
    stop_cluster "$cluster"
    [ -f "$hidden" ] && mv -f "$hidden" "$control"
}
trap restore EXIT
[ -f "$control" ] && mv "$control" "$hidden"

port=$((RL_PORT + 3))
RL_PORT=$port RL_PRELOAD=0 RL_PRELOAD_LIBRARIES=pg_tle start_cluster "$cluster"

number=0 failures=0
check() { # check NAME COMMAND...: one "ok" or "not ok" line
    local name=$1
    shift
    number=$((number + 1))
    if "$@" >"$out/check.log" 2>&1; then
        echo "ok $number - $name"
    else
        failures=$((failures + 1))
        echo "not ok $number - $name"
        sed 's/^/#   /' "$out/check.log" | tail -n 20
    fi
}
psql_as() { # psql_as USER DATABASE [psql arguments]
    local user=$1 database=$2
    shift 2
    env "LD_LIBRARY_PATH=$PG_LIBRARY_PATH" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$port" -U "$user" -d "$database" "$@"
}
# Runs SQL, then asserts its single value equals EXPECTED.
value_is() { # value_is EXPECTED USER DATABASE SQL
    local got
    got=$(psql_as "$2" "$3" -At -c "$4") || return 1
    [ "$got" = "$1" ] || { echo "expected '$1', got '$got' from: $4"; return 1; }
}
export -f psql_as
export port PG_BIN PG_LIBRARY_PATH
fails_with() { # fails_with SQLSTATE USER DATABASE SQL
    local output
    output=$(psql_as "$2" "$3" -v VERBOSITY=verbose -c "$4" 2>&1) && { echo "succeeded: $4"; return 1; }
    grep -q "ERROR:  $1:" <<<"$output" || { echo "expected $1 from: $4"; echo "$output"; return 1; }
}

# 0. The plain SQL install: pg_regress and the isolation specs.
bash tests/portable/regress.sh plain 127.0.0.1 "$port" "$out/plain" || true
[ -f "$out/plain/regression.diffs" ] && cat "$out/plain/regression.diffs"
bash tests/portable/isolation.sh 127.0.0.1 "$port" "$out/isolation" || true
[ -f "$out/isolation/regression.diffs" ] && cat "$out/isolation/regression.diffs"

# 1. The pg_regress schedule, through pg_tle.
bash tests/portable/regress.sh pg_tle 127.0.0.1 "$port" "$out/regress" || true
[ -f "$out/regress/regression.diffs" ] && cat "$out/regress/regression.diffs"

# 2. The install of an RDS or Supabase user.
psql_as postgres postgres -c "DROP DATABASE IF EXISTS tle" -c "DROP ROLE IF EXISTS tle_owner" \
    -c "CREATE ROLE tle_owner LOGIN" -c "CREATE DATABASE tle OWNER tle_owner" >/dev/null
for role in app admin monitor web_anon; do
    psql_as postgres postgres -c "DROP ROLE IF EXISTS $role" -c "CREATE ROLE $role LOGIN" >/dev/null
done
psql_as postgres tle -c "CREATE EXTENSION pg_tle" -c "GRANT pgtle_admin TO tle_owner" >/dev/null
check "a database owner who is not superuser, holding pgtle_admin, registers it and creates it" \
    bash -c "psql_as tle_owner tle -f dist/rate_limiter-pg_tle.sql && psql_as tle_owner tle -c 'CREATE EXTENSION rate_limiter'"
check "the extension and every object in its schema belong to that owner, who is not superuser" \
    value_is "t|0.6.0" tle_owner tle \
    "SELECT NOT r.rolsuper AND e.extowner = r.oid
            AND NOT EXISTS (SELECT FROM pg_class c WHERE c.relnamespace = 'rate_limiter'::regnamespace AND c.relowner <> r.oid)
            AND NOT EXISTS (SELECT FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace AND p.proowner <> r.oid),
            e.extversion
     FROM pg_extension e, pg_roles r WHERE e.extname = 'rate_limiter' AND r.rolname = current_user"
sed -n '/<!-- roles:begin -->/,/<!-- roles:end -->/p' README.md | sed -e '1,2d' -e '$d' | sed '$d' >"$out/roles.sql"
check "the README's role block runs as written" psql_as tle_owner tle -f "$out/roles.sql"
# A window that started a minute ago: nothing refills during the run.
psql_as tle_owner tle -c "SELECT rate_limiter.define('signup', rate_limiter.fixed_window(2, '1 hour', start => now() - interval '1 minute'))" >/dev/null
check "the application role consumes" value_is "t" app tle "SELECT ok FROM rate_limiter.rate_limit('signup', 'k')"
check "a rolled-back call leaves no consumption" bash -c "
    psql_as app tle -c 'BEGIN' -c \"SELECT ok FROM rate_limiter.rate_limit('signup', 'k')\" -c 'ROLLBACK' >/dev/null &&
    [ \"\$(psql_as app tle -At -c \"SELECT remaining FROM rate_limiter.rate_check('signup', 'k', 0)\")\" = 1 ]"
check "the application role cannot read the state table" fails_with 42501 app tle "SELECT * FROM rate_limiter.rate_limits"
check "the application role cannot move the clock" fails_with 42501 app tle \
    "SET rate_limiter.now_override = '2030-01-01'; SELECT ok FROM rate_limiter.rate_limit('signup', 'other')"
check "the application role cannot redefine a limit" fails_with 42501 app tle \
    "SELECT rate_limiter.define('signup', rate_limiter.token_bucket(1000, '1 second'))"
check "the second call in the hour is refused, with retry_after" value_is "f|t" app tle \
    "SELECT ok, retry_after > '0' FROM rate_limiter.rate_limit('signup', 'k', 2)"

# 3. The update path to a later version.
RL_PORTABLE_VERSION=0.6.1-test RL_PORTABLE_DIST="$out/next" bash scripts/portable.sh >/dev/null
before=$(psql_as tle_owner tle -At -c "SELECT string_agg(r::text, ';' ORDER BY r::text) FROM rate_limiter.rate_limits r")
check "the later version registers (pgtle.install_update_path) and ALTER EXTENSION UPDATE runs" bash -c "
    psql_as tle_owner tle -f '$out/next/rate_limiter-pg_tle.sql' && psql_as tle_owner tle -c 'ALTER EXTENSION rate_limiter UPDATE'"
check "after the update: the version, every state row and the definition" value_is "0.6.1-test|$before|1" tle_owner tle \
    "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter'),
            (SELECT string_agg(r::text, ';' ORDER BY r::text) FROM rate_limiter.rate_limits r),
            (SELECT count(*) FROM rate_limiter.definitions WHERE name = 'signup')"
check "after the update the application role's grants hold and the limit goes on from its state (1 token left)" \
    value_is "t" app tle "SELECT ok FROM rate_limiter.rate_limit('signup', 'k')"
check "and then it is empty" value_is "f" app tle "SELECT ok FROM rate_limiter.rate_limit('signup', 'k')"

psql_as postgres postgres -c "DROP DATABASE tle" >/dev/null
for role in app admin monitor web_anon tle_owner; do
    psql_as postgres postgres -c "DROP ROLE IF EXISTS $role" >/dev/null 2>&1 || true
done
check "the server's log is clean: nothing leaked, no backend crashed (scripts/lib.sh, server_log_problems)" \
    bash -c "[ -s '$cluster/server.log' ] && [ -z \"\$(source scripts/lib.sh; server_log_problems '$cluster/server.log')\" ]"
echo "pg_tle checks: $((number - failures)) passed, $failures failed"
[ "$failures" = 0 ]
