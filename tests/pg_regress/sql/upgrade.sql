-- Upgrades: every released version keeps its install script
-- (sql/released/), CREATE EXTENSION ... VERSION '0.1.0' still works with
-- the new library, and ALTER EXTENSION rate_limiter UPDATE keeps every
-- definition and every state row's meaning: each limit answers exactly as
-- before the upgrade, and exactly as a fresh install of the new version
-- holding the same rows would (no limit refills or drains).
SELECT current_database() AS regression_database \gset
CREATE DATABASE rl_upgrade;
\c rl_upgrade
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
CREATE EXTENSION rate_limiter VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';

-- Definitions and state of every sort: keyed and global limits, a
-- reservation in debt, fixed windows with and without an anchor, a limit
-- used only with an inline config.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('chat', rate_limiter.token_bucket(10, '1 minute', capacity => 3));
SELECT rate_limiter.define('llm', rate_limiter.token_bucket(40000, '1 minute', max_reserved => 40000));
SELECT rate_limiter.define('signup', rate_limiter.fixed_window(100, '1 hour'));
SELECT rate_limiter.define('window', rate_limiter.fixed_window(5, '1 minute', start => '2026-01-01'));
SELECT ok FROM rate_limiter.rate_limit('chat', 'alice', 2);
SELECT ok FROM rate_limiter.rate_limit('chat', NULL, 3);
SELECT ok, retry_after FROM rate_limiter.rate_limit('llm', 'org', 60000, reserve => true);
SELECT ok FROM rate_limiter.rate_limit('signup', 'bob', 40);
SELECT ok FROM rate_limiter.rate_limit('window', NULL, 5);
SELECT ok FROM rate_limiter.rate_limit('inline', 'k', 4,
    config => rate_limiter.token_bucket(5, '1 second'));

-- What every limit answers a little later, before the upgrade.
SET rate_limiter.now_override = '2026-01-01 00:00:05+00';
CREATE TEMP TABLE probes (name text, key text, inline boolean);
INSERT INTO probes VALUES ('chat', 'alice', false), ('chat', NULL, false), ('llm', 'org', false),
    ('signup', 'bob', false), ('window', NULL, false), ('inline', 'k', true);
CREATE FUNCTION pg_temp.answers() RETURNS TABLE (name text, key text, ok boolean,
    retry_after interval, remaining float8) LANGUAGE sql AS $$
    SELECT p.name, p.key, r.ok, r.retry_after, r.remaining
    FROM probes p, LATERAL rate_limiter.rate_check(p.name, p.key, 1,
        config => CASE WHEN p.inline THEN rate_limiter.token_bucket(5, '1 second') END) r
$$;
CREATE TEMP TABLE before_upgrade AS SELECT * FROM pg_temp.answers();
SELECT * FROM before_upgrade ORDER BY name, key;

ALTER EXTENSION rate_limiter UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';

-- The same answers after it.
SELECT * FROM pg_temp.answers() EXCEPT SELECT * FROM before_upgrade;
SELECT count(*) AS answers FROM pg_temp.answers();

-- The upgraded objects are those of a fresh install: every function with
-- its definition, comment and privileges, every type and table.
CREATE FUNCTION pg_temp.objects() RETURNS text LANGUAGE sql AS $$
    SELECT md5(string_agg(description, E'\n' ORDER BY description))
    FROM (
        SELECT pg_describe_object(d.classid, d.objid, 0)
               || coalesce(' -- ' || obj_description(d.objid, d.classid::regclass::text), '')
               || CASE WHEN d.classid = 'pg_proc'::regclass
                       THEN E'\n' || pg_get_functiondef(d.objid)
                            || coalesce((SELECT proacl::text FROM pg_proc WHERE oid = d.objid), '')
                       WHEN d.classid = 'pg_class'::regclass
                       THEN E'\n' || (SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
                                      FROM pg_attribute WHERE attrelid = d.objid AND attnum > 0)
                       ELSE '' END AS description
        FROM pg_depend d
        WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
          AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rate_limiter')
    ) objects
$$;
SELECT pg_temp.objects() AS upgraded_objects \gset
CREATE TEMP TABLE kept_definitions AS
    SELECT name, kind::text AS kind, rate, period, capacity, max_reserved, shards, start
    FROM rate_limiter.definitions;
