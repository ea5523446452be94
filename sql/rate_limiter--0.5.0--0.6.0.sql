-- rate_limiter 0.5.0 -> 0.6.0 (ALTER EXTENSION rate_limiter UPDATE).
--
-- Statistics that no caller can empty (SPEC section 11): the view
-- rate_limiter.stats_info (names evicted, decisions not counted), names
-- shown distinct and readable in every encoding, stats_reset() taking a
-- name as the view shows it. No table, type or existing signature
-- changes; every definition and state row keeps its meaning; the new
-- objects are granted to nobody but the installing role, as after
-- CREATE EXTENSION.

COMMENT ON VIEW rate_limiter.stats IS
'One row per limit name of this database that was called since the server started: counters summed over every backend since stats_reset. '
'calls = admitted + refused + shadow_refused; reserved = admitted with retry_after > 0; tokens = counts admitted; credited = tokens given back; '
'near_limit = admitted calls that left less than 20% of capacity; contended = sharded calls that passed over or waited for a locked shard. '
'A rate_limit_all refused as a whole counts only its refused requests. '
'name is distinct per row and always converts to UTF-8: in a database that is not UTF8, characters without a UTF-8 equivalent show as \xNN and \ as \\; '
'a name longer than 256 bytes shows cut, followed by ...[<length> bytes #<hash>]. '
'Not transactional (a decision is counted when made). Needs shared_preload_libraries = ''rate_limiter'' (55000 otherwise); '
'at most rate_limiter.stats_max names of all databases (see rate_limiter.stats_info).';

CREATE FUNCTION rate_limiter._stats_info()
RETURNS TABLE (evicted bigint, uncounted bigint, since timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'stats_info_wrapper';

COMMENT ON FUNCTION rate_limiter._stats_info() IS
'The row of the view rate_limiter.stats_info. Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

CREATE VIEW rate_limiter.stats_info AS SELECT * FROM rate_limiter._stats_info();

COMMENT ON VIEW rate_limiter.stats_info IS
'One row about rate_limiter.stats for the whole server (as pg_stat_statements_info): evicted = names whose counters were evicted to make room '
'for another name (past rate_limiter.stats_max: names without a definition first, least used first, and no database beyond its share of the room); '
'uncounted = consuming decisions not counted because their name found no room (a name without a definition never evicts a defined one); '
'since = when these started (server start). Needs shared_preload_libraries = ''rate_limiter'' (55000 otherwise).';

COMMENT ON FUNCTION rate_limiter.stats_reset(text) IS
'Zeroes the counters of one row of rate_limiter.stats and sets its stats_reset to now: the row whose name is name as the view shows it, '
'else the row of the limit named name (NULL: every row of this database). '
'Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

-- The new objects: nobody but their owner holds a privilege on them,
-- whatever ALTER DEFAULT PRIVILEGES handed out when they were created.
DO $revoke$
DECLARE
    grantee_name name;
BEGIN
    REVOKE ALL ON FUNCTION rate_limiter._stats_info() FROM PUBLIC;
    REVOKE ALL ON rate_limiter.stats_info FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN ('rate_limiter._stats_info()'::pg_catalog.regprocedure)
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c
            WHERE c.oid IN ('rate_limiter.stats_info'::pg_catalog.regclass)
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter._stats_info() FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.stats_info FROM %I', grantee_name);
    END LOOP;
END
$revoke$;

GRANT EXECUTE ON FUNCTION rate_limiter._stats_info() TO @extowner@ WITH GRANT OPTION;
GRANT SELECT ON rate_limiter.stats_info TO @extowner@ WITH GRANT OPTION;
