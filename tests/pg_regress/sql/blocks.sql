-- Blocks (docs/blocks.md): a key of a defined limit refused until an
-- instant, whatever its tokens, by every consuming and checking call;
-- block() extends, never shortens; unblock() lifts it; blocked() shows it.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

SELECT rate_limiter.define('login', rate_limiter.fixed_window(5, '1 minute', start => '2026-01-01'));
SELECT ok, remaining FROM rate_limiter.rate_limit('login', 'mallory');
-- An operator blocks a key by hand for five minutes.
SELECT rate_limiter.block('login', 'mallory', '5 minutes', 'credential stuffing');
SELECT * FROM rate_limiter.blocked('login', 'mallory');
-- Refused by every consuming and checking call, nothing consumed:
-- retry_after is the rest of the block, remaining 0.
SELECT * FROM rate_limiter.rate_limit('login', 'mallory');
SELECT * FROM rate_limiter.rate_check('login', 'mallory');
SELECT * FROM rate_limiter.rate_wait('login', 'mallory', 1, '1 second');
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW('login', 'alice', 1, NULL),
                                                ROW('login', 'mallory', 1, NULL)]::rate_limiter.request[]);
SELECT value, full_at FROM rate_limiter.status('login', 'mallory');
SELECT rate_limiter.http_headers('login', 'mallory');
SELECT rate_limiter.http_headers('login', 'mallory', false, '5 minutes');
-- With throws the DETAIL says "blocked" and why.
SELECT * FROM rate_limiter.rate_limit('login', 'mallory', throws => true);
SELECT * FROM rate_limiter.rate_check('login', 'mallory', throws => true);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW('login', 'mallory', 1, NULL)]::rate_limiter.request[],
                                          throws => true);
-- Other keys, and the key's tokens, are untouched: alice consumed in the
-- refused rate_limit_all above nothing.
SELECT ok, remaining FROM rate_limiter.rate_limit('login', 'alice');
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'login' ORDER BY key;
-- block() extends, never shortens; the newest reason is kept.
SELECT rate_limiter.block('login', 'mallory', '1 minute', 'still at it');
SELECT * FROM rate_limiter.blocked('login', 'mallory');
SELECT rate_limiter.block('login', 'mallory', '10 minutes');
SELECT * FROM rate_limiter.blocked('login', 'mallory');

-- guard and postgrest_limit raise, as for any refusal.
CREATE TABLE blocked_comments (author text NOT NULL);
CREATE TRIGGER guard BEFORE INSERT ON blocked_comments
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('login', 'author');
INSERT INTO blocked_comments VALUES ('alice');
INSERT INTO blocked_comments VALUES ('mallory');
\echo :LAST_ERROR_SQLSTATE
SELECT author FROM blocked_comments;
DROP TABLE blocked_comments;
DO $$
DECLARE
    state text;
    detail text;
BEGIN
    PERFORM rate_limiter.postgrest_limit('login', 'mallory');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'sqlstate: %, status: %, Retry-After: %', state, detail::jsonb -> 'status',
        detail::jsonb -> 'headers' ->> 'Retry-After';
END
$$;

-- Blocks survive rate_reset: it resets tokens, not sanctions.
SELECT rate_limiter.rate_reset('login', 'mallory');
SELECT ok, retry_after FROM rate_limiter.rate_limit('login', 'mallory');

-- On both sides of the block's end.
SET rate_limiter.now_override = '2026-01-01 00:09:59.999999+00';
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('login', 'mallory');
SET rate_limiter.now_override = '2026-01-01 00:10:00+00';
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('login', 'mallory');
SELECT count(*) FROM rate_limiter.blocked('login', 'mallory');
-- A block that starts while the key is not blocked adds a strike.
SELECT rate_limiter.block('login', 'mallory', '1 hour');
SELECT strikes, reason FROM rate_limiter.blocked('login', 'mallory');
-- unblock(): true when the key was blocked; its strikes go too.
SELECT rate_limiter.unblock('login', 'mallory');
SELECT rate_limiter.unblock('login', 'mallory');
SELECT ok FROM rate_limiter.rate_limit('login', 'mallory');

