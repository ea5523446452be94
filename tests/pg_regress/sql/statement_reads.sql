-- rate_check called once per row of one statement (a LATERAL join, a
-- trigger's query): each row's answer is the one a call of its own would
-- give, however the statement ends. The native edition keeps its read of
-- the table open from one row to the next (src/storage/read_cache.rs) and
-- closes it when the statement ends; one left open would show here as a
-- WARNING about a leaked reference when the transaction commits.
SET timezone = 'UTC';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('rows', rate_limiter.token_bucket(10, '1 hour'));
SELECT count(*) FROM generate_series(1, 5) AS g, LATERAL rate_limiter.rate_limit('rows', g::text, g) AS r;

-- One statement, a row per key (keys 0 and 6 have no row yet), against
-- calls of their own.
SELECT g, r.ok, r.remaining FROM generate_series(0, 6) AS g, LATERAL rate_limiter.rate_check('rows', g::text, 6) AS r ORDER BY g;
SELECT ok, remaining FROM rate_limiter.rate_check('rows', '4', 6);
SELECT ok, remaining FROM rate_limiter.rate_check('rows', '6', 6);
-- The same key again and again, and two calls in each row.
SELECT g, a.remaining, b.remaining FROM generate_series(1, 4) AS g,
    LATERAL rate_limiter.rate_check('rows', '2', 0) AS a,
    LATERAL rate_limiter.rate_check('rows', (g + 1)::text, 0) AS b ORDER BY g;
-- Another limit's rows in the same statement: a sharded limit, a global
-- limit (NULL key) and a name with no definition (42704 at its row).
SELECT rate_limiter.define('rows_sharded', rate_limiter.token_bucket(8, '1 hour', shards => 2));
SELECT g, r.ok, r.remaining FROM generate_series(1, 3) AS g,
    LATERAL rate_limiter.rate_check(CASE WHEN g = 2 THEN 'rows_sharded' ELSE 'rows' END, CASE WHEN g = 3 THEN NULL ELSE g::text END) AS r ORDER BY g;
SELECT g, r.ok FROM generate_series(1, 3) AS g,
    LATERAL rate_limiter.rate_check(CASE WHEN g = 3 THEN 'rows_undefined' ELSE 'rows' END, g::text) AS r;

-- An error in the middle of the statement, then the next statement.
SELECT g, r.ok, 1 / (3 - g) AS boom FROM generate_series(1, 5) AS g, LATERAL rate_limiter.rate_check('rows', g::text, 1) AS r;
SELECT ok, remaining FROM rate_limiter.rate_check('rows', '1', 1);
-- ... inside a transaction, undone by a savepoint.
BEGIN;
SELECT count(*) FROM generate_series(1, 3) AS g, LATERAL rate_limiter.rate_check('rows', g::text, 1) AS r;
SAVEPOINT s;
SELECT g, 1 / (2 - g) AS boom FROM generate_series(1, 3) AS g, LATERAL rate_limiter.rate_check('rows', g::text, 1) AS r;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) FILTER (WHERE r.ok) AS admitted FROM generate_series(1, 5) AS g, LATERAL rate_limiter.rate_check('rows', g::text, 6) AS r;
COMMIT;

-- Per-row statements inside PL/pgSQL exception blocks (each a statement
-- of its own, nested in the outer one), one of them rolled back.
CREATE FUNCTION pg_temp.checked(k text) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    v float8;
BEGIN
    BEGIN
        SELECT r.remaining INTO v FROM generate_series(1, 2) AS g,
            LATERAL rate_limiter.rate_check('rows', k, 0) AS r WHERE g = 2;
        IF k = '2' THEN
            RAISE division_by_zero;
        END IF;
    EXCEPTION WHEN division_by_zero THEN
        v := -1;
    END;
    RETURN v;
END
$$;
SELECT g, r.remaining, pg_temp.checked(g::text) AS nested FROM generate_series(1, 3) AS g,
    LATERAL rate_limiter.rate_check('rows', g::text, 0) AS r ORDER BY g;

-- Catalog changes between rows (each CREATE TABLE is a relcache
-- invalidation): the table is opened again, the answers stay.
CREATE FUNCTION pg_temp.invalidate(g int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TEMP TABLE statement_reads_%s (x int)', g);
    RETURN g;
END
$$;
SELECT pg_temp.invalidate(g) AS g, r.remaining FROM generate_series(1, 3) AS g,
    LATERAL rate_limiter.rate_check('rows', g::text, 0) AS r ORDER BY g;

-- Cursors: fetched across a released and a rolled-back savepoint, left
-- open at commit, and held past it.
BEGIN;
DECLARE c CURSOR FOR SELECT g, r.remaining FROM generate_series(1, 6) AS g,
    LATERAL rate_limiter.rate_check('rows', g::text, 0) AS r;
FETCH 2 FROM c;
SAVEPOINT s;
FETCH 1 FROM c;
RELEASE SAVEPOINT s;
SAVEPOINT t;
FETCH 1 FROM c;
ROLLBACK TO SAVEPOINT t;
FETCH 2 FROM c;
CLOSE c;
DECLARE open_at_commit CURSOR FOR SELECT g, r.remaining FROM generate_series(1, 6) AS g,
    LATERAL rate_limiter.rate_check('rows', g::text, 0) AS r;
FETCH 2 FROM open_at_commit;
DECLARE held CURSOR WITH HOLD FOR SELECT g, r.remaining FROM generate_series(1, 4) AS g,
    LATERAL rate_limiter.rate_check('rows', g::text, 0) AS r;
FETCH 1 FROM held;
COMMIT;
FETCH ALL FROM held;
CLOSE held;

SELECT count(*) FROM generate_series(1, 5) AS g, LATERAL rate_limiter.rate_reset('rows', g::text) AS r;
SELECT rate_limiter.undefine('rows');
SELECT rate_limiter.undefine('rows_sharded');
SELECT count(*) FROM rate_limiter.rate_limits WHERE name LIKE 'rows%';
