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
RESET rate_limiter.now_override;
