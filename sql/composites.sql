-- Composites (docs/composites.md): define_all(), a name made of defined
-- limits. PL/pgSQL in both editions (scripts/portable.sh takes it from
-- here); the calls of a composite's name are src/api/composite.rs and
-- portable/sql/56_composite.sql.

CREATE FUNCTION rate_limiter.define_all(name text, members text[], enforce boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define_all$
DECLARE
    member text;
    position int := 0;
    most int := coalesce(nullif(pg_catalog.current_setting('rate_limiter.max_requests', true), '')::int, 1000);
    local_only boolean := false;
BEGIN
    IF name IS NULL OR members IS NULL OR enforce IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN name IS NULL THEN 'name' WHEN members IS NULL THEN 'members' ELSE 'enforce' END
            USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.cardinality(members) = 0 OR pg_catalog.array_ndims(members) <> 1 THEN
        RAISE EXCEPTION 'members must be a one-dimensional array of at least one limit name' USING ERRCODE = '22023';
    END IF;
    -- A call of the composite is one rate_limit_all() of its members.
    IF pg_catalog.cardinality(members) > most THEN
        RAISE EXCEPTION 'a composite may have at most % members (rate_limiter.max_requests), not %',
            most, pg_catalog.cardinality(members)
            USING ERRCODE = '54000';
    END IF;
    FOREACH member IN ARRAY members LOOP
        position := position + 1;
        IF member IS NULL THEN
            RAISE EXCEPTION 'members[%] must not be NULL', position USING ERRCODE = '22004';
        ELSIF member = name THEN
            RAISE EXCEPTION 'composite "%" cannot be a member of itself', name USING ERRCODE = '22023';
        ELSIF member = ANY (members[1:position - 1]) THEN
            RAISE EXCEPTION 'members[%] names "%" a second time', position, member USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute define_all() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- On a Citus cluster every node must read the composites: an install
    -- distributed before they existed has them in a local table until
    -- distribute() runs again (docs/citus.md).
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        -- (A statement of its own: without Citus the catalog is not there.)
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                WHERE p.logicalrelid = ''rate_limiter.rate_limits''::pg_catalog.regclass)
                    AND NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                    WHERE p.logicalrelid = ''rate_limiter.composites''::pg_catalog.regclass
                                      AND p.partmethod = ''n'')'
            INTO local_only;
    END IF;
    IF local_only THEN
        RAISE EXCEPTION 'rate_limiter.composites is not a reference table of this cluster: a composite written now would reach only this node''s calls'
            USING ERRCODE = '55000',
                  HINT = 'Call SELECT rate_limiter.distribute(); on the coordinator once more (after ALTER EXTENSION rate_limiter UPDATE it makes the composites a reference table), then retry.';
    END IF;
    -- define_all() and undefine() take this lock first, so that neither
    -- misses what the other committed: an undefine() of a member waits,
    -- then sees the composite (2BP01); a define_all() after an undefine()
    -- of a member sees it gone (42704). (No lock on the members' rows: a
    -- row lock would leave its locker in the row, which the portable
    -- edition's snapshot check would read as a change.) Calls are not
    -- blocked: they only read the table.
    LOCK TABLE rate_limiter.composites IN SHARE ROW EXCLUSIVE MODE;
    -- One namespace: a name is a definition or a composite.
    IF EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = define_all.name) THEN
        RAISE EXCEPTION 'rate limit "%" is defined: a composite needs a name of its own', name
            USING ERRCODE = '22023',
                  HINT = 'Choose another name, or undefine() the limit first.';
    END IF;
    FOREACH member IN ARRAY members LOOP
        IF NOT EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = member) THEN
            IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE c.name = member) THEN
                RAISE EXCEPTION 'member "%" is a composite: a composite is made of defined limits', member
                    USING ERRCODE = '22023',
                          HINT = 'Name that composite''s members instead.';
            END IF;
            RAISE EXCEPTION 'rate limit "%" is not defined', member
                USING ERRCODE = '42704',
                      HINT = 'Define every member with rate_limiter.define() first.';
        END IF;
        -- (A concurrency limit counts what is in flight, not tokens:
        -- docs/concurrency.md.)
        IF EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = member AND d.kind::text = 'concurrency') THEN
            RAISE EXCEPTION 'member "%" is a concurrency limit: a composite is made of rate limits', member
                USING ERRCODE = '22023',
                      HINT = 'Call rate_limiter.acquire() for the concurrency limit in the same transaction.';
        END IF;
    END LOOP;
    INSERT INTO rate_limiter.composites AS c (name, members, enforce)
    VALUES (define_all.name, define_all.members, define_all.enforce)
    ON CONFLICT ON CONSTRAINT composites_pkey DO UPDATE SET members = excluded.members, enforce = excluded.enforce;
END
$define_all$;

COMMENT ON FUNCTION rate_limiter.define_all(text, text[], boolean) IS
'Creates or replaces the composite limit name, made of the defined limits members: a call of name (rate_limit, rate_check, rate_wait, guard, postgrest_limit) consumes the same key and count from every member, all or nothing; '
'remaining is the least of the members'', retry_after the greatest of the refusing members''; status answers for the member that is tightest, http_headers one policy per member, rate_credit and rate_reset act on every member. '
'enforce => false is shadow mode: a refusal is answered as admitted and consumes nothing. '
'Errors: 22004 NULL name/members/enforce/member; 22023 no members, a member named twice, the name itself, a member that is a composite or a concurrency limit, a name that is a definition; 42704 a member that is not defined; 54000 more members than rate_limiter.max_requests; 25006 in a read-only transaction.';

CREATE TRIGGER composites_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.composites
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();
