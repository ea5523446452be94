-- prune(): deletes the state rows that change no later answer. A missing
-- row is a full limit, so a row can go once it is full again and says
-- exactly what a missing row would. (prune() works on the whole table:
-- this test runs first, on an empty one.)
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET rate_limiter.random_seed = 1;

SELECT rate_limiter.define('prune_bucket', rate_limiter.token_bucket(10, '1 minute'));
SELECT rate_limiter.define('prune_window', rate_limiter.fixed_window(10, '1 hour', start => '2026-01-01 00:00:00+00'));
SELECT rate_limiter.define('prune_sharded', rate_limiter.token_bucket(40, '1 minute', shards => 4));
SELECT ok FROM rate_limiter.rate_limit('prune_bucket', 'a', 10);
SELECT ok FROM rate_limiter.rate_limit('prune_bucket', 'b', 1);
SELECT ok FROM rate_limiter.rate_limit('prune_bucket', 'c', 0);   -- a full row
SELECT ok FROM rate_limiter.rate_limit('prune_bucket', 'debt', 15, reserve => true);
SELECT ok FROM rate_limiter.rate_limit('prune_window', 'a', 3);
SELECT ok FROM rate_limiter.rate_limit('prune_sharded', NULL, 2);
-- Inline configs: no definition, so prune only removes these by age.
SELECT ok FROM rate_limiter.rate_limit('prune_inline', 'a', 1, config => rate_limiter.token_bucket(10, '1 second'));
SELECT name, key, shard, value, ts FROM rate_limiter.rate_limits WHERE name LIKE 'prune\_%' ORDER BY name, key, shard;

-- Now: only the full row goes.
SELECT rate_limiter.prune();
-- 6 s later b has refilled (1 token per 6 s): it goes too.
SET rate_limiter.now_override = '2026-01-01 00:00:06+00';
SELECT rate_limiter.prune();
SELECT name, key, shard FROM rate_limiter.rate_limits WHERE name LIKE 'prune\_%' ORDER BY name, key, shard;
-- 60 s: a and the sharded limit are full; the debt (-5) is not (it is at 5).
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT rate_limiter.prune();
SELECT name, key, shard FROM rate_limiter.rate_limits WHERE name LIKE 'prune\_%' ORDER BY name, key, shard;
-- By 00:59:59 the debt is paid (that row goes); the fixed window is full
-- again only when the next window opens, at 01:00.
SET rate_limiter.now_override = '2026-01-01 00:59:59+00';
SELECT rate_limiter.prune();
SET rate_limiter.now_override = '2026-01-01 01:00:00+00';
SELECT rate_limiter.prune();
SELECT name, key, shard FROM rate_limiter.rate_limits WHERE name LIKE 'prune\_%' ORDER BY name, key, shard;

-- Rows of names without a definition go only with older_than, by ts.
SELECT rate_limiter.prune(older_than => '2 hours');
SELECT rate_limiter.prune(older_than => '30 minutes');
SELECT name, key, shard FROM rate_limiter.rate_limits WHERE name LIKE 'prune\_%' ORDER BY name, key, shard;

-- Pruned limits answer as they would have: full.
SELECT * FROM rate_limiter.rate_check('prune_bucket', 'a', 10);

-- Rolled back with its transaction.
BEGIN;
SELECT ok FROM rate_limiter.rate_limit('prune_bucket', 'z', 0);
SELECT rate_limiter.prune();
ROLLBACK;
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'prune_bucket' AND key = 'z';

-- Errors.
SELECT rate_limiter.prune(older_than => '-1 second');
SELECT rate_limiter.prune(older_than => '1 month -40 days');
BEGIN READ ONLY;
SELECT rate_limiter.prune();
ROLLBACK;

SELECT rate_limiter.undefine(name) FROM (VALUES ('prune_bucket'), ('prune_window'), ('prune_sharded')) AS names(name);
DELETE FROM rate_limiter.rate_limits WHERE name LIKE 'prune\_%';
