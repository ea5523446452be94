-- Privileges: nothing is granted to PUBLIC. A database owner grants USAGE
-- on the schema and EXECUTE on chosen functions; callers never get
-- privileges on the tables, and their search_path cannot hijack the
-- functions (SECURITY DEFINER with a pinned search_path).
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
DROP SCHEMA IF EXISTS evil CASCADE;
DROP ROLE IF EXISTS rl_app;
CREATE ROLE rl_app;
SELECT rate_limiter.define('priv', rate_limiter.token_bucket(10, '1 hour'));

-- A role with no grants can do nothing.
SET ROLE rl_app;
SELECT * FROM rate_limiter.rate_limit('priv', 'k');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT USAGE ON SCHEMA rate_limiter TO rl_app;
SET ROLE rl_app;
SELECT * FROM rate_limiter.rate_limit('priv', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limits;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The recommended grants for an application role: use limits (and build
-- inline configs), not manage them.
GRANT EXECUTE ON FUNCTION
    rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config),
    rate_limiter.rate_check(text, text, float8, boolean, boolean, rate_limiter.config),
    rate_limiter.token_bucket(float8, interval, float8, float8, int4),
    rate_limiter.fixed_window(float8, interval, float8, float8, int4, timestamptz)
TO rl_app;
SET ROLE rl_app;
SELECT * FROM rate_limiter.rate_limit('priv', 'k', 4);
SELECT * FROM rate_limiter.rate_check('priv', 'k');
SELECT ok FROM rate_limiter.rate_limit('adhoc', config => rate_limiter.token_bucket(1, '1 second'));
-- Still no access to the tables...
UPDATE rate_limiter.rate_limits SET value = 1000;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limits;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM rate_limiter.definitions;
\echo :LAST_ERROR_SQLSTATE
-- ...nor to the functions that were not granted...
SELECT rate_limiter.rate_reset('priv', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('priv', rate_limiter.token_bucket(1000000, '1 second'));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.undefine('priv');
\echo :LAST_ERROR_SQLSTATE
-- (...and the clock cannot be moved by anyone but a superuser: settings.sql.)
RESET ROLE;

-- An error raised while a call acts as the owner, and caught by the
-- caller, leaves the caller who they were: same user, same search path,
-- still no access to the tables.
SET ROLE rl_app;
SELECT current_user, current_schemas(true);
SELECT ok FROM rate_limiter.rate_limit('debt', count => 1e308, reserve => true,
    config => rate_limiter.token_bucket(1e308, '1 microsecond', capacity => 0));
DO $$
BEGIN
    -- The second debt overflows inside the locked-row evaluation.
    PERFORM * FROM rate_limiter.rate_limit('debt', count => 1e308, reserve => true,
        config => rate_limiter.token_bucket(1e308, '1 microsecond', capacity => 0));
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'caught %: %', SQLSTATE, SQLERRM;
END
$$;
SELECT current_user, current_schemas(true);
SELECT count(*) FROM rate_limiter.rate_limits;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- search_path tricks change nothing: an "=" operator that is always true,
-- a clock_timestamp() and tables named like the extension's, in a schema
-- the caller controls and in pg_temp.
CREATE SCHEMA evil AUTHORIZATION rl_app;
SET ROLE rl_app;
CREATE FUNCTION evil.always_true(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always_true);
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '2099-01-01'::timestamptz $$;
CREATE TABLE evil.rate_limits (name text, key text, shard int, value float8, ts timestamptz);
CREATE TABLE evil.definitions (name text, kind text, rate float8, period interval);
CREATE TEMP TABLE rate_limits (name text, key text, shard int, value float8, ts timestamptz);
SET search_path = evil, pg_temp, pg_catalog;
SELECT 'a'::text = 'b'::text AS hijacked_equals_in_caller_session;
-- 'other' is a fresh key: a hijacked "=" would find the row of 'k' (6 left).
SELECT * FROM rate_limiter.rate_limit('priv', 'other');
SELECT * FROM rate_limiter.rate_limit('priv', 'k');
RESET search_path;
RESET ROLE;
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'priv' ORDER BY key;

-- An HTTP API role (e.g. PostgREST's anonymous role) gets only what its
-- endpoints need, typically rate_check/rate_limit through the app's own
-- SECURITY DEFINER functions, never rate_reset or define.
DROP SCHEMA evil CASCADE;
DROP OWNED BY rl_app;
DROP ROLE rl_app;
