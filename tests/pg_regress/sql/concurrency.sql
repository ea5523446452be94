-- Concurrency limits (docs/concurrency.md): at most max operations in
-- flight per key. A transaction lease holds a slot until its transaction
-- ends; a timed lease until release(), or until it expires. (Both
-- editions run this file; the concurrency functions are PL/pgSQL in both,
-- so their error CONTEXT is not shown.)
\set SHOW_CONTEXT never
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

-- The config: kind 'concurrency', rate = max, period = the default lease.
SELECT rate_limiter.concurrency(3);
SELECT rate_limiter.concurrency(3, '10 minutes');
SELECT rate_limiter.define('exports', rate_limiter.concurrency(2));
SELECT name, kind, rate, period, shards, enforce FROM rate_limiter.definitions WHERE name = 'exports';

-- Transaction leases: two slots, the third call is refused at once, with
-- in_flight = max and no retry_after (only transaction leases hold).
BEGIN;
SELECT * FROM rate_limiter.acquire('exports', 'acme');
SELECT * FROM rate_limiter.acquire('exports', 'acme');
SELECT * FROM rate_limiter.acquire('exports', 'acme');
-- Another key has its own slots.
SELECT ok FROM rate_limiter.acquire('exports', 'globex');
-- A savepoint rolled back gives its slot back.
SAVEPOINT s;
SELECT ok FROM rate_limiter.acquire('exports', 'globex');
SELECT ok FROM rate_limiter.acquire('exports', 'globex');
ROLLBACK TO SAVEPOINT s;
SELECT ok FROM rate_limiter.acquire('exports', 'globex');
-- throws => true raises RL429 with in_flight and max in the DETAIL.
SELECT * FROM rate_limiter.acquire('exports', 'acme', throws => true);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- The transaction ended: its slots are free, nothing to release, and no
-- slot row was left (its inserts rolled back).
BEGIN;
SELECT ok FROM rate_limiter.acquire('exports', 'acme');
COMMIT;
SELECT name, key, shard, value FROM rate_limiter.rate_limits WHERE name = 'exports' ORDER BY key, shard;
-- Once a slot row exists, taking it writes nothing (a row lock only).
BEGIN;
SELECT ok FROM rate_limiter.acquire('exports', 'acme');
SELECT ok FROM rate_limiter.acquire('exports', 'acme');
SELECT name, key, shard, value, ts FROM rate_limiter.rate_limits WHERE name = 'exports' ORDER BY key, shard;
COMMIT;
-- The global limit (key NULL) is one more key.
SELECT ok FROM rate_limiter.acquire('exports');
-- A committed timed lease keeps its slot's row from a transaction lease
-- until it ends (the native common case reads existing slot rows
-- directly: a row whose lease has not ended is busy).
SELECT rate_limiter.define('one_slot', rate_limiter.concurrency(1));
SELECT ok FROM rate_limiter.acquire('one_slot', 'k');
SELECT ok, lease_id > 0 AS has_id FROM rate_limiter.acquire('one_slot', 'k', lease => '1 minute');
SELECT ok, in_flight FROM rate_limiter.acquire('one_slot', 'k');
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT ok, in_flight FROM rate_limiter.acquire('one_slot', 'k');
-- A limit redefined with fewer slots keeps the rows of the others, which
-- no lease takes: one slot, held by a timed lease, is full.
SELECT rate_limiter.define('one_slot', rate_limiter.concurrency(3));
SELECT count(*) FROM generate_series(1, 3) AS g, LATERAL rate_limiter.acquire('one_slot', 'k', wait => g * interval '0') AS a WHERE a.ok;
SELECT ok, lease_id > 0 AS has_id FROM rate_limiter.acquire('one_slot', 'k', lease => '1 minute');
SELECT rate_limiter.define('one_slot', rate_limiter.concurrency(1));
SELECT ok, in_flight FROM rate_limiter.acquire('one_slot', 'k');
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.undefine('one_slot');

