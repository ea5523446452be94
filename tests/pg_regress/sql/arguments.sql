-- Arguments: NULLs, keys, named arguments, and calling forms.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('calls', rate_limiter.token_bucket(100, '1 hour'));

-- NULL name, count, reserve or throws: 22004, reported before the name is
-- looked up (the name below is not defined).
SELECT * FROM rate_limiter.rate_limit(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('undefined', count => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('undefined', reserve => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit('undefined', throws => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_check(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_check('undefined', count => NULL);
\echo :LAST_ERROR_SQLSTATE

-- key NULL is the global limit; it is distinct from every key, including ''.
SELECT remaining FROM rate_limiter.rate_limit('calls', NULL, 10);
SELECT remaining FROM rate_limiter.rate_limit('calls', '', 20);
SELECT remaining FROM rate_limiter.rate_limit('calls', 'u1', 30);
SELECT remaining FROM rate_limiter.rate_limit('calls');
SELECT key IS NULL AS global, key, value FROM rate_limiter.rate_limits WHERE name = 'calls' ORDER BY key NULLS FIRST;
SELECT rate_limiter.rate_reset('calls');
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'calls' ORDER BY key;
SELECT rate_limiter.rate_reset('calls', '');
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'calls' ORDER BY key;

-- All arguments may be passed by name, in any order.
SELECT * FROM rate_limiter.rate_limit(count => 3, key => 'u2', name => 'calls');
SELECT * FROM rate_limiter.rate_check(name => 'calls', key => 'u2', reserve => false, throws => false, count => 1);

-- Every calling form runs the function once (each call consumes 1).
SELECT rate_limiter.rate_reset('calls', 'once');
SELECT * FROM rate_limiter.rate_limit('calls', 'once');
SELECT (rate_limiter.rate_limit('calls', 'once')).*;
SELECT rate_limiter.rate_limit('calls', 'once');
SELECT (rate_limiter.rate_limit('calls', 'once')).remaining;
DO $$
DECLARE
    result record;
    allowed boolean;
BEGIN
    SELECT * INTO result FROM rate_limiter.rate_limit('calls', 'once');
    SELECT ok INTO allowed FROM rate_limiter.rate_limit('calls', 'once');
    RAISE NOTICE 'PL/pgSQL: ok=% remaining=% then ok=%', result.ok, result.remaining, allowed;
END
$$;
SELECT value AS remaining_after_seven_calls FROM rate_limiter.rate_limits WHERE name = 'calls' AND key = 'once';

-- One row per call also when used per row of a query.
SELECT k, l.ok, l.remaining
FROM generate_series(1, 3) AS k, LATERAL rate_limiter.rate_limit('calls', 'lateral', count => k) AS l;

-- Hostile names and keys are data, never SQL.
SELECT ok, remaining FROM rate_limiter.rate_limit('calls', $$'); DROP TABLE rate_limiter.rate_limits; --$$);
SELECT count(*) > 0 AS table_still_there FROM rate_limiter.rate_limits;
SELECT ok FROM rate_limiter.rate_limit(E'na\u00efve \U0001F600', E'cl\u00e9', config => rate_limiter.token_bucket(1, '1 hour'));
SELECT name, key FROM rate_limiter.rate_limits WHERE name LIKE 'na%';

-- Names and keys read from a table arrive as PostgreSQL stores long
-- values: compressed in the row, or out of line (TOAST; uncompressed with
-- STORAGE EXTERNAL). A call decides on the same row as for the same text
-- written in the call. (A call that read the stored bytes as they are
-- would take another row: 98 left, not 95, after the third call.)
SET default_toast_compression = 'pglz';
CREATE TEMP TABLE compressed_keys (name text, key text);
INSERT INTO compressed_keys VALUES ('calls', repeat('c', 5000));
CREATE TEMP TABLE out_of_line_keys (name text, key text);
ALTER TABLE out_of_line_keys ALTER COLUMN key SET STORAGE EXTERNAL;
INSERT INTO out_of_line_keys VALUES ('calls', repeat('e', 5000));
SELECT length(key), pg_column_compression(key) FROM compressed_keys;
SELECT length(key), pg_relation_size(reltoastrelid) > 0 AS out_of_line
FROM out_of_line_keys, pg_class WHERE pg_class.oid = 'out_of_line_keys'::regclass;
SELECT r.ok, r.remaining FROM compressed_keys AS s, LATERAL rate_limiter.rate_limit(s.name, s.key, 2) AS r;
SELECT ok, remaining FROM rate_limiter.rate_limit('calls', repeat('c', 5000), 3);
SELECT r.ok, r.remaining FROM compressed_keys AS s, LATERAL rate_limiter.rate_check(s.name, s.key) AS r;
SELECT r.ok, r.remaining FROM out_of_line_keys AS s, LATERAL rate_limiter.rate_limit(s.name, s.key, 2) AS r;
SELECT ok, remaining FROM rate_limiter.rate_limit('calls', repeat('e', 5000), 3);
SELECT r.ok, r.remaining FROM out_of_line_keys AS s, LATERAL rate_limiter.rate_check(s.name, s.key) AS r;
SELECT count(*) AS rows FROM rate_limiter.rate_limits WHERE name = 'calls' AND length(key) = 5000;
RESET default_toast_compression;