CREATE TEMP TABLE kept_state AS SELECT * FROM rate_limiter.rate_limits;
DROP EXTENSION rate_limiter;
CREATE EXTENSION rate_limiter;
SELECT extversion FROM pg_extension WHERE extname = 'rate_limiter';
SELECT pg_temp.objects() = :'upgraded_objects' AS same_objects_as_a_fresh_install;

-- A fresh install holding the same rows answers the same.
INSERT INTO rate_limiter.definitions
    SELECT name, kind::rate_limiter.kind, rate, period, capacity, max_reserved, shards, start
    FROM kept_definitions;
INSERT INTO rate_limiter.rate_limits SELECT * FROM kept_state;
SELECT * FROM pg_temp.answers() EXCEPT SELECT * FROM before_upgrade;
SELECT count(*) AS answers FROM pg_temp.answers();

\c :regression_database
DROP DATABASE rl_upgrade;

-- 0.3.0 -> 0.4.0 replaces define(text, config) by define(text, config,
-- enforce boolean DEFAULT true): every grant on it is carried over, made
-- by the role that made it (so that role can still revoke it), and every
-- existing limit keeps enforcing.
CREATE DATABASE rl_upgrade_grants;
\c rl_upgrade_grants
CREATE ROLE rl_upgrade_admin;
CREATE ROLE rl_upgrade_deputy;
CREATE EXTENSION rate_limiter VERSION '0.3.0';
GRANT USAGE ON SCHEMA rate_limiter TO rl_upgrade_admin, rl_upgrade_deputy;
GRANT EXECUTE ON FUNCTION rate_limiter.token_bucket(float8, interval, float8, float8, int4)
    TO rl_upgrade_admin, rl_upgrade_deputy;
GRANT EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config) TO rl_upgrade_admin WITH GRANT OPTION;
SET ROLE rl_upgrade_admin;
GRANT EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config) TO rl_upgrade_deputy;
RESET ROLE;
-- The 0.4.0 library serves 0.3.0's define until the update.
SELECT rate_limiter.define('kept', rate_limiter.token_bucket(1, '1 minute'));
CREATE FUNCTION pg_temp.define_grants() RETURNS TABLE (grantee text, grantor text, grantable boolean)
LANGUAGE sql AS $$
    SELECT coalesce(nullif(a.grantee::regrole::text, '-'), 'PUBLIC'), a.grantor::regrole::text, a.is_grantable
    FROM pg_proc p, aclexplode(p.proacl) a
    WHERE p.pronamespace = 'rate_limiter'::regnamespace AND p.proname = 'define'
    ORDER BY 1, 2
$$;
SELECT * FROM pg_temp.define_grants();
ALTER EXTENSION rate_limiter UPDATE;
SELECT oid::regprocedure FROM pg_proc WHERE pronamespace = 'rate_limiter'::regnamespace AND proname = 'define';
SELECT * FROM pg_temp.define_grants();
SELECT name, enforce FROM rate_limiter.definitions;
SET ROLE rl_upgrade_deputy;
SELECT rate_limiter.define('tried', rate_limiter.token_bucket(1, '1 minute'), enforce => false);
RESET ROLE;
SET ROLE rl_upgrade_admin;
REVOKE EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) FROM rl_upgrade_deputy;
RESET ROLE;
SELECT * FROM pg_temp.define_grants();
SELECT name, enforce FROM rate_limiter.definitions ORDER BY name;
\c :regression_database
DROP DATABASE rl_upgrade_grants;
DROP ROLE rl_upgrade_admin, rl_upgrade_deputy;

-- Every released version updates to one where a key's override works
-- (0.1.0 above, 0.3.0 just before: the others here).
CREATE DATABASE rl_upgrade_each;
\c rl_upgrade_each
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
\set version 0.2.0
\i tests/pg_regress/sql/include/upgrade_overrides.sql
\set version 0.4.0
\i tests/pg_regress/sql/include/upgrade_overrides.sql
\set version 0.5.0
\i tests/pg_regress/sql/include/upgrade_overrides.sql
\c :regression_database
DROP DATABASE rl_upgrade_each;
