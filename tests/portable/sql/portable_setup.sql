-- The portable edition (docs/guarantees.md, "Portable edition") in place of
-- setup.sql: installing it creates the native extension's schema, types,
-- tables and functions, written in SQL and PL/pgSQL. setup.sql's listing
-- differs as the portable edition may: the functions are PL/pgSQL, the ones
-- that read or write the tables run as their owner (SECURITY DEFINER) with
-- search_path = pg_catalog, pg_temp, and there are internal helpers (names
-- starting with _) where the native extension has C code.
CREATE EXTENSION rate_limiter;

-- Same tables, same columns (collations included), same keys.
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
       CASE WHEN a.attcollation <> 0 THEN a.attcollation::regcollation END AS collation
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = 'rate_limiter'::regnamespace AND c.relkind = 'r'
ORDER BY c.relname, a.attnum;
SELECT conrelid::regclass AS "table", conname, pg_get_constraintdef(oid) AS definition
FROM pg_constraint WHERE connamespace = 'rate_limiter'::regnamespace AND contype <> 'n' ORDER BY 1, 2;

-- Same types (and the portable edition's internal ones, named _*, which
-- the native extension has in C).
SELECT t.typname, t.typtype,
       (SELECT string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid) AS labels,
       (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
        FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0) AS fields
FROM pg_type t
WHERE t.typnamespace = 'rate_limiter'::regnamespace AND t.typtype IN ('e', 'c')
  AND (t.typtype = 'e' OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
  AND t.typname !~ '^_'
ORDER BY 1;

-- Every function of the API, with the native signature, defaults and
-- result; each documented.
SELECT p.oid::regprocedure AS function, pg_get_function_result(p.oid) AS result,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS documented
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace AND p.proname !~ '^_'
ORDER BY p.proname, 1::text;
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace AND p.proname !~ '^_'
ORDER BY p.proname, 2;

-- How the functions run: the ones that touch the tables as their owner,
-- with a pinned search_path; the helpers inside those calls, but for the
-- two behind the statistics views (which raise 0A000 for any reader).
SELECT p.proname, p.prosecdef AS security_definer, p.proconfig
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace AND p.proname !~ '^_'
ORDER BY 1;
SELECT count(*) > 0 AS has_helpers, bool_and(NOT p.prosecdef) AS helpers_run_as_caller
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace AND p.proname ~ '^_'
  AND p.proname NOT IN ('_stats', '_stats_info');

-- Nothing is granted to PUBLIC.
SELECT count(*) AS public_execute
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace
  AND has_function_privilege('public', p.oid, 'EXECUTE');
SELECT has_schema_privilege('public', 'rate_limiter', 'USAGE') AS public_usage;
SELECT c.relname, has_table_privilege('public', c.oid, 'SELECT') AS public_select
FROM pg_class c WHERE c.relnamespace = 'rate_limiter'::regnamespace AND c.relkind IN ('r', 'v') ORDER BY 1;
