-- Installing the extension creates schema rate_limiter with two types,
-- two tables and seven functions.
CREATE EXTENSION rate_limiter;
-- (PostgreSQL 17 and later also list the array types and the tables' row
-- types, which come with the types and tables: left out here.)
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS object
FROM pg_depend d
LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rate_limiter')
  AND d.deptype = 'e'
  AND NOT coalesce(t.typcategory = 'A'
                   OR (t.typrelid <> 0 AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) <> 'c'), false)
ORDER BY 1;

-- Not relocatable; the schema is fixed.
SELECT extrelocatable, extnamespace::regnamespace FROM pg_extension WHERE extname = 'rate_limiter';

-- Every function is documented.
SELECT p.proname, obj_description(p.oid, 'pg_proc') IS NOT NULL AS documented,
       p.prosecdef AS security_definer, p.proisstrict AS strict, p.proconfig
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace ORDER BY 1;

-- Nothing is granted to PUBLIC.
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p WHERE p.pronamespace = 'rate_limiter'::regnamespace ORDER BY 1;
SELECT has_schema_privilege('public', 'rate_limiter', 'USAGE') AS public_usage;
