-- rate_wait(): what can be shown without the real clock. (Waiting itself
-- runs on the real clock: tests/integration/tests/rate_wait.rs.)
SET timezone = 'UTC';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('wait_hourly', rate_limiter.token_bucket(2, '1 hour'));

-- Admitted at once when tokens are there.
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k');
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k', timeout => '0');
-- Empty: the next try would come after the timeout, so it returns at once
-- with ok = false and retry_after, and consumes nothing.
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k', timeout => '10 minutes');
SELECT value FROM rate_limiter.rate_limits WHERE name = 'wait_hourly';
-- A refused try looks first (rate_check) and takes no transaction id: a
-- long wait does not use up a subtransaction and an id per try.
BEGIN;
SELECT ok FROM rate_limiter.rate_wait('wait_hourly', 'k', timeout => '10 minutes');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_transaction_id;
ROLLBACK;
-- Inline configs work as in rate_limit.
SELECT * FROM rate_limiter.rate_wait('wait_inline', 'k', 3, config => rate_limiter.fixed_window(5, '1 day'));

-- Errors: as rate_limit, and for the timeout.
SELECT * FROM rate_limiter.rate_wait(NULL);
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k', NULL);
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k', timeout => NULL);
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k', timeout => '-1 second');
SELECT * FROM rate_limiter.rate_wait('wait_nope', 'k');
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k', 3);
BEGIN READ ONLY;
SELECT * FROM rate_limiter.rate_wait('wait_hourly', 'k');
ROLLBACK;

SELECT rate_limiter.undefine('wait_hourly');
DELETE FROM rate_limiter.rate_limits WHERE name LIKE 'wait\_%';
