-- Privileges (SPEC section 7): nothing is granted to PUBLIC. The functions
-- run their statements as the extension's owner with a pinned search path
-- (src/security.rs), so callers need only USAGE on the schema and EXECUTE
-- on the functions a database owner grants them; they get no privilege on
-- the tables.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rate_limiter FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA rate_limiter FROM PUBLIC;

-- The role that ran CREATE EXTENSION (for a trusted install, a database
-- owner who is not superuser) may pass the right to use the limiter on.
GRANT USAGE ON SCHEMA rate_limiter TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA rate_limiter TO @extowner@ WITH GRANT OPTION;
