-- Config constructors validate and return a rate_limiter.config; NULL
-- capacity, max_reserved and start stay NULL (defaults apply when a limit
-- is evaluated).
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';

SELECT rate_limiter.token_bucket(10, '1 minute');
SELECT rate_limiter.token_bucket(10, '1 minute', capacity => 3, max_reserved => 5);
SELECT rate_limiter.fixed_window(100, '1 hour', start => '2026-01-01 00:00:00+00');
SELECT (rate_limiter.fixed_window(rate => 1, period => '1 day')).*;

-- Invalid values: SQLSTATE 22023, naming the parameter; nothing else.
SELECT rate_limiter.token_bucket(0, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(-1, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket('NaN', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket('Infinity', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '1 month -30 days');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '1 minute', capacity => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '1 minute', capacity => 'Infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '1 minute', max_reserved => -0.5);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, '1 minute', shards => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.fixed_window(10, '1 minute', max_reserved => 'NaN');
\echo :LAST_ERROR_SQLSTATE

-- More shards than the smallint shard column numbers: 22023 (shards.sql
-- shows sharded limits at work).
SELECT rate_limiter.token_bucket(10, '1 minute', shards => 32768);
\echo :LAST_ERROR_SQLSTATE

-- An infinite period is never accepted: PostgreSQL 17 and later parse
-- 'infinity' as an interval and the constructor refuses it (22023); before
-- 17 it is not an interval at all (22007).
DO $$
BEGIN
    PERFORM rate_limiter.token_bucket(10, 'infinity');
    RAISE NOTICE 'an infinite period was accepted';
EXCEPTION WHEN invalid_parameter_value OR invalid_datetime_format THEN
    RAISE NOTICE 'an infinite period is refused';
END $$;

-- NULL for a required argument: 22004.
SELECT rate_limiter.token_bucket(NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.token_bucket(10, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.fixed_window(10, '1 minute', shards => NULL);
\echo :LAST_ERROR_SQLSTATE

-- Zero capacity and zero max_reserved are allowed.
SELECT rate_limiter.token_bucket(10, '1 minute', capacity => 0, max_reserved => 0);

-- Months count as PostgreSQL's extract(epoch) counts them (30 days).
SELECT rate_limiter.token_bucket(10, '1 month');

-- A hand-built config is validated wherever it is used, with the same errors.
SELECT * FROM rate_limiter.rate_limit('hand', config => ROW('token bucket', 0, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('hand', config => ROW('token bucket', 10, NULL, NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('hand', config => ROW(NULL, 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_check('hand', config => ROW('fixed window', 10, '1 minute', -3, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('hand', ROW('token bucket', 10, '1 minute', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('hand', config => ROW('leaky bucket', 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
-- None of these wrote anything.
SELECT count(*) FROM rate_limiter.rate_limits;
SELECT count(*) FROM rate_limiter.definitions;
