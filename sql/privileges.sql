-- Privileges (docs/guarantees.md, "Security and roles"): nothing is
-- granted to PUBLIC. The functions run their statements as the extension's
-- owner with a pinned search path (src/security.rs), so callers need only
-- USAGE on the schema and EXECUTE on the functions a database owner grants
-- them; they get no privilege on the tables.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rate_limiter FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA rate_limiter FROM PUBLIC;

-- Whatever ALTER DEFAULT PRIVILEGES says (GRANT EXECUTE ON FUNCTIONS TO
-- web, say), no other role holds a privilege on the new objects: every
-- role but their owner that got one is revoked from all of them.
-- (Role names come from the catalog, quoted with %I.)
DO $revoke$
DECLARE
    grantee_name name;
    type_name text;
BEGIN
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'rate_limiter'::pg_catalog.regnamespace
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'rate_limiter'::pg_catalog.regnamespace
            UNION ALL
            SELECT (pg_catalog.aclexplode(t.typacl)).grantee, t.typowner
            FROM pg_catalog.pg_type AS t WHERE t.typnamespace = 'rate_limiter'::pg_catalog.regnamespace
            UNION ALL
            SELECT (pg_catalog.aclexplode(n.nspacl)).grantee, n.nspowner
            FROM pg_catalog.pg_namespace AS n WHERE n.oid = 'rate_limiter'::pg_catalog.regnamespace
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rate_limiter FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA rate_limiter FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA rate_limiter FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA rate_limiter FROM %I', grantee_name);
        FOR type_name IN
            SELECT t.oid::pg_catalog.regtype::pg_catalog.text FROM pg_catalog.pg_type AS t
            WHERE t.typnamespace = 'rate_limiter'::pg_catalog.regnamespace AND t.typtype IN ('c', 'e', 'd')
              AND (t.typtype <> 'c' OR (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid = t.typrelid) = 'c')
        LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON TYPE %s FROM %I', type_name, grantee_name);
        END LOOP;
    END LOOP;
END
$revoke$;

-- The role that ran CREATE EXTENSION (for a trusted install, a database
-- owner who is not superuser) may pass the right to use the limiter on.
GRANT USAGE ON SCHEMA rate_limiter TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA rate_limiter TO @extowner@ WITH GRANT OPTION;
GRANT SELECT ON rate_limiter.stats, rate_limiter.stats_info TO @extowner@ WITH GRANT OPTION;