-- Timed leases: held past the transaction until released or expired.
SELECT rate_limiter.define('workers', rate_limiter.concurrency(2, '10 minutes'));
CREATE TEMP TABLE held AS SELECT 1 AS n, lease_id FROM rate_limiter.acquire('workers', 'pool');
INSERT INTO held SELECT 2, lease_id FROM rate_limiter.acquire('workers', 'pool', lease => '1 minute');
SELECT n, lease_id > 0 AS has_id FROM held ORDER BY n;
-- Full: retry_after is when the first lease (the one-minute one) ends.
SELECT * FROM rate_limiter.acquire('workers', 'pool');
-- The slot rows say until when a timed lease holds them (value 1).
SELECT key, shard, value, ts FROM rate_limiter.rate_limits WHERE name = 'workers' ORDER BY shard;
-- release frees the slot at once; a second release, or an unknown lease,
-- is false and changes nothing.
SELECT rate_limiter.release('workers', (SELECT lease_id FROM held WHERE n = 1));
SELECT rate_limiter.release('workers', (SELECT lease_id FROM held WHERE n = 1));
SELECT rate_limiter.release('workers', 42);
-- Another limit's lease is not this limit's.
SELECT rate_limiter.release('exports', (SELECT lease_id FROM held WHERE n = 2));
UPDATE held SET lease_id = (SELECT lease_id FROM rate_limiter.acquire('workers', 'pool')) WHERE n = 1;
-- renew extends a lease that still holds its slot (to now + lease, or by
-- the lease it was taken with).
SET rate_limiter.now_override = '2026-01-01 00:00:50+00';
SELECT rate_limiter.renew('workers', (SELECT lease_id FROM held WHERE n = 2));
SELECT rate_limiter.renew('workers', (SELECT lease_id FROM held WHERE n = 1), '30 minutes');
SELECT shard, value, ts FROM rate_limiter.rate_limits WHERE name = 'workers' ORDER BY shard;
SELECT * FROM rate_limiter.acquire('workers', 'pool');
-- A lease that expired frees its slot by itself; renew and release of it
-- are false.
SET rate_limiter.now_override = '2026-01-01 00:02:00+00';
SELECT rate_limiter.renew('workers', (SELECT lease_id FROM held WHERE n = 2));
SELECT rate_limiter.release('workers', (SELECT lease_id FROM held WHERE n = 2));
SELECT ok, lease_id > 0 AS has_id FROM rate_limiter.acquire('workers', 'pool');
SELECT * FROM rate_limiter.acquire('workers', 'pool');
SELECT count(*) AS leases FROM rate_limiter.leases WHERE name = 'workers';

-- Transaction and timed leases share the slots (an inline config).
BEGIN;
SELECT ok FROM rate_limiter.acquire('mixed', config => rate_limiter.concurrency(2));
SELECT ok, lease_id > 0 AS has_id FROM rate_limiter.acquire('mixed', lease => '5 minutes', config => rate_limiter.concurrency(2));
SELECT * FROM rate_limiter.acquire('mixed', config => rate_limiter.concurrency(2));
COMMIT;
SELECT * FROM rate_limiter.acquire('mixed', config => rate_limiter.concurrency(2));

