-- The portable edition's answers where a placeholder setting, a SECURITY
-- DEFINER caller, a per-role setting or a snapshot could make it answer
-- otherwise than the native extension (docs/managed-platforms.md:
-- what differs, and nothing else).
SET timezone = 'UTC';
SET datestyle = 'ISO';
SELECT current_database() AS database \gset
SELECT rate_limiter.define('review', rate_limiter.token_bucket(1, '1 hour'));
-- (The clock is real here: RESET ALL resets it. Errors show only their
-- SQLSTATE.)
\set VERBOSITY sqlstate

-- rate_limiter.sqlstate after RESET, RESET ALL or DISCARD ALL reads ''
-- (a placeholder's reset value): that is the default, RL429, as the
-- native setting returns to it; so is a value of only blanks.
SELECT ok FROM rate_limiter.rate_limit('review', 'sqlstate');
SET rate_limiter.sqlstate = 'PT429';
RESET rate_limiter.sqlstate;
SELECT ok FROM rate_limiter.rate_limit('review', 'sqlstate', throws => true);
SET rate_limiter.sqlstate = 'PT429';
RESET ALL;
SELECT ok FROM rate_limiter.rate_check('review', 'sqlstate', throws => true);
SET rate_limiter.sqlstate = 'PT429';
DISCARD ALL;
SELECT count(*) FROM rate_limiter.rate_limit_all(ARRAY[('review', 'sqlstate', 1, NULL)::rate_limiter.request], throws => true);
SET rate_limiter.sqlstate = '   ';
SELECT ok FROM rate_limiter.rate_limit('review', 'sqlstate', throws => true);
RESET ALL;
\set VERBOSITY default
-- (No CONTEXT lines: PostgreSQL 15 calls a PL/pgSQL expression "SQL
-- expression", 16 and later "PL/pgSQL expression".)
\set SHOW_CONTEXT never
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- An inline config for a defined name is for a role that may call
-- define(). The native extension asks current_user, which inside a
-- SECURITY DEFINER function is the function's owner; the portable
-- functions cannot see that role, so a call made from inside any function
-- but rate_limiter's own is refused (42501), whoever's session runs it,
-- and a direct call (or a DO block) of a role that may call define()
-- passes.
DROP ROLE IF EXISTS rl_review_app;
DROP ROLE IF EXISTS rl_review_admin;
CREATE ROLE rl_review_app LOGIN;
CREATE ROLE rl_review_admin LOGIN;
GRANT USAGE ON SCHEMA rate_limiter TO rl_review_app, rl_review_admin;
GRANT EXECUTE ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config),
                          rate_limiter.status(text, text, rate_limiter.config),
                          rate_limiter.token_bucket(float8, interval, float8, float8, int4)
    TO rl_review_app, rl_review_admin;
GRANT EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) TO rl_review_admin;
CREATE SCHEMA rl_review AUTHORIZATION rl_review_app;
GRANT USAGE ON SCHEMA rl_review TO rl_review_admin;
GRANT CREATE ON DATABASE :"database" TO rl_review_admin;
SET ROLE rl_review_app;
CREATE FUNCTION rl_review.override() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    RETURN (SELECT ok FROM rate_limiter.rate_limit('review', 'inline',
                                                   config => rate_limiter.token_bucket(1000, '1 second')));
END
$$;
CREATE FUNCTION rl_review.override_sql() RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog
AS $$ SELECT ok FROM rate_limiter.rate_limit('review', 'inline', config => rate_limiter.token_bucket(1000, '1 second')) $$;
-- The application role itself: 42501, as on the native extension.
SELECT rl_review.override();
RESET ROLE;
-- A superuser's session running the application role's functions: the
-- native extension refuses (current_user is the application role), and
-- so does the portable edition.
SELECT rl_review.override();
SELECT rl_review.override_sql();
\c - rl_review_admin
SELECT rl_review.override();
SELECT rl_review.override_sql();
-- The admin's own calls: direct, and from a DO block.
SELECT ok FROM rate_limiter.rate_limit('review', 'inline', config => rate_limiter.token_bucket(1000, '1 second'));
SELECT (rate_limiter.status('review', 'inline', config => rate_limiter.token_bucket(1000, '1 second'))).value;
DO $$
BEGIN
    PERFORM rate_limiter.rate_limit('review', 'inline', config => rate_limiter.token_bucket(1000, '1 second'));
END
$$;
-- (A function of the admin's own, SECURITY DEFINER or not, is refused
-- too: the portable edition cannot tell whose role it runs as. The
-- native extension admits it.)
CREATE SCHEMA rl_review_own;
CREATE FUNCTION rl_review_own.own_override() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN (SELECT ok FROM rate_limiter.rate_limit('review', 'inline',
                                                   config => rate_limiter.token_bucket(1000, '1 second')));
END
$$;
SELECT rl_review_own.own_override();
DROP SCHEMA rl_review_own CASCADE;
\c - postgres
SET timezone = 'UTC';
SET datestyle = 'ISO';
SELECT ok FROM rate_limiter.rate_limit('review', 'inline', config => rate_limiter.token_bucket(1000, '1 second'));
DROP SCHEMA rl_review CASCADE;

