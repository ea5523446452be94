#!/usr/bin/env bash
# Builds the release files of the portable edition (docs/guarantees.md,
# "Portable edition") from the repository's SQL, into dist/:
#
#   dist/rate_limiter-portable.sql  for `psql -f` by a database owner, on a
#       platform without pg_tle. On a database without rate_limiter it
#       creates the schema; on one with an earlier portable version it
#       upgrades it in place (every definition and state row kept, every
#       grant kept).
#   dist/rate_limiter-pg_tle.sql    for `psql -f` by a database owner
#       holding pgtle_admin (AWS RDS and Aurora, Supabase): registers the
#       extension with pg_tle (pgtle.install_extension, or, when an earlier
#       version is registered, pgtle.install_update_path to this one and
#       pgtle.set_default_version), then `CREATE EXTENSION rate_limiter` (or
#       `ALTER EXTENSION rate_limiter UPDATE`) installs it.
#
# The SQL: sql/schema.sql (the native extension's types and tables), the
# portable functions in portable/sql/ (file order), the PL/pgSQL functions
# the native extension already has (guard, postgrest_limit) and the
# COMMENT ON FUNCTION of every function from sql/functions.sql, and
# sql/privileges.sql's revokes. Every CREATE FUNCTION / CREATE VIEW is
# written CREATE OR REPLACE, so that the same statements upgrade.
#
# RL_PORTABLE_VERSION overrides the version (default: Cargo.toml's) and
# RL_PORTABLE_DIST the directory (default: dist), for the tests of the
# upgrade paths, which build a later version from the same SQL.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${RL_PORTABLE_VERSION:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)}
dist=${RL_PORTABLE_DIST:-dist}
mkdir -p "$dist"

# The functions that only the native extension implements, and whose
# comments portable/sql/ writes itself.
native_comments='^COMMENT ON FUNCTION rate_limiter\.(_stats|_stats_info|stats_reset|_invalidate_definitions|_definitions_changed)\('

# schema.sql without pg_extension_config_dump (only an extension script
# may call it); $1 = tle keeps it.
schema() {
    if [ "$1" = tle ]; then
        cat sql/schema.sql
    else
        grep -v 'pg_extension_config_dump' sql/schema.sql
    fi
}

# A PL/pgSQL function of sql/functions.sql (or the file $3), from its
# CREATE FUNCTION line to the line closing its body ($tag$;).
native_function() {
    awk -v name="$1" -v tag="$2" '
        $0 ~ "^CREATE FUNCTION rate_limiter\\." name "\\(" { on = 1 }
        on { print }
        on && $0 == "$" tag "$;" { exit }' "${3:-sql/functions.sql}"
}

# postgrest_limit of sql/functions.sql, but for rate_limiter.sqlstate,
# which the native extension checks when it is SET and the portable
# edition, a placeholder, when a refusal uses it: checked here before the
# PGRST error carries it (22023 with the native message, as the other
# refusals), and empty or blank is the default RL429. (postgrest_limit
# runs as its caller, who may not call the internal functions: the check
# is written out.) Fails the build when the native function changed so
# that the lines to replace are gone.
portable_postgrest_limit() {
    native_function postgrest_limit postgrest_limit | awk '
        /^ *RAISE SQLSTATE '"'"'PGRST'"'"' USING$/ {
            # On the RAISE line itself, so that the function keeps the
            # native line numbers its error contexts show.
            indent = $0; sub(/RAISE.*/, "", indent)
            $0 = indent "IF coalesce(pg_catalog.current_setting('"'"'rate_limiter.sqlstate'"'"', true), '"'"''"'"') !~ '"'"'^ *$'"'"'" \
                " AND (pg_catalog.current_setting('"'"'rate_limiter.sqlstate'"'"', true) !~ '"'"'^[0-9A-Z]{5}$'"'"'" \
                " OR pg_catalog.left(pg_catalog.current_setting('"'"'rate_limiter.sqlstate'"'"', true), 2)" \
                " IN ('"'"'00'"'"', '"'"'01'"'"', '"'"'02'"'"', '"'"'08'"'"', '"'"'25'"'"', '"'"'40'"'"', '"'"'53'"'"', '"'"'57'"'"', '"'"'58'"'"', '"'"'XX'"'"')) THEN" \
                " RAISE EXCEPTION '"'"'invalid value for parameter \"rate_limiter.sqlstate\": \"%\"'"'"', pg_catalog.current_setting('"'"'rate_limiter.sqlstate'"'"', true)" \
                " USING ERRCODE = '"'"'22023'"'"'," \
                " DETAIL = '"'"'rate_limiter.sqlstate must be five characters of 0-9 and A-Z, e.g. RL429 or PT429, and not of a class that means success, a warning, no data, or an error clients retry or treat as fatal (00, 01, 02, 08, 25, 40, 53, 57, 58, XX).'"'"';" \
                " END IF; RAISE SQLSTATE '"'"'PGRST'"'"' USING"
            checked++
        }
        {
            if (sub(/coalesce\(nullif\(pg_catalog\.current_setting\('"'"'rate_limiter\.sqlstate'"'"', true\), '"'"''"'"'\), '"'"'RL429'"'"'\)/,
                    "coalesce(nullif(pg_catalog.btrim(pg_catalog.current_setting('"'"'rate_limiter.sqlstate'"'"', true)), '"'"''"'"'), '"'"'RL429'"'"')")) replaced++
            print
        }
        END { if (checked != 1 || replaced != 1) { print "portable.sh: postgrest_limit changed, rate_limiter.sqlstate not checked" > "/dev/stderr"; exit 1 } }'
}

