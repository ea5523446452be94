\set ECHO none
-- Installs the portable edition with its plain SQL file, for
-- tests/portable/psql_launcher.sh (in place of CREATE EXTENSION; the
-- launcher shows these lines as that statement). Paths are relative to
-- the repository, where pg_regress runs.
\i dist/rate_limiter-portable.sql
\unset ON_ERROR_STOP
\set ECHO all