-- key NULL blocks the global limit only.
SELECT rate_limiter.define('signups', rate_limiter.token_bucket(10, '1 minute'));
SELECT rate_limiter.block('signups', NULL, '30 seconds', 'maintenance');
SELECT ok, retry_after FROM rate_limiter.rate_limit('signups');
SELECT ok, retry_after FROM rate_limiter.rate_limit('signups', 'k');
SELECT * FROM rate_limiter.blocked('signups', NULL);
SELECT rate_limiter.unblock('signups', NULL);

-- Shadow mode: the block is applied, and the call answers admitted.
SELECT rate_limiter.define('shadowed', rate_limiter.token_bucket(10, '1 minute'), enforce => false);
SELECT rate_limiter.block('shadowed', 'k', '1 minute');
SELECT * FROM rate_limiter.rate_limit('shadowed', 'k', throws => true);
SELECT * FROM rate_limiter.rate_check('shadowed', 'k');

-- Sharded limits: every shard is blocked.
SELECT rate_limiter.define('sharded', rate_limiter.token_bucket(100, '1 minute', shards => 4));
SELECT rate_limiter.block('sharded', 'k', '1 minute');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('sharded', 'k');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_check('sharded', 'k');
SELECT value FROM rate_limiter.status('sharded', 'k');
SELECT ok FROM rate_limiter.rate_limit('sharded', 'other');

-- A rollback undoes a block.
BEGIN;
SELECT rate_limiter.block('login', 'eve', '1 hour');
ROLLBACK;
SELECT count(*) FROM rate_limiter.blocks WHERE key = 'eve';

-- Bad input writes nothing.
SELECT rate_limiter.block(NULL, 'k', '1 minute');
SELECT rate_limiter.block('login', 'k', NULL);
SELECT rate_limiter.block('login', 'k', '-1 second');
SELECT rate_limiter.block('login', 'k', '1 day -25 hours');
SELECT rate_limiter.block('nope', 'k', '1 minute');
SELECT rate_limiter.unblock(NULL, 'k');
SELECT rate_limiter.unblock('nope', 'k');
SELECT * FROM rate_limiter.blocked(NULL, 'k');
SELECT * FROM rate_limiter.blocked('nope', 'k');
BEGIN READ ONLY;
SELECT rate_limiter.block('login', 'k', '1 minute');
ROLLBACK;
SELECT name, key FROM rate_limiter.blocks WHERE key = 'k' ORDER BY 1, 2;

-- prune() deletes ended blocks and says how many.
SET rate_limiter.now_override = '2026-01-02 00:00:00+00';
SELECT rate_limiter.prune() >= 3 AS pruned;
SELECT count(*) FROM rate_limiter.blocks WHERE name IN ('login', 'signups', 'shadowed', 'sharded');

-- undefine() deletes the limit's blocks.
SELECT rate_limiter.block('login', 'mallory', '1 hour');
SELECT rate_limiter.undefine('login');
SELECT count(*) FROM rate_limiter.blocks WHERE name = 'login';

-- Privileges: block and unblock are managing functions (42501 for a role
-- that may not call define, even with EXECUTE on them; nothing written);
-- blocked is for the application role.
SELECT rate_limiter.define('login', rate_limiter.fixed_window(5, '1 minute', start => '2026-01-01'));
DROP ROLE IF EXISTS rl_block_app;
CREATE ROLE rl_block_app;
GRANT USAGE ON SCHEMA rate_limiter TO rl_block_app;
GRANT EXECUTE ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config),
    rate_limiter.blocked(text, text), rate_limiter.block(text, text, interval, text),
    rate_limiter.unblock(text, text) TO rl_block_app;
SELECT rate_limiter.block('login', 'trudy', '1 hour', 'by the admin');
SET ROLE rl_block_app;
SELECT rate_limiter.block('login', 'alice', '1 hour');
SELECT rate_limiter.unblock('login', 'trudy');
SELECT until, strikes, reason FROM rate_limiter.blocked('login', 'trudy');
SELECT ok, retry_after FROM rate_limiter.rate_limit('login', 'trudy');
SELECT * FROM rate_limiter.blocks;
RESET ROLE;
SELECT key FROM rate_limiter.blocks WHERE name = 'login' ORDER BY key;
SELECT rate_limiter.undefine('login');
REVOKE ALL ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config),
    rate_limiter.blocked(text, text), rate_limiter.block(text, text, interval, text),
    rate_limiter.unblock(text, text) FROM rl_block_app;
