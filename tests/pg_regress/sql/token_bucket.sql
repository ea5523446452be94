-- Token bucket: tokens arrive continuously at rate/period, up to capacity.
-- Time is fixed with rate_limiter.now_override (superuser only).
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';

-- The token-bucket doc's table: capacity 20, 10 tokens per minute.
\set chat 'rate_limiter.token_bucket(10, ''1 minute'', capacity => 20)'
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT remaining FROM rate_limiter.rate_check('chat', 'alice', 0, config => :chat);   -- 0 s: full
SET rate_limiter.now_override = '2026-01-01 00:00:01+00';
SELECT * FROM rate_limiter.rate_limit('chat', 'alice', 5, config => :chat);           -- 1 s: send 5
SET rate_limiter.now_override = '2026-01-01 00:00:05+00';
SELECT round(remaining::numeric, 2) FROM rate_limiter.rate_check('chat', 'alice', 0, config => :chat);  -- 15.67
SET rate_limiter.now_override = '2026-01-01 00:00:10+00';
SELECT remaining FROM rate_limiter.rate_check('chat', 'alice', 0, config => :chat);   -- 16.5
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT remaining FROM rate_limiter.rate_check('chat', 'alice', 0, config => :chat);   -- 20: capped
-- The state is two numbers; rate_check wrote nothing.
SELECT name, key, shard, value, ts FROM rate_limiter.rate_limits WHERE name = 'chat';

-- "10 per minute with a burst of 3": three sends pass, the fourth is
-- refused and told to retry after 6 seconds.
\set send 'rate_limiter.token_bucket(10, ''1 minute'', capacity => 3)'
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('send', 'bob', config => :send);
SELECT * FROM rate_limiter.rate_limit('send', 'bob', config => :send);
SELECT * FROM rate_limiter.rate_limit('send', 'bob', config => :send);
SELECT * FROM rate_limiter.rate_limit('send', 'bob', config => :send);
-- One microsecond before retry_after it is still refused...
SET rate_limiter.now_override = '2026-01-01 00:00:05.999999+00';
SELECT * FROM rate_limiter.rate_limit('send', 'bob', config => :send);
-- ...and exactly retry_after later it succeeds.
SET rate_limiter.now_override = '2026-01-01 00:00:06+00';
SELECT * FROM rate_limiter.rate_limit('send', 'bob', config => :send);

-- retry_after is rounded up to the next microsecond: 1 token at 3 per
-- second is 333333.33... microseconds away.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('thirds', count => 3, config => rate_limiter.token_bucket(3, '1 second'));
SELECT * FROM rate_limiter.rate_limit('thirds', config => rate_limiter.token_bucket(3, '1 second'));
SET rate_limiter.now_override = '2026-01-01 00:00:00.333334+00';
SELECT ok FROM rate_limiter.rate_limit('thirds', config => rate_limiter.token_bucket(3, '1 second'));

-- Reservations: 3 tokens left, a request for 5 goes 2 into debt and is
-- told when its work may run (2 tokens at 10/minute = 12 s).
\set llm 'rate_limiter.token_bucket(10, ''1 minute'')'
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('llm', 'carol', 7, config => :llm);
SELECT * FROM rate_limiter.rate_limit('llm', 'carol', 5, reserve => true, config => :llm);
-- The next caller pays the debt back first: 1 token is 18 s away.
SELECT * FROM rate_limiter.rate_limit('llm', 'carol', config => :llm);
SELECT * FROM rate_limiter.rate_check('llm', 'carol', reserve => true, config => :llm);

-- max_reserved bounds the debt. Empty bucket, max_reserved 2: a request
-- for 3 would owe 3, so it is refused until it would owe at most 2 (6 s).
\set capped 'rate_limiter.token_bucket(10, ''1 minute'', max_reserved => 2)'
SELECT * FROM rate_limiter.rate_limit('capped', count => 10, config => :capped);
SELECT * FROM rate_limiter.rate_limit('capped', count => 3, reserve => true, config => :capped);
SET rate_limiter.now_override = '2026-01-01 00:00:06+00';
SELECT * FROM rate_limiter.rate_limit('capped', count => 3, reserve => true, config => :capped);
-- max_reserved = 0 means no debt at all.
SELECT * FROM rate_limiter.rate_limit('strict', count => 10, config => rate_limiter.token_bucket(10, '1 minute', max_reserved => 0));
SELECT * FROM rate_limiter.rate_limit('strict', reserve => true, config => rate_limiter.token_bucket(10, '1 minute', max_reserved => 0));

