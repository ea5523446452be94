-- Named limits: define once, use by name. An inline config wins over a
-- definition; with neither, the call fails with 42704.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

SELECT rate_limiter.define('signup', rate_limiter.token_bucket(3, '1 hour'));
SELECT name, kind, rate, period, capacity, max_reserved, shards, start FROM rate_limiter.definitions;
SELECT * FROM rate_limiter.rate_limit('signup');
SELECT * FROM rate_limiter.rate_limit('signup', count => 2);
SELECT * FROM rate_limiter.rate_limit('signup');

-- A misspelled name is an error, never a silent new limit.
SELECT * FROM rate_limiter.rate_limit('sigunp');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_check('sigunp');
\echo :LAST_ERROR_SQLSTATE

-- An inline config wins over the definition of the same name (100 per
-- hour: the next token is 36 s away, not 20 minutes).
SELECT * FROM rate_limiter.rate_check('signup', config => rate_limiter.token_bucket(100, '1 hour'));

-- Changing only rate, capacity, max_reserved or start keeps the state,
-- capped at the new capacity.
SELECT rate_limiter.define('signup', rate_limiter.token_bucket(3, '1 hour', capacity => 10));
SELECT value FROM rate_limiter.rate_limits WHERE name = 'signup';
SELECT * FROM rate_limiter.rate_check('signup', count => 0);
SELECT rate_limiter.define('quota', rate_limiter.token_bucket(100, '1 day'));
SELECT * FROM rate_limiter.rate_limit('quota', 'u1', 10);
SELECT rate_limiter.define('quota', rate_limiter.token_bucket(100, '1 day', capacity => 50));
SELECT * FROM rate_limiter.rate_check('quota', 'u1', 0);

-- Changing kind, period or shards discards the state.
SELECT rate_limiter.define('quota', rate_limiter.token_bucket(100, '24 hours', capacity => 50));
SELECT count(*) AS state_rows_kept_for_equal_period FROM rate_limiter.rate_limits WHERE name = 'quota';
SELECT rate_limiter.define('quota', rate_limiter.token_bucket(100, '12 hours'));
SELECT count(*) AS state_rows_after_period_change FROM rate_limiter.rate_limits WHERE name = 'quota';
SELECT * FROM rate_limiter.rate_limit('quota', 'u1', 10);
SELECT rate_limiter.define('quota', rate_limiter.fixed_window(100, '12 hours', start => '2026-01-01'));
SELECT count(*) AS state_rows_after_kind_change FROM rate_limiter.rate_limits WHERE name = 'quota';

-- undefine: true if it existed; the state rows are left alone.
SELECT * FROM rate_limiter.rate_limit('signup');
SELECT rate_limiter.undefine('signup');
SELECT rate_limiter.undefine('signup');
SELECT count(*) AS state_rows FROM rate_limiter.rate_limits WHERE name = 'signup';
SELECT * FROM rate_limiter.rate_limit('signup');
\echo :LAST_ERROR_SQLSTATE

-- define validates, and reports NULLs first.
SELECT rate_limiter.define(NULL, rate_limiter.token_bucket(1, '1 hour'));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('x', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('x', ROW('token bucket', 1, '1 hour', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
SELECT rate_limiter.define('x', ROW('token bucket', 1, '-1 hour', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.undefine(NULL);
\echo :LAST_ERROR_SQLSTATE
-- define stores NULL capacity, max_reserved and start as NULL.
SELECT name, capacity IS NULL AS capacity_null, max_reserved IS NULL AS max_reserved_null, start IS NULL AS start_null
FROM rate_limiter.definitions WHERE name = 'x';

-- rate_reset forgets (name, key) so the next call starts full; it needs
-- no definition and is a no-op without state.
SELECT * FROM rate_limiter.rate_limit('quota', 'u2', 100);
SELECT rate_limiter.rate_reset('quota', 'u2');
SELECT * FROM rate_limiter.rate_check('quota', 'u2', 100);
SELECT rate_limiter.rate_reset('never-defined', 'nobody');
SELECT rate_limiter.rate_reset(NULL);
\echo :LAST_ERROR_SQLSTATE
