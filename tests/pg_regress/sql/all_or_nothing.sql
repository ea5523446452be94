-- rate_limit_all(): several limits at once, all or nothing. A request
-- that the user's limit and the organisation's limit must both allow.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

SELECT rate_limiter.define('all_user', rate_limiter.token_bucket(10, '1 minute'));
SELECT rate_limiter.define('all_org', rate_limiter.token_bucket(15, '1 minute'));

-- Both can: both are consumed; one row per request, in the order given.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_user', 'alice', 4, NULL),
    ('all_org', 'acme', 4, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_org', 'acme', 4, NULL),
    ('all_user', 'alice', 4, NULL)]::rate_limiter.request[]);
SELECT name, key, value FROM rate_limiter.rate_limits WHERE name LIKE 'all\_%' ORDER BY name, key;

-- One is short (alice has 2 left): each row is that request's own answer,
-- and nothing is consumed, the organisation's tokens included.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_user', 'alice', 4, NULL),
    ('all_org', 'acme', 4, NULL)]::rate_limiter.request[]);
SELECT name, key, value FROM rate_limiter.rate_limits WHERE name LIKE 'all\_%' ORDER BY name, key;
-- A missing row stays missing when the call is refused.
SELECT ok FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_user', 'bob', 1, NULL),
    ('all_user', 'alice', 4, NULL)]::rate_limiter.request[]);
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'all_user' AND key = 'bob';

-- throws => true raises the rate-limit error for the first refused request.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_org', 'acme', 1, NULL),
    ('all_user', 'alice', 4, NULL)]::rate_limiter.request[], throws => true);

-- A limit named twice is charged twice; NULL count means 1, NULL config
-- the definition; inline configs and the global limit (key NULL) work.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_org', 'acme', NULL, NULL),
    ('all_org', 'acme', 2, NULL),
    ('all_inline', NULL, 1, rate_limiter.fixed_window(3, '1 hour')::rate_limiter.config)]::rate_limiter.request[]);
SELECT name, key, value FROM rate_limiter.rate_limits WHERE name LIKE 'all\_%' ORDER BY name, key;

-- reserve => true applies to every request.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_user', 'alice', 5, NULL)]::rate_limiter.request[], reserve => true);

-- A sharded member: consumed from its two fullest shards, answered for the whole limit.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_sharded', 'k', 3, rate_limiter.token_bucket(40, '1 minute', shards => 4)),
    ('all_org', 'acme', 1, NULL)]::rate_limiter.request[]);
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'all_sharded' ORDER BY shard;

-- Rolled back with the transaction.
BEGIN;
SELECT ok FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 1, NULL)]::rate_limiter.request[]);
ROLLBACK;
SELECT value FROM rate_limiter.rate_limits WHERE name = 'all_org';

-- Many limits in one call: 5,000 keys, each named twice (the second
-- request of each key sees the first's consumption), then one more that
-- is short: nothing is consumed, and no row is created. (Beyond the
-- default rate_limiter.max_requests of 1,000: a superuser raises it.)
SET rate_limiter.max_requests = 10000;
SELECT count(*), count(*) FILTER (WHERE ok), min(remaining), max(remaining)
FROM rate_limiter.rate_limit_all(ARRAY(
    SELECT ROW('all_many', (i % 5000)::text, 1, rate_limiter.token_bucket(2, '1 hour'))::rate_limiter.request
    FROM generate_series(0, 9999) AS i));
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'all_many';
SELECT count(*), count(*) FILTER (WHERE ok)
FROM rate_limiter.rate_limit_all(ARRAY(
    SELECT ROW('all_more', i::text, 1, rate_limiter.token_bucket(2, '1 hour'))::rate_limiter.request
    FROM generate_series(0, 4999) AS i)
    || ROW('all_many', '0', 1, rate_limiter.token_bucket(2, '1 hour'))::rate_limiter.request);
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'all_more';
RESET rate_limiter.max_requests;

-- Under REPEATABLE READ and SERIALIZABLE too, a refusal that held missing
-- rows answers (no 40001) and leaves them missing (here all_rr_short is
-- named twice: 1 + 2 tokens of 2); an admitted call on a new sharded
-- limit keeps only the shard it consumed from.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT name, ok FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_rr_new', 'k', 1, rate_limiter.token_bucket(1, '1 hour')),
    ('all_rr_short', 'k', 1, rate_limiter.token_bucket(1, '1 hour', capacity => 2)),
    ('all_rr_short', 'k', 2, rate_limiter.token_bucket(1, '1 hour', capacity => 2))]::rate_limiter.request[]);
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT name, ok FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_rr_new', 'k', 1, rate_limiter.token_bucket(1, '1 hour')),
    ('all_rr_short', 'k', 1, rate_limiter.token_bucket(1, '1 hour', capacity => 2)),
    ('all_rr_short', 'k', 2, rate_limiter.token_bucket(1, '1 hour', capacity => 2))]::rate_limiter.request[]);
SELECT name, ok, remaining FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_rr_sharded', 'k', 1, rate_limiter.token_bucket(1, '1 hour', capacity => 4, shards => 4))]::rate_limiter.request[]);
COMMIT;
SELECT name, shard, value FROM rate_limiter.rate_limits WHERE name LIKE 'all\_rr\_%' ORDER BY name, shard;

-- An empty array: no rows, nothing consumed.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[]::rate_limiter.request[]);

-- Errors come first and write nothing.
SELECT * FROM rate_limiter.rate_limit_all(NULL);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[NULL]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 1, NULL), (NULL, 'k', 1, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 1, NULL)]::rate_limiter.request[], reserve => NULL);
-- (a NULL anywhere is reported before any name is looked up)
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_nope', 'k', 1, NULL), (NULL, 'k', 1, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 1, NULL), ('all_nope', 'k', 1, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 1, NULL), ('all_user', 'alice', -1, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 100, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('all_org', 'acme', 1, NULL),
    ('all_org', 'acme', 1, rate_limiter.token_bucket(1, '1 second'))]::rate_limiter.request[]);
BEGIN READ ONLY;
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('all_org', 'acme', 1, NULL)]::rate_limiter.request[]);
ROLLBACK;
SELECT value FROM rate_limiter.rate_limits WHERE name = 'all_org';

SELECT rate_limiter.undefine('all_user'), rate_limiter.undefine('all_org');
DELETE FROM rate_limiter.rate_limits WHERE name LIKE 'all\_%';