# Every COMMENT ON FUNCTION of sql/functions.sql and sql/composites.sql (a
# statement runs to the line ending in "';"), but those of functions the
# portable edition replaces.
comments() {
    awk -v skip="$native_comments" '
        /^COMMENT ON FUNCTION / { on = ($0 !~ skip) }
        on { print }
        on && /'"'"';$/ { on = 0; print "" }' sql/functions.sql sql/composites.sql
}

# The internal functions of a distributed install (what a node calls on
# another, sql/citus_internal_functions.sql), with their native signatures,
# raising 0A000: the README's role blocks grant them, and must run
# unchanged.
citus_internals() {
    awk '
        /^CREATE FUNCTION rate_limiter\._[a-z_]*_at\(/ { on = 1 }
        on && /^LANGUAGE c / {
            print "LANGUAGE plpgsql VOLATILE"
            print "SET search_path = pg_catalog, pg_temp"
            print "AS $citus$"
            print "BEGIN"
            print "    PERFORM rate_limiter._native_only(\x27distributing the limits\x27,"
            print "        \x27Distributing the state over a Citus cluster needs the native extension on every node.\x27);"
            print "END"
            print "$citus$;"
            print ""
            on = 0
            next
        }
        on { print }' sql/citus_internal_functions.sql
}

# The statements every install and every upgrade runs: the functions,
# views and comments.
functions() {
    for file in portable/sql/*.sql; do
        echo "-- ${file}"
        cat "$file"
        echo
    done
    echo "-- sql/functions.sql: the native extension's PL/pgSQL functions"
    native_function guard guard
    echo
    native_function define_all define_all sql/composites.sql
    echo
    portable_postgrest_limit
    echo
    echo "-- sql/concurrency.sql: the concurrency limits' PL/pgSQL, with their comments"
    sed -n '/^-- Both editions -/,$p' sql/concurrency.sql
    echo
    cat sql/concurrency_status.sql
    echo
    cat sql/concurrency_guard.sql
    echo
    cat sql/concurrency_leases.sql
    echo
    echo "-- sql/citus_internal_functions.sql: the internal functions of a distributed install"
    citus_internals
    comments
}

# The revokes of sql/privileges.sql that hold on every run: nothing for
# PUBLIC. (Functions created by an upgrade get them too.)
revoke_public() {
    sed -n '/^REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rate_limiter FROM PUBLIC;$/p;
            /^REVOKE ALL ON ALL TABLES IN SCHEMA rate_limiter FROM PUBLIC;$/p' sql/privileges.sql
}

# sql/privileges.sql's revoke of privileges that ALTER DEFAULT PRIVILEGES
# gave to other roles: on a fresh install only (an upgrade must keep the
# owner's grants to application roles).
revoke_defaults() {
    sed -n '/^DO \$revoke\$$/,/^\$revoke\$;$/p' sql/privileges.sql
}

or_replace() {
    sed -e 's/^CREATE FUNCTION /CREATE OR REPLACE FUNCTION /' -e 's/^CREATE VIEW /CREATE OR REPLACE VIEW /'
}

marker="rate_limiter ${version} (portable edition)"

# The plain file.
{
    cat <<EOF
-- ${marker}: the rate limiter in SQL and PL/pgSQL, for a database where
-- the native extension cannot be installed. Run it as the database owner
-- (no superuser needed):
--     psql -v ON_ERROR_STOP=1 -d yourdb -f rate_limiter-portable.sql
-- On a database with an earlier portable version it upgrades in place.
-- Built by scripts/portable.sh from the repository's SQL; see README.md,
-- "Managed PostgreSQL".
\\set ON_ERROR_STOP on
\\set QUIET on
-- One transaction: its own, or the caller's when the file is included in
-- an open one (README, "Switching editions"): inside a transaction block
-- now() is the block's start, not this statement's.
SELECT pg_catalog.now() = pg_catalog.statement_timestamp() AS rate_limiter_own_transaction \\gset
\\if :rate_limiter_own_transaction
BEGIN;
\\endif
SET LOCAL client_min_messages = warning;
DO \$check\$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'rate_limiter') THEN
        RAISE EXCEPTION 'the rate_limiter extension is installed in this database'
            USING ERRCODE = '55000',
                  HINT = 'Switching from the extension to the portable edition: README, "Switching editions".';
    END IF;
    IF pg_catalog.to_regnamespace('rate_limiter') IS NOT NULL
       AND coalesce(pg_catalog.obj_description(pg_catalog.to_regnamespace('rate_limiter'), 'pg_namespace'), '')
           NOT LIKE 'rate_limiter % (portable edition)' THEN
        RAISE EXCEPTION 'schema rate_limiter exists and is not the portable edition of rate_limiter'
            USING ERRCODE = '42P06';
    END IF;
END
\$check\$;
SELECT pg_catalog.to_regnamespace('rate_limiter') IS NULL AS rate_limiter_fresh \\gset
\\if :rate_limiter_fresh
CREATE SCHEMA rate_limiter;
EOF
    schema plain
    echo '\endif'
    functions | or_replace
    revoke_public
    echo '\if :rate_limiter_fresh'
    revoke_defaults
    echo '\endif'
    echo "COMMENT ON SCHEMA rate_limiter IS '${marker}';"
    echo 'RESET client_min_messages;'
    echo '\if :rate_limiter_own_transaction'
    echo 'COMMIT;'
    echo '\endif'
} > "$dist/rate_limiter-portable.sql"

# The pg_tle file: the install script (schema and functions) for
# pgtle.install_extension, and the update script (functions) for
# pgtle.install_update_path from the registered default version.
install_script=$(mktemp)
update_script=$(mktemp)
trap 'rm -f "$install_script" "$update_script"' EXIT
{
    schema tle
    functions | or_replace
    revoke_public
    revoke_defaults
} > "$install_script"
{
    functions | or_replace
    revoke_public
} > "$update_script"
if grep -q '\$_pgtle_\$' "$install_script"; then
    echo "portable.sh: the SQL contains the pg_tle quote \$_pgtle_\$" >&2
    exit 1
fi
{
    cat <<EOF
-- ${marker}, for pg_tle (Trusted Language Extensions: AWS RDS and Aurora,
-- Supabase). Run it as a database owner holding pgtle_admin:
--     psql -v ON_ERROR_STOP=1 -d yourdb -f rate_limiter-pg_tle.sql
-- then CREATE EXTENSION rate_limiter; (or, when an earlier version is
-- installed, ALTER EXTENSION rate_limiter UPDATE;). Built by
-- scripts/portable.sh; see README.md, "Managed PostgreSQL".
\\set ON_ERROR_STOP on
DO \$register\$
DECLARE
    registered text;
BEGIN
    SELECT v.default_version INTO registered FROM pgtle.available_extensions() AS v
    WHERE v.name = 'rate_limiter';
    IF registered IS NULL THEN
        PERFORM pgtle.install_extension('rate_limiter', '${version}',
            'Transactional application-layer rate limiting: token bucket and fixed window, inside your own transaction (portable edition)',
\$_pgtle_\$
EOF
    cat "$install_script"
    cat <<EOF
\$_pgtle_\$,
            ARRAY['plpgsql'], 'rate_limiter');
    ELSIF registered <> '${version}' THEN
        PERFORM pgtle.install_update_path('rate_limiter', registered, '${version}',
\$_pgtle_\$
EOF
    cat "$update_script"
    cat <<EOF
\$_pgtle_\$);
        PERFORM pgtle.set_default_version('rate_limiter', '${version}');
    END IF;
END
\$register\$;
EOF
} > "$dist/rate_limiter-pg_tle.sql"

echo "wrote $dist/rate_limiter-portable.sql and $dist/rate_limiter-pg_tle.sql (version ${version})"