-- rate_limiter.max_requests and rate_limiter.max_inline_shards of an
-- application role come from the per-role and per-database settings, with
-- PostgreSQL's precedence (role in this database, role, database), as the
-- native extension applies them at login; never from its session. For a
-- placeholder setting only a superuser (or a role granted SET on the
-- parameter) may store them: the role itself cannot, nor the database's
-- owner.
GRANT EXECUTE ON FUNCTION rate_limiter.rate_limit_all(rate_limiter.request[], boolean, boolean) TO rl_review_app;
ALTER DATABASE :"database" OWNER TO rl_review_admin;
\c - rl_review_admin
ALTER DATABASE :"database" SET rate_limiter.max_requests = 100000;
\c - rl_review_app
ALTER ROLE rl_review_app SET rate_limiter.max_requests = 100000;
ALTER ROLE rl_review_app IN DATABASE :"database" SET rate_limiter.max_requests = 100000;
\c - postgres
ALTER DATABASE :"database" OWNER TO postgres;
ALTER ROLE rl_review_app SET rate_limiter.max_requests = 2;
ALTER ROLE rl_review_app SET rate_limiter.max_inline_shards = 2;
\c - rl_review_app
SET rate_limiter.max_requests = 100000;
SET rate_limiter.max_inline_shards = 1000;
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('review', 'bound' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 3) AS i));
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('review', 'bound' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 2) AS i));
SELECT ok FROM rate_limiter.rate_limit('review_bound', config => rate_limiter.token_bucket(1000, '1 minute', shards => 3));
\c - postgres
-- The role's value in this database comes first, then the role's, then
-- the database's: a larger one set there counts as on the native
-- extension.
ALTER DATABASE :"database" SET rate_limiter.max_requests = 4;
ALTER ROLE rl_review_app IN DATABASE :"database" SET rate_limiter.max_requests = 3;
\c - rl_review_app
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('review', 'bound' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 4) AS i));
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('review', 'bound' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 3) AS i));
\c - postgres
ALTER ROLE rl_review_app IN DATABASE :"database" RESET rate_limiter.max_requests;
ALTER ROLE rl_review_app RESET rate_limiter.max_requests;
\c - rl_review_app
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('review', 'bound' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 5) AS i));
SELECT count(*) FROM rate_limiter.rate_limit_all(
    ARRAY(SELECT ('review', 'bound' || i, 0, NULL)::rate_limiter.request FROM generate_series(1, 4) AS i));
\c - postgres
SET timezone = 'UTC';
SET datestyle = 'ISO';
ALTER DATABASE :"database" RESET rate_limiter.max_requests;
ALTER ROLE rl_review_app RESET ALL;

-- In a read-only transaction the arguments are checked before the
-- transaction's state is: a count the limit could never admit is 22023,
-- as on the native extension, not 25006.
BEGIN TRANSACTION READ ONLY;
SELECT * FROM rate_limiter.rate_limit('review', 'k', 'NaN');
ROLLBACK;
BEGIN TRANSACTION READ ONLY;
SELECT * FROM rate_limiter.rate_limit('review', 'k', 2);
ROLLBACK;
BEGIN TRANSACTION READ ONLY;
SELECT * FROM rate_limiter.rate_limit('review_sharded', 'k', 'NaN',
                                      config => rate_limiter.token_bucket(10, '1 minute', shards => 2));
ROLLBACK;
BEGIN TRANSACTION READ ONLY;
SELECT * FROM rate_limiter.rate_limit('review', 'k', 1);
ROLLBACK;

-- rate_limiter.random_seed of an application role, which the native
-- extension refuses when it is SET: every call that draws shards is
-- 42501 (a sharded rate_limit, defined or inline, and rate_wait, at every
-- isolation level); a call that draws nothing draws nothing on the
-- native extension either.
GRANT EXECUTE ON FUNCTION rate_limiter.rate_wait(text, text, float8, interval, rate_limiter.config) TO rl_review_app;
SELECT rate_limiter.define('review_sharded', rate_limiter.token_bucket(100, '1 minute', shards => 4));
\c - rl_review_app
SET rate_limiter.random_seed = 1;
SELECT ok FROM rate_limiter.rate_limit('review_sharded', 'k');
SELECT ok FROM rate_limiter.rate_wait('review_sharded', 'k');
SELECT ok FROM rate_limiter.rate_limit('review_inline', 'k', config => rate_limiter.token_bucket(100, '1 minute', shards => 4));
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT ok FROM rate_limiter.rate_limit('review_sharded', 'k');
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT ok FROM rate_limiter.rate_limit('review_sharded', 'k');
ROLLBACK;
RESET rate_limiter.random_seed;
SELECT ok FROM rate_limiter.rate_limit('review_sharded', 'k');
\c - postgres
SET timezone = 'UTC';
SET datestyle = 'ISO';

