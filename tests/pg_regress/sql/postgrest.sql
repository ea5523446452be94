-- postgrest_limit(): PostgREST's db-pre-request hook. Admitted requests get
-- the RateLimit fields appended to response.headers; refused ones raise
-- SQLSTATE PGRST, which PostgREST turns into an HTTP 429 with the headers
-- from the error's DETAIL.
SET timezone = 'UTC';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('api', rate_limiter.token_bucket(2, '1 minute'));

-- What PostgREST does per request: a transaction, the pre-request
-- function, then the query. Headers set earlier in the request are kept.
BEGIN;
SELECT set_config('response.headers', '[{"Cache-Control": "no-store"}]', true);
SELECT rate_limiter.postgrest_limit('api', 'user-1');
SELECT jsonb_pretty(current_setting('response.headers')::jsonb);
COMMIT;

-- No earlier headers: an array with the two fields.
BEGIN;
SELECT rate_limiter.postgrest_limit('api', 'user-1');
SELECT current_setting('response.headers')::jsonb;
COMMIT;

-- The third request in the minute is refused: SQLSTATE PGRST, and message
-- and detail are the JSON PostgREST expects.
DO $$
DECLARE
    state text;
    message text;
    detail text;
BEGIN
    PERFORM rate_limiter.postgrest_limit('api', 'user-1');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT, detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'sqlstate: %', state;
    RAISE NOTICE 'message: %', jsonb_pretty(message::jsonb);
    RAISE NOTICE 'detail: %', jsonb_pretty(detail::jsonb);
END
$$;
-- Nothing was consumed by the refused request.
SELECT value FROM rate_limiter.rate_limits WHERE name = 'api' AND key = 'user-1';

-- GET and HEAD run read-only: nothing is consumed, even when the limit is
-- empty; the headers report where it stands.
BEGIN READ ONLY;
SELECT rate_limiter.postgrest_limit('api', 'user-1');
SELECT current_setting('response.headers')::jsonb;
COMMIT;
BEGIN READ ONLY;
SELECT rate_limiter.postgrest_limit('api', 'user-2');
SELECT current_setting('response.headers')::jsonb;
COMMIT;
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'api' AND key = 'user-2';

-- Errors.
SELECT rate_limiter.postgrest_limit(NULL, 'user-1');
SELECT rate_limiter.postgrest_limit('api', 'user-1', NULL);
SELECT rate_limiter.postgrest_limit('api_nope', 'user-1');
BEGIN;
SELECT set_config('response.headers', 'not json', true);
SELECT rate_limiter.postgrest_limit('api', 'user-3');
ROLLBACK;

SELECT rate_limiter.undefine('api');
DELETE FROM rate_limiter.rate_limits WHERE name = 'api';
