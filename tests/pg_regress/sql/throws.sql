-- throws => true: a refused call raises SQLSTATE RL429 (or the value of
-- rate_limiter.sqlstate) with a JSON DETAIL, aborting the transaction.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('login', rate_limiter.token_bucket(5, '1 minute', capacity => 1));

SELECT * FROM rate_limiter.rate_limit('login', 'eve', throws => true);
SELECT * FROM rate_limiter.rate_limit('login', 'eve', throws => true);
\echo :LAST_ERROR_SQLSTATE
-- The global limit says so, and its JSON key is null.
SELECT * FROM rate_limiter.rate_limit('login', throws => true);
SELECT * FROM rate_limiter.rate_limit('login', throws => true);
\echo :LAST_ERROR_SQLSTATE
-- rate_check raises the same way.
SELECT * FROM rate_limiter.rate_check('login', 'eve', throws => true);
\echo :LAST_ERROR_SQLSTATE

-- The DETAIL is a JSON object with name, key and retry_after_ms (a number,
-- never less than the exact retry_after).
DO $$
DECLARE
    detail jsonb;
BEGIN
    PERFORM * FROM rate_limiter.rate_limit('login', 'eve', throws => true);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'sqlstate=% name=% key=% retry_after_ms=% (%), key is a string: %',
        SQLSTATE, detail->>'name', detail->>'key', detail->'retry_after_ms',
        jsonb_typeof(detail->'retry_after_ms'), jsonb_typeof(detail->'key') = 'string';
END
$$;

-- Handlers can catch it by its SQLSTATE.
DO $$
BEGIN
    PERFORM * FROM rate_limiter.rate_limit('login', 'eve', throws => true);
EXCEPTION WHEN SQLSTATE 'RL429' THEN
    RAISE NOTICE 'caught RL429';
END
$$;

-- Raising aborts the transaction, so what else it consumed is rolled back.
SELECT rate_limiter.define('other', rate_limiter.token_bucket(10, '1 minute'));
BEGIN;
SELECT remaining FROM rate_limiter.rate_limit('other', 'eve', 4);
SELECT * FROM rate_limiter.rate_limit('login', 'eve', throws => true);
COMMIT;
SELECT * FROM rate_limiter.rate_check('other', 'eve', 0);

-- A successful reservation never raises.
SELECT ok, retry_after FROM rate_limiter.rate_limit('login', 'eve', reserve => true, throws => true);

-- rate_limiter.sqlstate picks the SQLSTATE, e.g. PostgREST's PT429 (HTTP 429).
SET rate_limiter.sqlstate = 'PT429';
SELECT * FROM rate_limiter.rate_limit('login', 'eve', throws => true);
\echo :LAST_ERROR_SQLSTATE
RESET rate_limiter.sqlstate;
SHOW rate_limiter.sqlstate;

-- Only five characters of 0-9A-Z outside class 00 are accepted.
SET rate_limiter.sqlstate = 'rl429';
SET rate_limiter.sqlstate = 'RL42';
SET rate_limiter.sqlstate = 'RL4290';
SET rate_limiter.sqlstate = '00000';
SET rate_limiter.sqlstate = 'R-429';
SET rate_limiter.sqlstate = '';
SHOW rate_limiter.sqlstate;

-- Misspelled settings of the rate_limiter prefix are errors.
SET rate_limiter.sql_state = 'PT429';
\echo :LAST_ERROR_SQLSTATE

-- rate_limiter.now_override takes a finite timestamptz literal or ''.
SET rate_limiter.now_override = 'not a time';
SET rate_limiter.now_override = 'infinity';
SET rate_limiter.now_override = '';
SHOW rate_limiter.now_override;

-- The test server preloads the library (shared_preload_libraries, for
-- rate_limiter.stats), so every session checks a rate_limiter.* setting
-- when it is SET: a bad value is refused at once. (Without preloading,
-- SET before the session's first call keeps any value as a placeholder;
-- loading the library then gives a WARNING and the default applies.)
\c
SET rate_limiter.sqlstate = 'toolong';
SELECT ok FROM rate_limiter.rate_check('placeholder', config => rate_limiter.token_bucket(1, '1 minute'));
SHOW rate_limiter.sqlstate;
SET rate_limiter.sqlstate = 'toolong';
SHOW rate_limiter.sqlstate;