-- postgrest_limit's refusal carries rate_limiter.sqlstate in its PGRST
-- body: a value the native extension would have refused when it was SET
-- is 22023 there too, as in every other refusal, never sent to PostgREST;
-- empty or blank is RL429.
SELECT rate_limiter.define('review_postgrest', rate_limiter.token_bucket(1, '1 hour'));
SELECT rate_limiter.postgrest_limit('review_postgrest', 'k');
SET rate_limiter.sqlstate = '40001';
SELECT rate_limiter.postgrest_limit('review_postgrest', 'k');
SET rate_limiter.sqlstate = 'pt429';
SELECT rate_limiter.postgrest_limit('review_postgrest', 'k');
SET rate_limiter.sqlstate = ' PT429';
SELECT rate_limiter.postgrest_limit('review_postgrest', 'k');
CREATE FUNCTION pg_temp.postgrest_code() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM rate_limiter.postgrest_limit('review_postgrest', 'k');
    RETURN 'admitted';
EXCEPTION WHEN SQLSTATE 'PGRST' THEN
    RETURN SQLERRM::json->>'code';
END
$$;
SET rate_limiter.sqlstate = 'PT429';
SELECT pg_temp.postgrest_code();
SET rate_limiter.sqlstate = '  ';
SELECT pg_temp.postgrest_code();
SET rate_limiter.sqlstate = 'PT429';
RESET rate_limiter.sqlstate;
SELECT pg_temp.postgrest_code();

-- A fixed window without a start hashes its name and key (XXH3, in
-- PL/pgSQL) once per call, not once per shard it looks at (reading a
-- limit of 32,767 shards took seconds); a long key's hash is kept for the
-- next call of the same key: the calls of the hash, counted.
SELECT rate_limiter.define('review_many', rate_limiter.fixed_window(1000000, '1 hour', shards => 32767));
BEGIN;
SET LOCAL track_functions = 'all';
SELECT ok, remaining FROM rate_limiter.rate_check('review_many', repeat('k', 300));
SELECT value, capacity, shards FROM rate_limiter.status('review_many', repeat('k', 300));
SELECT ok FROM rate_limiter.rate_limit('review_many', repeat('k', 300));
SELECT pg_stat_get_xact_function_calls('rate_limiter._xxh3(bytea)'::regprocedure) AS hashed;
COMMIT;
-- The hash kept is the input's: another input is hashed anew.
SELECT rate_limiter._phase('review', 'a', 1000000) = pg_catalog.mod(rate_limiter._u64(rate_limiter._xxh3(
           '\x0600000000000000'::bytea || convert_to('review', 'UTF8') || '\x01'::bytea || convert_to('a', 'UTF8'))), 1000000) AS a,
       rate_limiter._phase('review', 'b', 1000000) = pg_catalog.mod(rate_limiter._u64(rate_limiter._xxh3(
           '\x0600000000000000'::bytea || convert_to('review', 'UTF8') || '\x01'::bytea || convert_to('b', 'UTF8'))), 1000000) AS b,
       rate_limiter._phase('review', NULL, 1000000) = pg_catalog.mod(rate_limiter._u64(rate_limiter._xxh3(
           '\x0600000000000000'::bytea || convert_to('review', 'UTF8') || '\x00'::bytea)), 1000000) AS global,
       rate_limiter._phase('review', 'a', 999) = pg_catalog.mod(rate_limiter._u64(rate_limiter._xxh3(
           '\x0600000000000000'::bytea || convert_to('review', 'UTF8') || '\x01'::bytea || convert_to('a', 'UTF8'))), 999) AS a_again;

-- XXH3 of an input of more than 240 bytes sums each 1,024-byte block's
-- terms in one query, then scrambles block by block (12_xxh3_long.sql;
-- stripe by stripe in PL/pgSQL, a MiB took seconds): the hashes of the
-- xxhash library, at the lengths around a stripe, a block and beyond, of
-- bytes that are all high and all zero, and an input of a MiB is hashed.
CREATE FUNCTION pg_temp.review_bytes(n int) RETURNS bytea LANGUAGE sql AS $$
    SELECT pg_catalog.substr(pg_catalog.decode(pg_catalog.string_agg(pg_catalog.md5(i::text), '' ORDER BY i), 'hex'), 1, n)
      FROM pg_catalog.generate_series(0, n / 16) AS i
$$;
SELECT n, rate_limiter._xxh3(pg_temp.review_bytes(n)) = expected AS same
  FROM (VALUES (241, -7027169220535255167), (255, 9090742727913781373), (256, -3570918717362317146),
               (1000, 8049357228503080663), (1023, 504247738757327892), (1024, -7109617612361795936),
               (1025, -8701377221297069199), (1088, 8943498719642575858), (2048, -1367638225347233463),
               (4096, 4557038312918453601), (100000, -9220437382205406201),
               (1048576, -7069139169481771861)) AS v(n, expected)
 ORDER BY n;
SELECT rate_limiter._xxh3(pg_catalog.decode(pg_catalog.repeat('ff', 2048), 'hex')) = 8572660099920755171 AS high,
       rate_limiter._xxh3(pg_catalog.decode(pg_catalog.repeat('00', 1500), 'hex')) = 1861305164627503844 AS zero;

DROP OWNED BY rl_review_app, rl_review_admin;
DROP ROLE rl_review_app;
DROP ROLE rl_review_admin;