REVOKE USAGE ON SCHEMA rate_limiter FROM rl_block_app;
DROP ROLE rl_block_app;
SELECT rate_limiter.undefine('signups'), rate_limiter.undefine('shadowed'), rate_limiter.undefine('sharded');

-- Automatic blocks (with_block): the admitted call that uses the limit up
-- starts a block of block_for * 2^strikes, at most max_block. The issue's
-- vector: fixed_window(5, '1 minute', start => T0), blocks of 5 minutes
-- up to an hour; t in seconds after T0.
SELECT rate_limiter.define('login', rate_limiter.with_block(
    rate_limiter.fixed_window(5, '1 minute', start => '2026-03-01'), '5 minutes', '1 hour'));
SELECT block_for, max_block, forget_after FROM rate_limiter.definitions WHERE name = 'login';
CREATE FUNCTION pg_temp.at(seconds float8, key text DEFAULT 'victim')
RETURNS TABLE (t float8, ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('rate_limiter.now_override',
                       (timestamptz '2026-03-01 00:00:00+00' + make_interval(secs => seconds))::text, false);
    RETURN QUERY SELECT seconds, r.ok, r.retry_after, r.remaining FROM rate_limiter.rate_limit('login', at.key) AS r;
END
$$;
-- t = 0..4 admitted, remaining 4..0; the call at t = 4 starts a 300 s block.
SELECT r.* FROM generate_series(0, 4) AS t, pg_temp.at(t) AS r;
SELECT until, strikes, reason FROM rate_limiter.blocked('login', 'victim');
-- t = 5: retry_after 299 s; t = 100: 204 s (a new window, still blocked).
SELECT * FROM pg_temp.at(5);
SELECT * FROM pg_temp.at(100);
-- t = 304: the block is over, a new window: remaining 4.
SELECT * FROM pg_temp.at(304);
-- The next use-up starts a 600 s block (the second strike).
SELECT r.* FROM generate_series(305, 308) AS t, pg_temp.at(t) AS r;
SELECT until, strikes FROM rate_limiter.blocked('login', 'victim');
SELECT ok, retry_after FROM pg_temp.at(309);
-- Strikes 3, 4, 5: 1200 s, 2400 s, then capped at an hour.
SELECT r.ok FROM generate_series(908, 912) AS t, pg_temp.at(t) AS r;
SELECT until, strikes FROM rate_limiter.blocked('login', 'victim');
SELECT r.ok FROM generate_series(2112, 2116) AS t, pg_temp.at(t) AS r;
SELECT until, strikes FROM rate_limiter.blocked('login', 'victim');
SELECT r.ok FROM generate_series(4516, 4520) AS t, pg_temp.at(t) AS r;
SELECT until, strikes FROM rate_limiter.blocked('login', 'victim');
-- The strikes are forgotten a day (forget_after) after the last block
-- ends, at 2026-03-02 02:15:20 (t = 94520): a use-up one second before
-- makes the sixth strike (an hour), one at that instant the first again
-- (300 s). (The first is rolled back, so that both use the same window.)
SELECT key, until, strikes, forget_at FROM rate_limiter.blocks WHERE name = 'login';
BEGIN;
SELECT r.ok FROM generate_series(94515, 94519) AS t, pg_temp.at(t) AS r;
SELECT until, strikes FROM rate_limiter.blocked('login', 'victim');
ROLLBACK;
SELECT r.ok FROM generate_series(94516, 94520) AS t, pg_temp.at(t) AS r;
SELECT until, strikes FROM rate_limiter.blocked('login', 'victim');

-- The block commits with the call's transaction: a rollback undoes both.
BEGIN;
SELECT r.ok FROM generate_series(0, 4) AS t, pg_temp.at(200000 + t, 'rolled back') AS r;
SELECT count(*) FROM rate_limiter.blocks WHERE key = 'rolled back';
ROLLBACK;
SELECT count(*) FROM rate_limiter.blocks WHERE key = 'rolled back';
SELECT ok, remaining FROM pg_temp.at(200005, 'rolled back');
-- Refusals write nothing: with its block lifted, the key's next call is
-- refused for want of tokens, and starts no block (the use-up did).
SELECT r.ok FROM generate_series(1, 4) AS t, pg_temp.at(200005 + t, 'rolled back') AS r;
SELECT rate_limiter.unblock('login', 'rolled back');
SELECT ok, remaining FROM pg_temp.at(200010, 'rolled back');
SELECT count(*) FROM rate_limiter.blocks WHERE key = 'rolled back';
-- rate_limit_all: the request that uses its limit up blocks its key.
SET rate_limiter.now_override = '2026-03-05 00:00:30+00';
SELECT ok, remaining FROM rate_limiter.rate_limit_all(ARRAY[ROW('login', 'all', 3, NULL),
                                                            ROW('login', 'all', 2, NULL)]::rate_limiter.request[]);
SELECT until, strikes FROM rate_limiter.blocked('login', 'all');
-- Shadow mode: the block is recorded, and calls answer admitted.
SELECT rate_limiter.define('login', rate_limiter.with_block(
    rate_limiter.fixed_window(5, '1 minute', start => '2026-03-01'), '5 minutes', '1 hour'), enforce => false);
SELECT ok, remaining FROM rate_limiter.rate_limit('login', 'shadowed', 5);
SELECT until, strikes FROM rate_limiter.blocked('login', 'shadowed');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('login', 'shadowed');
-- A key's override may give it automatic blocks; a sharded limit blocks
-- when its estimate for the whole limit leaves less than one token: a
-- call of 50 takes two of the four shards' 25 tokens, and estimates the
-- limit from those two, (0 + 0) / 2 * 4 = 0.
SELECT rate_limiter.define('api', rate_limiter.token_bucket(100, '1 minute', shards => 4));
SELECT rate_limiter.override('api', 'abuser', config => rate_limiter.with_block(
    rate_limiter.token_bucket(100, '1 minute', shards => 4), '1 minute'));
SELECT ok FROM rate_limiter.rate_limit('api', 'abuser', 50);
SELECT ok FROM rate_limiter.rate_limit('api', 'abuser', 50);
SELECT count(*) FROM rate_limiter.blocked('api', 'abuser');
SELECT ok FROM rate_limiter.rate_limit('api', 'abuser', 0);
-- Other keys have no automatic blocks.
SELECT ok FROM rate_limiter.rate_limit('api', 'customer', 50);
SELECT count(*) FROM rate_limiter.blocked('api', 'customer');
-- prune() keeps a block's row while its strikes are remembered: victim's
-- block ended at 2026-03-02 02:20:20, its strikes are forgotten a day
-- later.
SET rate_limiter.now_override = '2026-03-03 02:20:19+00';
SELECT rate_limiter.prune() >= 0;
SELECT key, strikes FROM rate_limiter.blocks WHERE name = 'login' AND key = 'victim';
SET rate_limiter.now_override = '2027-01-01 00:00:00+00';
SELECT rate_limiter.prune() >= 1;
SELECT count(*) FROM rate_limiter.blocks WHERE name IN ('login', 'api');
SELECT rate_limiter.undefine('api'), rate_limiter.undefine('login');

-- with_block's bad input.
SELECT rate_limiter.with_block(NULL, '1 minute');
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), NULL);
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '1 minute', forget_after => NULL);
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '0 seconds');
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '-1 second');
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '1 minute', '1 second');
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '1 minute', forget_after => '-1 day');
SELECT rate_limiter.with_block(rate_limiter.token_bucket(0, '1 second'), '1 minute');
SELECT rate_limiter.with_block(rate_limiter.token_bucket(1, '1 second'), '1 minute', '1 hour', '0 seconds');
SELECT rate_limiter.define('hand', ROW('token bucket', 1, '1 second', NULL, NULL, 1, NULL, NULL, '1 hour', NULL, NULL)::rate_limiter.config);
RESET rate_limiter.now_override;
