\set ECHO none
-- Installs the portable edition through pg_tle, for
-- tests/portable/psql_launcher.sh (in place of CREATE EXTENSION; the
-- launcher shows these lines as that statement): pg_tle in this database,
-- the registration of dist/rate_limiter-pg_tle.sql, CREATE EXTENSION.
SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_tle') AS rl_needs_pg_tle \gset
\if :rl_needs_pg_tle
CREATE EXTENSION pg_tle;
\endif
\i dist/rate_limiter-pg_tle.sql
\unset ON_ERROR_STOP
CREATE EXTENSION rate_limiter;
\set ECHO all
