-- Sliding window (docs/shapes.md): the weighted two-window counter. A call
-- of count is admitted when prev * (1 - f) + cur + count <= rate, where
-- cur and prev are what this window and the one before admitted and f is
-- how far into this window the call is. No flooring; a refusal changes
-- nothing; retry_after is the first instant the same call succeeds.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.random_seed = 7;

-- 50 per minute, windows on the minute.
SELECT rate_limiter.define('sliding', rate_limiter.sliding_window(50, '1 minute',
                                                                   start => '2026-01-01 00:00:00+00'));
SELECT kind, rate, period, capacity, start FROM rate_limiter.definitions WHERE name = 'sliding';

-- 42 in the window 00:00 - 00:01.
SET rate_limiter.now_override = '2026-01-01 00:00:30+00';
SELECT * FROM rate_limiter.rate_limit('sliding', 'k', 42);
-- 15 s into the next window the previous one weighs 42 * 0.75 = 31.5:
-- 17 more fit (48.5), then 1 more (49.5, remaining 0.5).
SET rate_limiter.now_override = '2026-01-01 00:01:15+00';
SELECT * FROM rate_limiter.rate_limit('sliding', 'k', 17);
SELECT * FROM rate_limiter.rate_limit('sliding', 'k', 1);
-- The state: value is this window's count, prev the previous one's, ts
-- this window's start.
SELECT value, prev, ts FROM rate_limiter.rate_limits WHERE name = 'sliding';
-- cur 18: refused, remaining 0.5, retry after 11/42 of the window from its
-- start (15.714286 s), rounded up to the microsecond; nothing written.
SELECT * FROM rate_limiter.rate_limit('sliding', 'k', 1);
SELECT value, prev, ts FROM rate_limiter.rate_limits WHERE name = 'sliding';
SELECT * FROM rate_limiter.rate_check('sliding', 'k', 1);
-- Exactly then it succeeds, and not a microsecond before.
SET rate_limiter.now_override = '2026-01-01 00:01:15.714285+00';
SELECT ok FROM rate_limiter.rate_check('sliding', 'k', 1);
SET rate_limiter.now_override = '2026-01-01 00:01:15.714286+00';
SELECT ok FROM rate_limiter.rate_limit('sliding', 'k', 1);
-- status: what a call could take (rate - estimate), and when the estimate
-- is 0 again (the end of the next window, when these 19 weigh nothing).
SELECT * FROM rate_limiter.status('sliding', 'k');
SELECT rate_limiter.http_headers('sliding', 'k');
-- A refusal raised (throws): RL429 with the JSON DETAIL; rate_wait with no
-- time to wait answers at once.
SELECT * FROM rate_limiter.rate_limit('sliding', 'k', 1, throws => true);
SELECT * FROM rate_limiter.rate_wait('sliding', 'k', 1, timeout => '0 seconds');
-- One window on, this window's 19 become prev; two windows on, nothing.
SET rate_limiter.now_override = '2026-01-01 00:02:30+00';
SELECT * FROM rate_limiter.rate_check('sliding', 'k', 0);
SET rate_limiter.now_override = '2026-01-01 00:03:00+00';
SELECT * FROM rate_limiter.rate_check('sliding', 'k', 0);

-- L = 10, cur 8, count 5: refused, remaining 2, nothing consumed.
SELECT rate_limiter.define('ten', rate_limiter.sliding_window(10, '1 minute', start => '2026-01-01 00:00:00+00'));
SET rate_limiter.now_override = '2026-01-01 00:00:15+00';
SELECT * FROM rate_limiter.rate_limit('ten', 'k', 8);
SELECT * FROM rate_limiter.rate_limit('ten', 'k', 5);
SELECT value, prev FROM rate_limiter.rate_limits WHERE name = 'ten';
-- A count of the whole rate waits for the window after next (01:45 from
-- now); 3 fit once 8 * (1 - f) + 3 <= 10 in the next one, at f = 1/8.
SELECT * FROM rate_limiter.rate_check('ten', 'k', 10);
SELECT * FROM rate_limiter.rate_check('ten', 'k', 3);
-- Credit gives back at most what this window admitted.
SELECT rate_limiter.rate_credit('ten', 'k', 100);
SELECT value, prev FROM rate_limiter.rate_limits WHERE name = 'ten';

-- Reservations: the estimate may go past rate by at most max_reserved, and
-- the reserved call's retry_after is when it would have fit without reserve.
SELECT rate_limiter.define('reserving', rate_limiter.sliding_window(10, '1 minute', max_reserved => 5,
                                                                     start => '2026-01-01 00:00:00+00'));
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('reserving', 'k', 10);
SELECT * FROM rate_limiter.rate_limit('reserving', 'k', 1, reserve => true);
SELECT * FROM rate_limiter.rate_limit('reserving', 'k', 5, reserve => true);
-- A call bigger than the rate never fits, reserve or not.
SELECT * FROM rate_limiter.rate_limit('reserving', 'k', 11, reserve => true);

-- The constructor: capacity is the rate; a token bucket has no start.
SELECT rate_limiter.sliding_window(10, '1 second');
SELECT rate_limiter.sliding_window(10, '1 second', max_reserved => 2, shards => 4);
SELECT rate_limiter.sliding_window(0, '1 second');
SELECT rate_limiter.sliding_window(10, '0 seconds');
SELECT rate_limiter.sliding_window(10, '1 second', shards => 0);
SELECT rate_limiter.rate_check('c', config => ROW('sliding window', 10, '1 second', 5, NULL, 1, NULL, NULL, NULL,
                                                  NULL, NULL)::rate_limiter.config);
