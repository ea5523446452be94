-- rate_limiter 0.3.0 -> 0.4.0 (ALTER EXTENSION rate_limiter UPDATE).
--
-- 0.4.0 adds what operators need (SPEC section 11): statistics per limit
-- name in shared memory (the view rate_limiter.stats, stats_reset(); they
-- need shared_preload_libraries = 'rate_limiter') and shadow mode
-- (define(..., enforce => false)). Every definition keeps enforcing and
-- every state row keeps its meaning. Below: the definitions table gets the
-- column enforce (true for every existing limit); define() gets its third
-- argument (dropped and created again: the grants on it are carried over,
-- each by its own grantor); rate_wait() becomes a C function that counts
-- only its final answer (same signature: its grants stay); the statistics
-- objects are created, granted to nobody but the installing role.

ALTER TABLE rate_limiter.definitions ADD COLUMN enforce boolean NOT NULL DEFAULT true;

-- The grants on define(text, config), kept until define(text, config,
-- boolean) exists (a transaction-local setting: this script is one
-- transaction).
SELECT pg_catalog.set_config('rate_limiter_upgrade.define_acl',
    coalesce((SELECT p.proacl::pg_catalog.text FROM pg_catalog.pg_proc AS p
              WHERE p.oid = 'rate_limiter.define(text, rate_limiter.config)'::pg_catalog.regprocedure), ''),
    true);

DROP FUNCTION rate_limiter.define(text, rate_limiter.config);

CREATE FUNCTION rate_limiter.define(name text, config rate_limiter.config, enforce boolean DEFAULT true)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'define_enforcing_wrapper';

COMMENT ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) IS
'Creates or replaces the named limit. Changing kind, period or shards discards its state; other changes keep it (capped at the new capacity), switching enforce too. '
'enforce => false is shadow mode: calls decide and write state as an enforcing limit does, but answer ok = true, never raise, and count the refusal in rate_limiter.stats.shadow_refused. '
'WARNING when each shard of a sharded limit would hold fewer than 5 tokens. '
'Errors: 22004 NULL name/config/enforce or required field; 22023 invalid config.';

CREATE OR REPLACE FUNCTION rate_limiter.rate_wait(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    timeout interval            DEFAULT '30 seconds',
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'rate_wait_wrapper';

-- CREATE OR REPLACE keeps the function's SET clauses unless it names them.
ALTER FUNCTION rate_limiter.rate_wait(text, text, float8, interval, rate_limiter.config) RESET ALL;

COMMENT ON FUNCTION rate_limiter.rate_wait(text, text, float8, interval, rate_limiter.config) IS
'As rate_limit, but a refused call sleeps until retry_after and tries again, until it is admitted or the next try would come after timeout '
'(then it returns ok = false at once, with retry_after, and consumes nothing). While it sleeps it holds no row lock (the refused try is rolled back). '
'Each try first looks (rate_check: no lock, no transaction id) and consumes only when the limit would admit, so waiting uses no subtransaction per refusal. '
'Only the final answer is counted in rate_limiter.stats. '
'Sleeps on the real clock; can be cancelled (57014); statement_timeout applies. '
'Errors: as rate_limit (22004, 42704, 42501, 54000, 22023, 25006 in a read-only transaction); 22004 NULL timeout; 22023 negative timeout.';

CREATE FUNCTION rate_limiter._stats()
RETURNS TABLE (name text, calls bigint, admitted bigint, refused bigint, reserved bigint,
               tokens float8, credited float8, near_limit bigint, shadow_refused bigint,
               contended bigint, stats_reset timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'stats_wrapper';

COMMENT ON FUNCTION rate_limiter._stats() IS
'The rows of the view rate_limiter.stats. Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

CREATE VIEW rate_limiter.stats AS SELECT * FROM rate_limiter._stats();

COMMENT ON VIEW rate_limiter.stats IS
'One row per limit name of this database that was called since the server started: counters summed over every backend since stats_reset. '
'calls = admitted + refused + shadow_refused; reserved = admitted with retry_after > 0; tokens = counts admitted; credited = tokens given back; '
'near_limit = admitted calls that left less than 20% of capacity; contended = sharded calls that passed over or waited for a locked shard. '
'Not transactional (a decision is counted when made). Needs shared_preload_libraries = ''rate_limiter'' (55000 otherwise); at most rate_limiter.stats_max names.';

CREATE FUNCTION rate_limiter.stats_reset(name text DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'stats_reset_wrapper';

COMMENT ON FUNCTION rate_limiter.stats_reset(text) IS
'Zeroes the counters of the named limit in rate_limiter.stats (NULL: of every limit of this database) and sets its stats_reset to now. '
'Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

-- The new objects: nobody holds a privilege on them (not PUBLIC, not a
-- role that ALTER DEFAULT PRIVILEGES names), as after CREATE EXTENSION;
-- the installing role may pass them on.
DO $revoke$
DECLARE
    object text;
    grantee_name name;
BEGIN
    FOREACH object IN ARRAY ARRAY[
        'FUNCTION rate_limiter.define(text, rate_limiter.config, boolean)',
        'FUNCTION rate_limiter._stats()',
        'FUNCTION rate_limiter.stats_reset(text)']
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM PUBLIC', object);
    END LOOP;
    REVOKE ALL ON rate_limiter.stats FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN ('rate_limiter.define(text, rate_limiter.config, boolean)'::pg_catalog.regprocedure,
                            'rate_limiter._stats()'::pg_catalog.regprocedure,
                            'rate_limiter.stats_reset(text)'::pg_catalog.regprocedure)
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c WHERE c.oid = 'rate_limiter.stats'::pg_catalog.regclass
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean), '
            'rate_limiter._stats(), rate_limiter.stats_reset(text) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.stats FROM %I', grantee_name);
    END LOOP;
END
$revoke$;

GRANT EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean), rate_limiter._stats(), rate_limiter.stats_reset(text)
    TO @extowner@ WITH GRANT OPTION;
