-- The portable edition's settings (docs/guarantees.md, "Portable edition"),
-- in place of the native settings.sql, whose SETs the native extension
-- checks when they are made. Without C code the rate_limiter.* settings are
-- placeholders, which any role can SET, so: rate_limiter.now_override and
-- rate_limiter.random_seed take effect only in a session whose login role
-- is a member of the role that owns rate_limiter's tables (in any other a
-- call with either set is 42501: refused, not ignored);
-- rate_limiter.lock_free_refusals may be turned off only there too (else
-- 42501); rate_limiter.max_requests and rate_limiter.max_inline_shards
-- count from such a session, else from the database's own settings (ALTER
-- DATABASE ... SET, which only its owner or a superuser may run), never
-- from the session; and rate_limiter.sqlstate is checked when a refusal
-- raises it (22023 for a value the native extension refuses when it is
-- SET).
SET timezone = 'UTC';
SET datestyle = 'ISO';
SELECT current_database() AS database \gset
DROP ROLE IF EXISTS rl_portable_app;
CREATE ROLE rl_portable_app LOGIN;
GRANT USAGE ON SCHEMA rate_limiter TO rl_portable_app;
GRANT EXECUTE ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config),
                          rate_limiter.rate_limit_all(rate_limiter.request[], boolean, boolean),
                          rate_limiter.token_bucket(float8, interval, float8, float8, int4)
    TO rl_portable_app;
SELECT rate_limiter.define('settings', rate_limiter.token_bucket(10, '1 minute'));
SELECT rate_limiter.define('settings_sharded', rate_limiter.token_bucket(100, '1 minute', shards => 4));

-- The owner (here a superuser) moves the clock and seeds the shards.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('settings');
SELECT ts FROM rate_limiter.rate_limits WHERE name = 'settings';
SET rate_limiter.random_seed = 42;
SELECT ok, remaining FROM rate_limiter.rate_limit('settings_sharded');
SELECT ok, remaining FROM rate_limiter.rate_limit('settings_sharded');
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'settings_sharded' ORDER BY shard;
-- Setting the seed again starts its sequence again.
SET rate_limiter.random_seed = 42;
SELECT ok FROM rate_limiter.rate_limit('settings_sharded');
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'settings_sharded' ORDER BY shard;
-- The seeded generator is SplitMix64, as the native extension's: from
-- state 0, the reference implementation's first two numbers.
SELECT to_hex(first.number) AS first, to_hex(second.number) AS second
FROM rate_limiter._splitmix64(0) AS first, rate_limiter._splitmix64(first.next_state) AS second;
-- A value that is not a timestamp, or not an integer seed, is 22023.
SET rate_limiter.now_override = 'soon';
SELECT ok FROM rate_limiter.rate_limit('settings');
\echo :LAST_ERROR_SQLSTATE
RESET rate_limiter.now_override;
SET rate_limiter.random_seed = 'lucky';
SELECT ok FROM rate_limiter.rate_limit('settings_sharded');
\echo :LAST_ERROR_SQLSTATE
RESET rate_limiter.random_seed;
-- rate_limiter.lock_free_refusals (refusals never wait: docs/guarantees.md,
-- "Concurrency and exactness"): the owner may turn it off; a value that is
-- not a boolean is 22023.
SET rate_limiter.lock_free_refusals = off;
SELECT ok FROM rate_limiter.rate_limit('settings');
SET rate_limiter.lock_free_refusals = 'sometimes';
SELECT ok FROM rate_limiter.rate_limit('settings');
\echo :LAST_ERROR_SQLSTATE
RESET rate_limiter.lock_free_refusals;

