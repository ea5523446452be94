-- How rate_limit writes rate_limiter.rate_limits: directly on the heap and
-- the indexes (src/storage/consume.rs), as INSERT ... ON CONFLICT DO UPDATE would.
SET timezone = 'UTC';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('store', rate_limiter.token_bucket(1000, '1 hour'));

-- The row is as compact as a hand-written (name, key, value, ts) table's:
-- shard is a smallint, name and key compare bytewise, default fillfactor
-- for the table, full index pages.
SELECT attname, atttypid::regtype, attcollation::regcollation
FROM pg_attribute WHERE attrelid = 'rate_limiter.rate_limits'::regclass AND attnum > 0
ORDER BY attnum;
SELECT relname, reloptions FROM pg_class
WHERE oid IN ('rate_limiter.rate_limits'::regclass, 'rate_limiter.rate_limits_name_key_shard_key'::regclass)
ORDER BY relname;

-- Updating every row of a full page many times in ONE transaction leaves no
-- room for HOT updates, so new versions go to other pages and get new
-- index entries. The counts and the values stay right, and the index and
-- the heap agree.
BEGIN;
SELECT count(*) FILTER (WHERE r.ok) AS admitted
FROM generate_series(1, 20) AS round, generate_series(1, 300) AS g,
     LATERAL rate_limiter.rate_limit('store', (g + 0 * round)::text) AS r;
SELECT n_tup_ins AS inserted, n_tup_upd AS updated, n_tup_upd > n_tup_hot_upd AS some_not_hot
FROM pg_stat_xact_user_tables WHERE relid = 'rate_limiter.rate_limits'::regclass;
COMMIT;
SELECT count(*) AS rows, min(value), max(value) FROM rate_limiter.rate_limits WHERE name = 'store';
SET enable_seqscan = off;
SELECT count(*) AS rows_by_index FROM rate_limiter.rate_limits WHERE name = 'store' AND key >= '';
RESET enable_seqscan;
SELECT remaining FROM rate_limiter.rate_check('store', '150', 0);

-- An index a user adds on plain columns is maintained too.
CREATE INDEX rate_limits_ts ON rate_limiter.rate_limits (ts);
SET rate_limiter.now_override = '2026-01-01 00:00:01+00';
SELECT ok FROM rate_limiter.rate_limit('store', 'indexed');
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT key FROM rate_limiter.rate_limits WHERE ts = '2026-01-01 00:00:01+00' AND name = 'store';
SELECT key FROM rate_limiter.rate_limits WHERE ts = '2026-01-01 00:00:01+00' AND name = 'store';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX rate_limiter.rate_limits_ts;

-- Indexes and columns the direct writes cannot maintain make rate_limit
-- fail closed (55000) instead of writing a row the index would miss.
-- rate_check only reads and keeps working.
\set VERBOSITY default
BEGIN;
CREATE INDEX rate_limits_lower ON rate_limiter.rate_limits (lower(key));
SELECT ok FROM rate_limiter.rate_limit('store', 'x');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
ALTER TABLE rate_limiter.rate_limits ADD COLUMN note text;
SELECT ok FROM rate_limiter.rate_check('store', 'x');
SELECT ok FROM rate_limiter.rate_limit('store', 'x');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
\set VERBOSITY terse
SELECT ok FROM rate_limiter.rate_limit('store', 'x');

SELECT rate_limiter.undefine('store');
