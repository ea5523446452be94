-- Reading a limit without consuming: status() for a UI, http_headers() for
-- an HTTP response (draft-ietf-httpapi-ratelimit-headers-10). Both take no
-- lock, write nothing and work in a read-only transaction.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET rate_limiter.random_seed = 3;

-- 10 per minute, bursts of 3.
SELECT rate_limiter.define('http_api', rate_limiter.token_bucket(10, '1 minute', capacity => 3));

-- A limit never used is full now.
SELECT * FROM rate_limiter.status('http_api', 'alice');
-- After two calls: one token left, full again 12 s later (2 tokens at 6 s each).
SELECT ok, remaining FROM rate_limiter.rate_limit('http_api', 'alice');
SELECT ok, remaining FROM rate_limiter.rate_limit('http_api', 'alice');
SELECT * FROM rate_limiter.status('http_api', 'alice');
-- status wrote and locked nothing.
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'http_api';

-- The headers for an admitted call: the policy (q = rate, w = period in
-- seconds), what is left and when the limit is full again.
SELECT rate_limiter.http_headers('http_api', 'alice', true, NULL, 1);
-- A refused call: t and Retry-After are the retry_after, rounded up to
-- whole seconds (never early).
SELECT ok, remaining FROM rate_limiter.rate_limit('http_api', 'alice');
SELECT (r).ok, (r).retry_after, rate_limiter.http_headers('http_api', 'alice', (r).ok, (r).retry_after, (r).remaining)
FROM (SELECT rate_limiter.rate_limit('http_api', 'alice') AS r) call;
SELECT rate_limiter.http_headers('http_api', 'alice', false, '5.000001 seconds', 0);
-- Without a result: the current state, no Retry-After.
SELECT rate_limiter.http_headers('http_api', 'alice');
-- Debt shows as 0 left; fractional quotas are decimals; names are quoted
-- strings with " and \ escaped.
SELECT rate_limiter.http_headers('the "quoted" \ name', ok => true, remaining => -4,
    config => rate_limiter.token_bucket(2.5, '90 seconds'));

-- A fixed window is full again at its next window start; sharded limits
-- sum their shards.
SELECT * FROM rate_limiter.status('http_window', config => rate_limiter.fixed_window(5, '1 minute', start => '2025-12-31 23:59:30+00'));
SELECT ok FROM rate_limiter.rate_limit('http_window', count => 5, config => rate_limiter.fixed_window(5, '1 minute', start => '2025-12-31 23:59:30+00'));
SELECT * FROM rate_limiter.status('http_window', config => rate_limiter.fixed_window(5, '1 minute', start => '2025-12-31 23:59:30+00'));
SELECT ok FROM rate_limiter.rate_limit('http_hot', count => 6, config => rate_limiter.token_bucket(40, '1 second', shards => 4));
SELECT * FROM rate_limiter.status('http_hot', config => rate_limiter.token_bucket(40, '1 second', shards => 4));

-- Read-only transactions are fine.
BEGIN READ ONLY;
SELECT value FROM rate_limiter.status('http_api', 'alice');
SELECT rate_limiter.http_headers('http_api', 'alice') ->> 'RateLimit';
COMMIT;

-- Without remaining, r= is the whole part of the value status shows: 2.3
-- tokens less 0.3 is stored as 1.9999999999999998 and shown as 2.
SELECT rate_limiter.rate_limit('http_noise', 'k', 0.3, config => rate_limiter.token_bucket(2.3, '1 hour'));
SELECT value FROM rate_limiter.status('http_noise', 'k', config => rate_limiter.token_bucket(2.3, '1 hour'));
SELECT rate_limiter.http_headers('http_noise', 'k', config => rate_limiter.token_bucket(2.3, '1 hour')) ->> 'RateLimit' AS rate_limit;
SELECT rate_limiter.rate_reset('http_noise', 'k');

-- Errors: NULL name (22004), unknown limit (42704), a refusal without its
-- retry_after (22004), a name that cannot be sent in a header (22023).
SELECT * FROM rate_limiter.status(NULL);
SELECT * FROM rate_limiter.status('no such limit');
SELECT rate_limiter.http_headers('http_api', 'alice', false);
SELECT rate_limiter.http_headers('caf' || chr(233), config => rate_limiter.token_bucket(1, '1 second'));
SELECT rate_limiter.http_headers('http_api', 'alice', false, '-1 second');

SELECT rate_limiter.rate_reset('http_api', 'alice'), rate_limiter.undefine('http_api');
SELECT rate_limiter.rate_reset('http_window'), rate_limiter.rate_reset('http_hot');