-- A count that can never succeed is an error (22023), not a retry_after.
SELECT * FROM rate_limiter.rate_limit('send', 'bob', 4, config => :send);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('capped', count => 12.5, reserve => true, config => :capped);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('send', 'bob', -1, config => :send);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('send', 'bob', 'NaN', config => :send);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('send', 'bob', 'Infinity', reserve => true, config => :send);
\echo :LAST_ERROR_SQLSTATE
-- Unlimited reservations accept any finite count.
SELECT * FROM rate_limiter.rate_limit('huge', count => 1000, reserve => true, config => :llm);

-- Time never runs backwards: a clock step back mints no tokens and does
-- not move the stored ts back.
SET rate_limiter.now_override = '2026-01-01 00:10:00+00';
SELECT * FROM rate_limiter.rate_limit('back', count => 10, config => :llm);
SET rate_limiter.now_override = '2026-01-01 00:05:00+00';
SELECT * FROM rate_limiter.rate_limit('back', config => :llm);
SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'back';
-- retry_after counts from the (earlier) now to the stored ts plus the refill.
SELECT retry_after FROM rate_limiter.rate_check('back', config => :llm);

-- A missing row is a full bucket; capacity defaults to rate.
SELECT * FROM rate_limiter.rate_check('fresh', count => 10, config => :llm);
SELECT * FROM rate_limiter.rate_check('fresh', count => 10.5, config => :llm);
\echo :LAST_ERROR_SQLSTATE

-- Without rate_limiter.now_override a call reads the real clock, the one
-- clock_timestamp() reads: the time a new key's row stores lies between
-- two readings of clock_timestamp() taken around the call.
RESET rate_limiter.now_override;
CREATE TEMP TABLE clock_before AS SELECT clock_timestamp() AS at;
SELECT ok FROM rate_limiter.rate_limit('real_clock', 'k', config => :llm);
SELECT (SELECT at FROM clock_before) <= ts AND ts <= clock_timestamp() AS between_readings
FROM rate_limiter.rate_limits WHERE name = 'real_clock';

-- retry_after is exact to the microsecond however long it is: beyond 2^53
-- microseconds (about 285 years) too, where a conversion through a float
-- would round it (to 3214200:00:01 here).
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT retry_after, (extract(epoch FROM retry_after) * 1000000)::bigint AS micros
FROM rate_limiter.rate_check('centuries', 'k', 4, reserve => true,
                             config => rate_limiter.token_bucket(3, '1100 years 3 seconds', 3, 3));
RESET rate_limiter.now_override;

-- remaining is shown without float noise: at most nine decimals, rounded
-- down, a value just below a multiple of 1e-9 being that multiple (the
-- stored 0.3 - 0.1 is 0.19999999999999998). A call for exactly the
-- remaining shown is admitted, though it is above what is stored; a third
-- of a token is shown rounded down.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('noise', 'k', 0.1, config => rate_limiter.token_bucket(0.3, '1 hour'));
SELECT value FROM rate_limiter.rate_limits WHERE name = 'noise';
SELECT ok, remaining FROM rate_limiter.rate_limit('noise', 'k', 0.2, config => rate_limiter.token_bucket(0.3, '1 hour'));
SELECT ok, remaining FROM rate_limiter.rate_check('thirds', 'k', 1, config => rate_limiter.token_bucket(3, '1 hour', 4.0 / 3));
SELECT value FROM rate_limiter.status('thirds', 'k', config => rate_limiter.token_bucket(3, '1 hour', 4.0 / 3));
RESET rate_limiter.now_override;
