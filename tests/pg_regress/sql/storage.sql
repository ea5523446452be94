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

-- A BRIN index (a summarizing one) is maintained too. From PostgreSQL 16
-- an update that changes only summarized columns is still HOT, and only
-- the summarizing indexes get the new value (TU_Summarizing); before 16
-- such an update is not HOT and every index gets an entry. Either way the
-- summary built at CREATE INDEX (ts up to 00:00:02) learns the new ts,
-- or the bitmap scan below would skip the row's block range.
SET rate_limiter.now_override = '2026-01-01 00:00:02+00';
SELECT ok FROM rate_limiter.rate_limit('store', 'brin');
CREATE INDEX rate_limits_ts_brin ON rate_limiter.rate_limits USING brin (ts);
SET rate_limiter.now_override = '2026-01-01 00:00:03+00';
BEGIN;
SELECT n_tup_upd AS updated_before, n_tup_hot_upd AS hot_before
FROM pg_stat_xact_user_tables WHERE relid = 'rate_limiter.rate_limits'::regclass \gset
SELECT ok FROM rate_limiter.rate_limit('store', 'brin');
SELECT n_tup_upd - :updated_before AS updated,
       (n_tup_hot_upd - :hot_before = 1) = (current_setting('server_version_num')::int >= 160000) AS hot_from_16
FROM pg_stat_xact_user_tables WHERE relid = 'rate_limiter.rate_limits'::regclass;
COMMIT;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT key FROM rate_limiter.rate_limits WHERE ts = '2026-01-01 00:00:03+00';
SELECT key FROM rate_limiter.rate_limits WHERE ts = '2026-01-01 00:00:03+00';
RESET enable_seqscan;
DROP INDEX rate_limiter.rate_limits_ts_brin;

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

