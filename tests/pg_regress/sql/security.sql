-- Security (docs/guarantees.md, "Security and roles" and "Input and
-- errors"): a role that uses limits cannot change them, and the work one
-- call can cause is bounded.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
\set VERBOSITY terse
DROP ROLE IF EXISTS rl_user;
DROP ROLE IF EXISTS rl_manager;
CREATE ROLE rl_user;
CREATE ROLE rl_manager;
GRANT USAGE ON SCHEMA rate_limiter TO rl_user, rl_manager;
GRANT EXECUTE ON FUNCTION
    rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config),
    rate_limiter.rate_check(text, text, float8, boolean, boolean, rate_limiter.config),
    rate_limiter.rate_limit_all(rate_limiter.request[], boolean, boolean),
    rate_limiter.rate_wait(text, text, float8, interval, rate_limiter.config),
    rate_limiter.rate_credit(text, text, float8, rate_limiter.config),
    rate_limiter.status(text, text, rate_limiter.config),
    rate_limiter.http_headers(text, text, boolean, interval, float8, rate_limiter.config),
    rate_limiter.token_bucket(float8, interval, float8, float8, int4)
    TO rl_user, rl_manager;
GRANT EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) TO rl_manager;
SELECT rate_limiter.define('login', rate_limiter.token_bucket(5, '1 hour', max_reserved => 0));
SELECT ok FROM rate_limiter.rate_limit('login', 'victim', 5);

-- 1. An inline config overrides a definition only for a role that may call
-- define(). Without that right every function refuses it (42501) and
-- nothing is written: the victim can be neither put into debt nor refilled.
SET ROLE rl_user;
SELECT * FROM rate_limiter.rate_limit('login', 'victim', 1e8, reserve => true,
    config => rate_limiter.token_bucket(5, '1 hour'));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('login', 'victim', 0,
    config => rate_limiter.token_bucket(1e12, '1 microsecond'));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_check('login', 'victim', config => rate_limiter.token_bucket(1e12, '1 microsecond'));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('login', 'victim', 1, rate_limiter.token_bucket(1e12, '1 microsecond'))]::rate_limiter.request[]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_wait('login', 'victim', 1, '0 seconds', rate_limiter.token_bucket(1e12, '1 microsecond'));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.rate_credit('login', 'victim', 1, rate_limiter.token_bucket(1e12, '1 microsecond'));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.status('login', 'victim', rate_limiter.token_bucket(1e12, '1 microsecond'));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.http_headers('login', 'victim', config => rate_limiter.token_bucket(1e12, '1 microsecond'));
\echo :LAST_ERROR_SQLSTATE
-- By name it works, and an inline config for an undefined name works too.
SELECT ok, remaining FROM rate_limiter.rate_limit('login', 'victim');
SELECT ok, remaining FROM rate_limiter.rate_limit('adhoc', 'k', config => rate_limiter.token_bucket(3, '1 hour'));
RESET ROLE;
SELECT value FROM rate_limiter.rate_limits WHERE name = 'login' AND key = 'victim';
-- A role that may define may also override.
SET ROLE rl_manager;
SELECT ok, remaining FROM rate_limiter.rate_check('login', 'victim', config => rate_limiter.token_bucket(50, '1 hour'));
RESET ROLE;

-- 2. Bounded work. rate_limit_all takes at most rate_limiter.max_requests
-- requests (default 1000), an inline config at most
-- rate_limiter.max_inline_shards shards (default 64): 54000 beyond, before
-- anything is written. Both are superuser settings (settings.sql: a role
-- that is not cannot SET them).
SELECT count(*) FROM rate_limiter.rate_limit_all(ARRAY(
    SELECT ROW('many', i::text, 1, rate_limiter.token_bucket(10, '1 hour'))::rate_limiter.request
    FROM generate_series(1, 1001) AS i));
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.max_requests = 3;
SELECT count(*) FROM rate_limiter.rate_limit_all(ARRAY(
    SELECT ROW('many', i::text, 1, rate_limiter.token_bucket(10, '1 hour'))::rate_limiter.request
    FROM generate_series(1, 4) AS i));
\echo :LAST_ERROR_SQLSTATE
RESET rate_limiter.max_requests;
SELECT count(*) AS rows_written FROM rate_limiter.rate_limits WHERE name = 'many';
SELECT * FROM rate_limiter.rate_limit('wide', 'k', config => rate_limiter.token_bucket(1000, '1 hour', shards => 65));
\echo :LAST_ERROR_SQLSTATE
SELECT ok FROM rate_limiter.rate_limit('wide', 'k', config => rate_limiter.token_bucket(1000, '1 hour', shards => 64));
-- A definition may have more shards (only a role that may define makes one).
SELECT rate_limiter.define('wide_defined', rate_limiter.token_bucket(1000, '1 hour', shards => 100));
SELECT ok FROM rate_limiter.rate_limit('wide_defined', 'k');

