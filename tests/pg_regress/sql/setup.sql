-- Installing the extension creates schema rate_limiter with two types,
-- two tables and seven functions.
CREATE EXTENSION rate_limiter;
SELECT pg_describe_object(classid, objid, objsubid) AS object
FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rate_limiter')
  AND deptype = 'e'
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