-- status() without taking a lock: value = the free slots, capacity =
-- max, full_at = when every slot is free if nothing more is taken (now
-- when none is held; NULL while a transaction lease holds one: its end is
-- not known; else the last timed lease's end).
SELECT * FROM rate_limiter.status('exports', 'acme');
BEGIN;
SELECT ok FROM rate_limiter.acquire('exports', 'acme');
SELECT * FROM rate_limiter.status('exports', 'acme');
SELECT ok FROM rate_limiter.acquire('exports', 'newkey');
SELECT * FROM rate_limiter.status('exports', 'newkey');
COMMIT;
SELECT * FROM rate_limiter.status('workers', 'pool');
SELECT * FROM rate_limiter.status('unnamed', config => rate_limiter.concurrency(4));
SELECT * FROM rate_limiter.status('exports', config => rate_limiter.concurrency(4));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.http_headers('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE

-- Shadow mode: a refusal is answered as admitted and holds nothing.
SELECT rate_limiter.define('exports', rate_limiter.concurrency(1), enforce => false);
BEGIN;
SELECT * FROM rate_limiter.acquire('exports', 'acme');
SELECT * FROM rate_limiter.acquire('exports', 'acme');
COMMIT;
-- Redefining a concurrency limit keeps its slots (and leases in them).
SELECT rate_limiter.define('exports', rate_limiter.concurrency(2));
SELECT count(*) AS slot_rows FROM rate_limiter.rate_limits WHERE name = 'exports';

-- wait => ... waits for a slot, holding nothing; refused when none frees.
-- (A transaction's second acquire needs a second slot: it does not count
-- its own lock as a free slot.)
BEGIN;
SELECT ok FROM rate_limiter.acquire('one', config => rate_limiter.concurrency(1));
SELECT * FROM rate_limiter.acquire('one', wait => '10 milliseconds', config => rate_limiter.concurrency(1));
COMMIT;

-- guard_slot(): the writing transaction holds a slot per key, however
-- many rows it writes.
SELECT rate_limiter.define('report_jobs', rate_limiter.concurrency(1));
CREATE TABLE report_runs (tenant text, started timestamptz DEFAULT '2026-01-01');
CREATE TRIGGER one_report_per_tenant BEFORE INSERT ON report_runs
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard_slot('report_jobs', 'tenant');
BEGIN;
INSERT INTO report_runs (tenant) VALUES ('acme'), ('acme');
INSERT INTO report_runs (tenant) VALUES ('globex');
-- The slot of acme is this transaction's: another call finds none free.
SELECT ok, in_flight FROM rate_limiter.acquire('report_jobs', 'acme');
COMMIT;
SELECT ok FROM rate_limiter.acquire('report_jobs', 'acme');
INSERT INTO report_runs (tenant) VALUES (NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('report_jobs', rate_limiter.concurrency(1, '1 minute'));
INSERT INTO report_runs (tenant) VALUES ('acme');
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER one_report_per_tenant ON report_runs;
CREATE TRIGGER after_insert AFTER INSERT ON report_runs
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard_slot('report_jobs');
INSERT INTO report_runs (tenant) VALUES ('acme');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE report_runs;
SELECT rate_limiter.undefine('report_jobs');

-- A concurrency limit takes no tokens: 22023 from the rate-limit calls.
SELECT * FROM rate_limiter.rate_limit('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_check('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW('exports', 'acme', 1, NULL)]::rate_limiter.request[]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('unnamed', config => rate_limiter.concurrency(1));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_wait('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.rate_credit('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.postgrest_limit('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
-- rate_reset would free slots that timed leases hold.
SELECT rate_limiter.rate_reset('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
-- Overrides and blocks are a rate limit's.
SELECT rate_limiter.override('exports', 'acme', config => rate_limiter.concurrency(5));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.block('exports', 'acme', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.blocked('exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('per_minute', rate_limiter.token_bucket(10, '1 minute'));
SELECT rate_limiter.override('per_minute', 'acme', config => rate_limiter.concurrency(5));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('per_minute', 'acme', plan => 'exports');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.undefine('per_minute');
-- A composite is made of rate limits.
SELECT rate_limiter.define('per_second', rate_limiter.token_bucket(10, '1 second'));
SELECT rate_limiter.define_all('both', ARRAY['per_second', 'exports']);
\echo :LAST_ERROR_SQLSTATE
-- acquire of a rate limit, or with a rate limit's config.
SELECT * FROM rate_limiter.acquire('per_second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('unnamed', config => rate_limiter.token_bucket(1, '1 second'));
\echo :LAST_ERROR_SQLSTATE
-- A rate limit redefined as a concurrency limit loses its token state.
SELECT ok FROM rate_limiter.rate_limit('per_second', 'k');
SELECT rate_limiter.define('per_second', rate_limiter.concurrency(1));
SELECT count(*) AS rows FROM rate_limiter.rate_limits WHERE name = 'per_second';

-- Bad input.
SELECT rate_limiter.concurrency(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.concurrency(0);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.concurrency(32768);
\echo :LAST_ERROR_SQLSTATE
SELECT (rate_limiter.concurrency(32767)).rate AS largest;
SELECT rate_limiter.concurrency(1, '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('odd', ROW('concurrency', 2.5, NULL, NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('odd', ROW('concurrency', 2, NULL, 5, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('exports', wait => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('exports', throws => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('exports', wait => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('exports', lease => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('undefined_limit');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.acquire('exports', config => rate_limiter.concurrency(5));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.release(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.release('workers', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.renew('workers', 1, '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define(NULL, rate_limiter.concurrency(1));
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('exports', rate_limiter.concurrency(1), enforce => NULL);
\echo :LAST_ERROR_SQLSTATE
-- prune() deletes the slot rows that carry nothing: not a timed lease's
-- that has not ended, nor a row a transaction lease holds (locked); and
-- the leases that have ended.
SELECT name, key, shard, value, ts FROM rate_limiter.rate_limits WHERE name = 'workers' ORDER BY key, shard;
SELECT count(*) AS leases FROM rate_limiter.leases WHERE name = 'workers';
SET rate_limiter.now_override = '2026-01-01 00:20:00+00';
SELECT rate_limiter.prune();
SELECT name, key, shard, value, ts FROM rate_limiter.rate_limits WHERE name IN ('workers', 'exports', 'mixed') ORDER BY name, key, shard;
SELECT count(*) AS leases FROM rate_limiter.leases WHERE name = 'workers';
-- Nothing above changed the definitions.
SELECT name, kind, rate, period, enforce FROM rate_limiter.definitions WHERE kind::text = 'concurrency' ORDER BY name;
SELECT rate_limiter.undefine('exports');
SELECT rate_limiter.undefine('workers');
SELECT rate_limiter.undefine('per_second');
RESET rate_limiter.now_override;