-- No placeholder rows for shards a call cannot use: rate_limit_all holds
-- the existing rows of a sharded limit and at most two missing shards per
-- request naming it (the math takes the lowest-numbered full shards). Four
-- requests with inline configs of 64 shards and one empty limit: refused.
-- By default the committed state refuses the call before it holds any row
-- (refusals never wait: docs/guarantees.md, "Concurrency and exactness"):
-- nothing inserted. With rate_limiter.lock_free_refusals off the call holds
-- its rows first: 2 placeholders per sharded limit were inserted (and
-- deleted again), 8 in all, not 256. (Counted as differences inside one
-- transaction: the counter also holds earlier transactions' inserts until
-- stats are flushed.)
BEGIN;
SELECT ok FROM rate_limiter.rate_limit('spread_empty', config => rate_limiter.token_bucket(1, '1 hour'));
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) AS inserted \gset
SELECT bool_and(ok) AS all_ok FROM rate_limiter.rate_limit_all(ARRAY(
    SELECT ROW('spread' || i, NULL, 1, rate_limiter.token_bucket(6400, '1 hour', shards => 64))::rate_limiter.request
    FROM generate_series(1, 4) AS i)
    || ROW('spread_empty', NULL, 1, rate_limiter.token_bucket(1, '1 hour'))::rate_limiter.request);
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) - :inserted AS inserted_by_the_call;
SET LOCAL rate_limiter.lock_free_refusals = off;
SELECT bool_and(ok) AS all_ok FROM rate_limiter.rate_limit_all(ARRAY(
    SELECT ROW('spread' || i, NULL, 1, rate_limiter.token_bucket(6400, '1 hour', shards => 64))::rate_limiter.request
    FROM generate_series(1, 4) AS i)
    || ROW('spread_empty', NULL, 1, rate_limiter.token_bucket(1, '1 hour'))::rate_limiter.request);
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) - :inserted AS inserted_by_the_call;
SET LOCAL rate_limiter.lock_free_refusals = on;
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) AS inserted \gset
SELECT count(*) AS rows_left FROM rate_limiter.rate_limits WHERE name LIKE 'spread_';
-- Admitted, one request for more than one shard holds: two shards written
-- (two more inserts), nothing else.
SELECT bool_and(ok) AS all_ok FROM rate_limiter.rate_limit_all(ARRAY[
    ROW('spread1', NULL, 150, rate_limiter.token_bucket(6400, '1 hour', shards => 64))]::rate_limiter.request[]);
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'spread1' ORDER BY shard;
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) - :inserted AS inserted_by_the_call;
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) AS inserted \gset
-- A limit named twice takes two more missing shards for its second request.
SELECT bool_and(ok) AS all_ok FROM rate_limiter.rate_limit_all(ARRAY[
    ROW('spread2', NULL, 200, rate_limiter.token_bucket(6400, '1 hour', shards => 64)),
    ROW('spread2', NULL, 200, rate_limiter.token_bucket(6400, '1 hour', shards => 64))]::rate_limiter.request[]);
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'spread2' ORDER BY shard;
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) - :inserted AS inserted_by_the_call;
SELECT pg_stat_get_xact_tuples_inserted('rate_limiter.rate_limits'::regclass) AS inserted \gset
ROLLBACK;

-- 3. guard() keys are canonical: values that compare equal are one key.
CREATE TABLE guarded_posts (author_id numeric, body text);
CREATE TRIGGER guard BEFORE INSERT ON guarded_posts
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('posts', 'author_id');
SELECT rate_limiter.define('posts', rate_limiter.token_bucket(2, '1 hour'));
INSERT INTO guarded_posts VALUES (42.0, 'a');
INSERT INTO guarded_posts VALUES (42.00, 'b');
INSERT INTO guarded_posts VALUES (42.000, 'c');
\echo :LAST_ERROR_SQLSTATE
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'posts';
-- A NULL key value is an error, never the global limit.
INSERT INTO guarded_posts VALUES (NULL, 'd');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS global_rows FROM rate_limiter.rate_limits WHERE name = 'posts' AND key IS NULL;
-- timestamptz keys are written in UTC, whatever the session's time zone;
-- floats: -0 is 0.
CREATE TABLE guarded_events (at timestamptz, weight float8);
CREATE TRIGGER guard_at BEFORE INSERT ON guarded_events
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('events', 'at');
CREATE TRIGGER guard_weight BEFORE INSERT ON guarded_events
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('weights', 'weight');
SELECT rate_limiter.define('events', rate_limiter.token_bucket(10, '1 hour'));
SELECT rate_limiter.define('weights', rate_limiter.token_bucket(10, '1 hour'));
SET timezone = 'Europe/Paris';
INSERT INTO guarded_events VALUES ('2026-01-01 12:00:00+00', 0);
SET timezone = 'America/New_York';
SET extra_float_digits = 0;
INSERT INTO guarded_events VALUES ('2026-01-01 12:00:00+00', '-0');
SET timezone = 'UTC';
RESET extra_float_digits;
SELECT name, key, value FROM rate_limiter.rate_limits WHERE name IN ('events', 'weights') ORDER BY name;
-- Key columns whose equal values can differ in text are refused (22023),
-- naming the fix: a nondeterministic collation, or a type such as jsonb
-- or interval ('1 day' = '24 hours').
CREATE TABLE guarded_odd (doc jsonb, span interval);
CREATE TRIGGER guard_doc BEFORE INSERT ON guarded_odd
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('posts', 'doc');
INSERT INTO guarded_odd VALUES ('{"a": 1}', '1 day');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER guard_doc ON guarded_odd;
CREATE TRIGGER guard_span BEFORE INSERT ON guarded_odd
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('posts', 'span');
INSERT INTO guarded_odd VALUES ('{"a": 1}', '1 day');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE guarded_posts, guarded_events, guarded_odd;

SELECT rate_limiter.rate_reset(name, key) FROM (SELECT DISTINCT name, key FROM rate_limiter.rate_limits
    WHERE name IN ('login', 'adhoc', 'wide', 'wide_defined', 'posts', 'events', 'weights')) AS used;
SELECT rate_limiter.undefine(name) FROM unnest(ARRAY['login', 'wide_defined', 'posts', 'events', 'weights']) AS name;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rate_limiter FROM rl_user, rl_manager;
REVOKE ALL ON SCHEMA rate_limiter FROM rl_user, rl_manager;
DROP ROLE rl_user;
DROP ROLE rl_manager;