SELECT rate_limiter.rate_check('c', config => ROW('sliding window', 10, '1 second', 10, NULL, 1, NULL, NULL, NULL,
                                                  NULL, NULL)::rate_limiter.config);

-- Without a start each key has its own phase (a hash of name and key).
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('phased', 'a', 3, config => rate_limiter.sliding_window(3, '1 hour'));
SELECT * FROM rate_limiter.rate_limit('phased', 'a', 1, config => rate_limiter.sliding_window(3, '1 hour'));

-- Sharded: 4 shards of 25 per minute; a call is served by one or two.
SELECT rate_limiter.define('sharded', rate_limiter.sliding_window(100, '1 minute', shards => 4,
                                                                   start => '2026-01-01 00:00:00+00'));
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('sharded', 'k', 30);
SELECT * FROM rate_limiter.rate_limit('sharded', 'k', 30);
SELECT * FROM rate_limiter.rate_limit('sharded', 'k', 30);
SELECT shard, value, prev FROM rate_limiter.rate_limits WHERE name = 'sharded' ORDER BY shard;
SELECT * FROM rate_limiter.status('sharded', 'k');
SET rate_limiter.now_override = '2026-01-01 00:01:30+00';
SELECT * FROM rate_limiter.rate_check('sharded', 'k', 30);

-- rate_limit_all with a sliding window and a token bucket: all or nothing.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('bucket', rate_limiter.token_bucket(100, '1 minute'));
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('ten', 'all', 6, NULL), ('bucket', 'all', 6, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('ten', 'all', 6, NULL), ('bucket', 'all', 6, NULL)]::rate_limiter.request[]);
SELECT name, value, prev FROM rate_limiter.rate_limits WHERE key = 'all' ORDER BY name;

-- Shadow mode: a refusal answers admitted and writes nothing.
SELECT rate_limiter.define('sliding_shadow', rate_limiter.sliding_window(1, '1 minute', start => '2026-01-01 00:00:00+00'),
                           enforce => false);
SELECT * FROM rate_limiter.rate_limit('sliding_shadow', 'k');
SELECT * FROM rate_limiter.rate_limit('sliding_shadow', 'k');
SELECT value FROM rate_limiter.rate_limits WHERE name = 'sliding_shadow';

-- prune() deletes a row once it changes no answer: two windows after its
-- last admission.
SET rate_limiter.now_override = '2026-01-01 00:01:59+00';
SELECT rate_limiter.prune();
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'sliding_shadow';
SET rate_limiter.now_override = '2026-01-01 00:02:00+00';
SELECT rate_limiter.prune() > 0 AS pruned;
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'sliding_shadow';

-- Redefining with another kind discards the state; with the same kind,
-- period and shards it carries on.
SELECT * FROM rate_limiter.rate_limit('ten', 'carry', 4);
SELECT rate_limiter.define('ten', rate_limiter.sliding_window(20, '1 minute', start => '2026-01-01 00:00:00+00'));
SELECT * FROM rate_limiter.rate_limit('ten', 'carry', 16);
SELECT * FROM rate_limiter.rate_limit('ten', 'carry', 1);
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'ten';
SELECT rate_limiter.define('ten', rate_limiter.token_bucket(20, '1 minute'));
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'ten';

-- A sharded reservation (docs/shapes.md, "Shards"): 2 shards of 5 per
-- minute, both used up; a reservation of 2 takes both from one shard (7
-- of its 5), and its retry_after is when every shard it took from is out
-- of debt: that shard's 7 weigh 5 again 2/7 of the next window into it,
-- at 00:01:17.142858 (47.142858 s after the call).
SET rate_limiter.now_override = '2026-01-01 00:00:30+00';
SELECT rate_limiter.define('sharded_reserve', rate_limiter.sliding_window(10, '1 minute', shards => 2,
                                                                           start => '2026-01-01 00:00:00+00'));
SELECT ok, remaining FROM rate_limiter.rate_limit('sharded_reserve', 'k', 5);
SELECT ok, remaining FROM rate_limiter.rate_limit('sharded_reserve', 'k', 5);
SELECT * FROM rate_limiter.rate_limit('sharded_reserve', 'k', 2, reserve => true);
SELECT shard, value, prev FROM rate_limiter.rate_limits WHERE name = 'sharded_reserve' ORDER BY shard;

-- Automatic blocks (docs/blocks.md) on a sliding window: the admitted
-- call that uses the window up blocks the key for 10 minutes; after the
-- window has room again the key stays refused until the block ends.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('sliding_block',
    rate_limiter.with_block(rate_limiter.sliding_window(2, '1 minute', start => '2026-01-01 00:00:00+00'),
                            block_for => '10 minutes'));
SELECT ok FROM rate_limiter.rate_limit('sliding_block', 'k', 2);
SELECT ok, retry_after FROM rate_limiter.rate_limit('sliding_block', 'k', 1);
SELECT * FROM rate_limiter.blocked('sliding_block', 'k');
SET rate_limiter.now_override = '2026-01-01 00:05:00+00';
SELECT ok, remaining, retry_after FROM rate_limiter.rate_limit('sliding_block', 'k', 1);
SET rate_limiter.now_override = '2026-01-01 00:10:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('sliding_block', 'k', 1);
SELECT rate_limiter.unblock('sliding_block', 'k');

SELECT rate_limiter.undefine(name) FROM rate_limiter.definitions ORDER BY name;
DELETE FROM rate_limiter.rate_limits;
DELETE FROM rate_limiter.blocks;
RESET rate_limiter.now_override;
RESET rate_limiter.random_seed;
