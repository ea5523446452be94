-- Sharded limits (shards => N): one limit split over N rows, each with
-- rate/N, capacity/N and max_reserved/N. A call looks at two random shards
-- (the power of two choices): it serves the count from one shard when one
-- can (the fuller one when both can), else from both together, else it is
-- refused. rate_limiter.random_seed fixes the random choices, so this file
-- is deterministic. (Shards other transactions hold are passed over: see
-- the isolation spec shards.spec.)
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET rate_limiter.random_seed = 7;

CREATE FUNCTION shard_values(limit_name text) RETURNS TABLE (shard int2, value float8)
LANGUAGE sql AS $$
    SELECT shard, value FROM rate_limiter.rate_limits WHERE name = limit_name ORDER BY shard
$$;

-- Two shards of 10 tokens (10 per second each): every call looks at both.
SELECT rate_limiter.define('two', rate_limiter.token_bucket(20, '1 second', shards => 2));
-- A brand-new limit: both shards are full (no rows); a tie goes to the
-- first shard drawn, which alone serves 4.
SELECT * FROM rate_limiter.rate_limit('two', count => 4);
SELECT * FROM shard_values('two');
-- The fuller-shard rule: 3 tokens come from the full shard, not the one at 6.
SELECT * FROM rate_limiter.rate_limit('two', count => 3);
SELECT * FROM shard_values('two');
-- Again from the fuller one (7 -> 6).
SELECT * FROM rate_limiter.rate_limit('two', count => 1);
SELECT * FROM shard_values('two');
-- Neither shard alone has 9, together they have 12: both go to 1.5.
SELECT * FROM rate_limiter.rate_limit('two', count => 9);
SELECT * FROM shard_values('two');
-- 4 more: together they have 3, refused, nothing written; one more token
-- takes 0.05 s with both refilling at 10 per second.
SELECT * FROM rate_limiter.rate_limit('two', count => 4);
SELECT * FROM shard_values('two');
-- One microsecond early it is still refused; exactly retry_after later it
-- succeeds (from both shards).
SET rate_limiter.now_override = '2026-01-01 00:00:00.049999+00';
SELECT ok FROM rate_limiter.rate_limit('two', count => 4);
SET rate_limiter.now_override = '2026-01-01 00:00:00.05+00';
SELECT * FROM rate_limiter.rate_limit('two', count => 4);
SELECT * FROM shard_values('two');

-- Four shards of 10: a brand-new limit serves 20 (two full shards) at once;
-- more than two shards hold is an error, not a refusal.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
\set four 'rate_limiter.token_bucket(40, ''1 second'', shards => 4)'
SELECT * FROM rate_limiter.rate_limit('four', count => 20, config => :four);
SELECT * FROM shard_values('four');
SELECT * FROM rate_limiter.rate_limit('four', count => 20.5, config => :four);
-- With reservations two shards may also owe 2 x max_reserved / N: here
-- two shards of 10 tokens that may owe 2 each, so at most 24 at once.
\set two_reserve 'rate_limiter.token_bucket(20, ''1 second'', max_reserved => 4, shards => 2)'
SELECT * FROM rate_limiter.rate_limit('two_reserve', count => 24.5, reserve => true, config => :two_reserve);
SELECT * FROM rate_limiter.rate_limit('two_reserve', count => 24, reserve => true, config => :two_reserve);
SELECT * FROM shard_values('two_reserve');
-- A debt beyond what the shards may owe is refused until it fits: one
-- more token must first be paid back (0.05 s at 10 per second per shard).
SELECT * FROM rate_limiter.rate_limit('two_reserve', count => 1, reserve => true, config => :two_reserve);

-- rate_check answers for the two fullest shards and sums every shard:
-- 'four' has two empty shards and two full ones (no rows).
SELECT * FROM rate_limiter.rate_check('four', count => 20, config => :four);
SELECT * FROM rate_limiter.rate_check('four', count => 0, config => :four);
SELECT * FROM shard_values('four');

-- rate_reset forgets every shard of the key.
SELECT rate_limiter.rate_reset('four');
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'four';

-- Keys are separate limits, each with its own shards.
SELECT ok, remaining FROM rate_limiter.rate_limit('two', 'alice', 10);
SELECT key, shard, value FROM rate_limiter.rate_limits WHERE name = 'two' ORDER BY key, shard;

-- Redefining with another number of shards discards the state (each row
-- would mean something else); another rate keeps it.
SELECT rate_limiter.define('two', rate_limiter.token_bucket(40, '1 second', shards => 2));
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'two';
SELECT rate_limiter.define('two', rate_limiter.token_bucket(40, '1 second', shards => 4));
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'two';

-- A fixed window splits rate and capacity the same way: 6 per minute over
-- 3 shards is 2 per shard and window. 4 come from two shards, 2 from the
-- third; then the limit is empty until the next window, 50 s away.
SET rate_limiter.now_override = '2026-01-01 00:00:10+00';
\set window 'rate_limiter.fixed_window(6, ''1 minute'', shards => 3, start => ''2026-01-01'')'
SELECT ok, retry_after FROM rate_limiter.rate_limit('window', count => 4, config => :window);
SELECT ok, retry_after FROM rate_limiter.rate_limit('window', count => 2, config => :window);
SELECT ok, retry_after FROM rate_limiter.rate_limit('window', count => 1, config => :window);
SELECT ok, retry_after FROM rate_limiter.rate_limit('window', count => 1, config => :window);
SELECT * FROM shard_values('window');

-- The same seed gives the same choices again.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET rate_limiter.random_seed = 42;
SELECT ok FROM rate_limiter.rate_limit('seeded_a', count => 1, config => :four);
SELECT ok FROM rate_limiter.rate_limit('seeded_a', count => 1, config => :four);
SET rate_limiter.random_seed = 42;
SELECT ok FROM rate_limiter.rate_limit('seeded_b', count => 1, config => :four);
SELECT ok FROM rate_limiter.rate_limit('seeded_b', count => 1, config => :four);
SELECT a.shard, a.value, b.value
FROM shard_values('seeded_a') a FULL JOIN shard_values('seeded_b') b USING (shard);

-- The number of shards is bounded by the smallint shard column.
SELECT (rate_limiter.token_bucket(40000, '1 second', shards => 32767)).shards;
SELECT rate_limiter.token_bucket(40000, '1 second', shards => 32768);
SELECT rate_limiter.token_bucket(1, '1 second', shards => 0);
-- define warns when a shard would hold fewer than 5 tokens.
SELECT rate_limiter.define('thin', rate_limiter.token_bucket(8, '1 second', shards => 2));
SELECT rate_limiter.define('thick', rate_limiter.token_bucket(10, '1 second', shards => 2));

-- (What a SET of rate_limiter.random_seed accepts: settings.sql.)

SELECT rate_limiter.undefine(name) FROM (VALUES ('two'), ('thin'), ('thick')) AS d(name);
DROP FUNCTION shard_values(text);