-- A session of an application role may SET them (they are placeholders);
-- its calls refuse them.
\c - rl_portable_app
SET rate_limiter.now_override = '2000-01-01 00:00:00+00';
SELECT ok FROM rate_limiter.rate_limit('settings');
\echo :LAST_ERROR_SQLSTATE
RESET rate_limiter.now_override;
SET rate_limiter.random_seed = 1;
SELECT ok FROM rate_limiter.rate_limit('settings_sharded');
\echo :LAST_ERROR_SQLSTATE
-- (An unsharded limit draws nothing: the seed does not matter to it.)
SELECT ok FROM rate_limiter.rate_limit('settings');
RESET rate_limiter.random_seed;
SELECT ok FROM rate_limiter.rate_limit('settings_sharded');
-- Turning lock-free refusals off is the owner's (a superuser setting in
-- the native extension): 42501, as for the clock; on is the default.
SET rate_limiter.lock_free_refusals = off;
SELECT ok FROM rate_limiter.rate_limit('settings');
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.lock_free_refusals = on;
SELECT ok FROM rate_limiter.rate_limit('settings');
RESET rate_limiter.lock_free_refusals;

-- Bounds: what the session says is never read.
SET rate_limiter.max_inline_shards = 1000;
SELECT ok FROM rate_limiter.rate_limit('inline', config => rate_limiter.token_bucket(1000, '1 minute', shards => 65));
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.max_requests = 100000;
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('settings', 'k' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 1001) AS i));
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('settings', 'k' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 1000) AS i));
RESET rate_limiter.max_requests;
RESET rate_limiter.max_inline_shards;
\c - postgres
-- The database's settings, which only its owner may change, are.
ALTER DATABASE :"database" SET rate_limiter.max_requests = 2;
ALTER DATABASE :"database" SET rate_limiter.max_inline_shards = 2;
\c - rl_portable_app
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('settings', 'k' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 3) AS i));
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('settings', 'k' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 2) AS i));
SELECT ok FROM rate_limiter.rate_limit('inline', config => rate_limiter.token_bucket(1000, '1 minute', shards => 3));
\echo :LAST_ERROR_SQLSTATE
\c - postgres
ALTER DATABASE :"database" RESET rate_limiter.max_requests;
ALTER DATABASE :"database" RESET rate_limiter.max_inline_shards;

-- rate_limiter.sqlstate: any role's choice, as on the native extension;
-- checked when a refusal raises it. (The clock of this superuser's
-- session holds after SET ROLE.)
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET ROLE rl_portable_app;
SELECT ok FROM rate_limiter.rate_limit('sqlstate', config => rate_limiter.token_bucket(1, '1 hour'));
SET rate_limiter.sqlstate = 'PT429';
SELECT ok FROM rate_limiter.rate_limit('sqlstate', throws => true, config => rate_limiter.token_bucket(1, '1 hour'));
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.sqlstate = '40001';
SELECT ok FROM rate_limiter.rate_limit('sqlstate', throws => true, config => rate_limiter.token_bucket(1, '1 hour'));
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.sqlstate = 'rl429';
SELECT ok FROM rate_limiter.rate_limit('sqlstate', throws => true, config => rate_limiter.token_bucket(1, '1 hour'));
\echo :LAST_ERROR_SQLSTATE
-- (Only a refusal raises it: an admitted call never looks.)
SELECT ok FROM rate_limiter.rate_limit('sqlstate_other', throws => true, config => rate_limiter.token_bucket(1, '1 hour'));
RESET rate_limiter.sqlstate;
RESET ROLE;
RESET rate_limiter.now_override;

-- A superuser's session moves the clock and raises the bounds, also
-- after SET ROLE (a SET ROLE is no boundary for the session that made it),
-- as a superuser's SET does in the native extension.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET rate_limiter.max_requests = 2000;
SET ROLE rl_portable_app;
SELECT ok, remaining FROM rate_limiter.rate_limit('settings_clock', config => rate_limiter.token_bucket(10, '1 minute'));
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('settings', 'm' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 1500) AS i));
RESET ROLE;
SELECT ts AT TIME ZONE 'UTC' AS ts_utc FROM rate_limiter.rate_limits WHERE name = 'settings_clock';
RESET rate_limiter.now_override;
RESET rate_limiter.max_requests;

DROP OWNED BY rl_portable_app;
DROP ROLE rl_portable_app;
