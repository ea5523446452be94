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
-- (What a SET of the rate_limiter settings accepts: settings.sql.)