-- Everything else a write through the executor would do and the direct
-- write would not makes rate_limit fail closed with 55000, naming the
-- cause, and write nothing: triggers (foreign keys are triggers too),
-- rules, CHECK constraints, NOT NULL on key or regime, row-level security, unique or
-- exclusion indexes on other columns, a unique (name, key, shard) index
-- whose equality is not bytewise (a nondeterministic collation would make
-- every new row's speculative insert withdraw and the call spin; another
-- operator class), a table access method other than heap (the writes are
-- heap page writes), and being a partition (its partition constraint would
-- go unchecked). (storage_1.out is the same for a server built without
-- ICU, such as the PyPI builds of 16-18: there the nondeterministic
-- collation cannot be created, and the text_pattern_ops index covers the
-- case.)
CREATE TABLE store_audit (name text, key text);
CREATE FUNCTION store_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO store_audit VALUES (NEW.name, NEW.key); RETURN NEW; END $$;
CREATE TABLE store_names (name text PRIMARY KEY);
-- Each alteration is made, the call tried, and everything rolled back.
CREATE FUNCTION pg_temp.fails_closed(alteration text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    state text;
    message text;
BEGIN
    BEGIN
        EXECUTE alteration;
        PERFORM * FROM rate_limiter.rate_limit('store', 'fail closed');
        RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'ADMITTED';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
    END;
    RETURN state || ' ' || message;
END $$;
SELECT alteration, pg_temp.fails_closed(alteration) AS outcome FROM (VALUES
    ('CREATE TRIGGER audit BEFORE INSERT OR UPDATE ON rate_limiter.rate_limits FOR EACH ROW EXECUTE FUNCTION store_audit()'),
    ('CREATE TRIGGER audit AFTER UPDATE ON rate_limiter.rate_limits FOR EACH STATEMENT EXECUTE FUNCTION store_audit()'),
    ('ALTER TABLE rate_limiter.rate_limits ADD FOREIGN KEY (name) REFERENCES store_names NOT VALID'),
    ('CREATE RULE audit AS ON INSERT TO rate_limiter.rate_limits DO ALSO INSERT INTO store_audit VALUES (NEW.name, NEW.key)'),
    ('ALTER TABLE rate_limiter.rate_limits ADD CHECK (value <= 100) NOT VALID'),
    ('DELETE FROM rate_limiter.rate_limits WHERE key IS NULL; ALTER TABLE rate_limiter.rate_limits ALTER COLUMN key SET NOT NULL'),
    ('UPDATE rate_limiter.rate_limits SET regime = 0; ALTER TABLE rate_limiter.rate_limits ALTER COLUMN regime SET NOT NULL'),
    ('ALTER TABLE rate_limiter.rate_limits ENABLE ROW LEVEL SECURITY'),
    ('CREATE UNIQUE INDEX ON rate_limiter.rate_limits (name, key, shard, ts) NULLS NOT DISTINCT'),
    ('CREATE UNIQUE INDEX ON rate_limiter.rate_limits (name, key, shard)'),
    ('ALTER TABLE rate_limiter.rate_limits ADD EXCLUDE USING btree (name WITH =, key WITH =, shard WITH =)'),
    ('CREATE COLLATION store_nondeterministic (provider = icu, locale = ''und-u-ks-level2'', deterministic = false); '
     'CREATE UNIQUE INDEX ON rate_limiter.rate_limits (name, key COLLATE store_nondeterministic, shard) NULLS NOT DISTINCT'),
    ('CREATE UNIQUE INDEX ON rate_limiter.rate_limits (name, key text_pattern_ops, shard) NULLS NOT DISTINCT'),
    ('CREATE ACCESS METHOD store_heap_copy TYPE TABLE HANDLER heap_tableam_handler; '
     'ALTER TABLE rate_limiter.rate_limits SET ACCESS METHOD store_heap_copy'),
    ('CREATE TABLE store_parent (LIKE rate_limiter.rate_limits) PARTITION BY LIST (name); '
     'ALTER TABLE store_parent ATTACH PARTITION rate_limiter.rate_limits DEFAULT')
) AS a(alteration);
SELECT count(*) AS audited FROM store_audit;

-- A second unique NULLS NOT DISTINCT (name, key, shard) index (one a user
-- adds, or the copy REINDEX CONCURRENTLY builds) is maintained and
-- arbitrates like the first: racing new keys are never a unique violation
-- (concurrency.rs races them with it in place).
CREATE UNIQUE INDEX rate_limits_second ON rate_limiter.rate_limits (name, key, shard) NULLS NOT DISTINCT;
SELECT ok FROM rate_limiter.rate_limit('store', 'second index');
SELECT ok FROM rate_limiter.rate_limit('store', 'second index');
-- amcheck: every heap tuple has its entry in both indexes (an error would
-- name the missing one).
CREATE EXTENSION amcheck;
SELECT 'both indexes hold every row' AS amcheck
FROM (SELECT bt_index_check('rate_limiter.rate_limits_second', true),
             bt_index_check('rate_limiter.rate_limits_name_key_shard_key', true)) checked;
DROP EXTENSION amcheck;
DROP INDEX rate_limiter.rate_limits_second;
DROP TABLE store_audit, store_names;
DROP FUNCTION store_audit();

SELECT ok FROM rate_limiter.rate_limit('store', 'x');

-- A state table that Citus distributes otherwise than
-- rate_limiter.distribute() does (create_distributed_table lists it in
-- pg_catalog.pg_dist_partition) would leave the coordinator's local table
-- empty while every node keeps its own state: every call fails closed
-- instead. Citus is not loaded here, so the library installed no cluster
-- layer at load: a stand-in for Citus's catalog shows that calls still
-- fail closed (55000). With Citus loaded, the error says what works
-- instead, undistribute() and then distribute() (the Citus suite,
-- tests/integration/tests/citus/, checks it on a real cluster).
SET allow_system_table_mods = on;
CREATE TABLE pg_catalog.pg_dist_partition (logicalrelid regclass);
INSERT INTO pg_catalog.pg_dist_partition VALUES ('rate_limiter.rate_limits');
RESET allow_system_table_mods;
\set VERBOSITY default
SELECT ok FROM rate_limiter.rate_limit('store', 'distributed');
\set VERBOSITY terse
\echo :LAST_ERROR_SQLSTATE
SELECT ok FROM rate_limiter.rate_check('store', 'distributed');
\echo :LAST_ERROR_SQLSTATE
SET allow_system_table_mods = on;
DROP TABLE pg_catalog.pg_dist_partition;
RESET allow_system_table_mods;

-- Citus's hooks are installed only when Citus is loaded: here, an error
-- that reads like Citus's refusal to colocate the state table while a node
-- is added gets no HINT naming prepare_node() (on a Citus cluster it does).
\set VERBOSITY default
DO $$ BEGIN RAISE EXCEPTION 'cannot colocate tables rate_limits and grow'; END $$;
\set VERBOSITY terse
SELECT ok FROM rate_limiter.rate_limit('store', 'distributed');

SELECT rate_limiter.undefine('store');