GRANT SELECT ON rate_limiter.stats TO @extowner@ WITH GRANT OPTION;

-- define(text, config)'s grants, on define(text, config, boolean): each
-- made again by the role that made it (so that role can still revoke it);
-- a grant by a role that holds the grant option only through another grant
-- waits for that one. A trusted update runs as the bootstrap superuser,
-- which may not switch roles: then the owner makes the grant, with a
-- WARNING naming the role that made it before.
DO $grants$
DECLARE
    saved aclitem[] := NULLIF(pg_catalog.current_setting('rate_limiter_upgrade.define_acl'), '')::aclitem[];
    define oid := 'rate_limiter.define(text, rate_limiter.config, boolean)'::pg_catalog.regprocedure;
    owner oid := (SELECT p.proowner FROM pg_catalog.pg_proc AS p WHERE p.oid = define);
    entry record;
    pass int;
    granted boolean;
    statement text;
    previous_role text := CASE pg_catalog.current_setting('role')
        WHEN 'none' THEN 'NONE' ELSE pg_catalog.quote_ident(pg_catalog.current_setting('role')) END;
BEGIN
    IF saved IS NULL THEN
        RETURN;
    END IF;
    FOR pass IN 1..8 LOOP
        granted := false;
        FOR entry IN
            SELECT a.grantor, a.grantee, a.is_grantable,
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END AS grantee_sql
            FROM pg_catalog.aclexplode(saved) AS a
            WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> owner
              -- not granted yet
              AND NOT EXISTS (
                  SELECT FROM pg_catalog.aclexplode((SELECT p.proacl FROM pg_catalog.pg_proc AS p WHERE p.oid = define)) AS b
                  WHERE b.grantor = a.grantor AND b.grantee = a.grantee AND b.is_grantable = a.is_grantable)
              -- its grantor may grant it now
              AND (a.grantor = owner OR EXISTS (
                  SELECT FROM pg_catalog.aclexplode((SELECT p.proacl FROM pg_catalog.pg_proc AS p WHERE p.oid = define)) AS b
                  WHERE b.grantee = a.grantor AND b.is_grantable))
        LOOP
            statement := pg_catalog.format('GRANT EXECUTE ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) TO %s%s',
                entry.grantee_sql, CASE WHEN entry.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            IF entry.grantor = owner THEN
                EXECUTE statement;
            ELSE
                BEGIN
                    EXECUTE pg_catalog.format('SET LOCAL ROLE %I', pg_catalog.pg_get_userbyid(entry.grantor));
                    EXECUTE statement;
                    EXECUTE pg_catalog.format('SET LOCAL ROLE %s', previous_role);
                EXCEPTION WHEN OTHERS THEN
                    -- (The block's subtransaction undid the role switch.)
                    EXECUTE statement;
                    RAISE WARNING 'rate_limiter: EXECUTE on define() granted to % by the owner, not by %',
                        entry.grantee_sql, pg_catalog.pg_get_userbyid(entry.grantor);
                END;
            END IF;
            granted := true;
        END LOOP;
        EXIT WHEN NOT granted;
    END LOOP;
END
$grants$;
