-- Concurrency limits (docs/concurrency.md): what their slots hold, read
-- without a lock (status()) and cleaned up (prune() of the timed leases).
-- PL/pgSQL in both editions: scripts/portable.sh takes this whole file;
-- the slots themselves are sql/concurrency.sql's.

-- Whether transaction id xid (a row's xmin or xmax, 32 bits; 0: none) is
-- still running, given the newest full transaction id: its full id has
-- the newest one's epoch, or the one before when its low 32 bits are past
-- the newest's. (A row locked by more than one transaction names a
-- multixact, not a transaction: pg_xact_status fails or answers for
-- another id, and the row counts as held.)
CREATE FUNCTION rate_limiter._running(xid bigint, newest bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $running$
DECLARE
    full_id bigint := (newest & ~4294967295::bigint) | xid;
BEGIN
    IF xid = 0 THEN
        RETURN false;
    END IF;
    IF full_id > newest THEN
        full_id := full_id - 4294967296;
    END IF;
    RETURN pg_catalog.pg_xact_status(full_id::text::xid8) = 'in progress';
EXCEPTION WHEN OTHERS THEN
    RETURN true;
END
$running$;

-- Whether a state row whose xmin and xmax are these (32 bits each) is
-- held by a transaction still running on this node: the one that locked
-- it, or the one that inserted it.
CREATE FUNCTION rate_limiter._held_by_running(xmin bigint, xmax bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $held_by_running$
DECLARE
    newest bigint := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
BEGIN
    RETURN rate_limiter._running(xmax, newest) OR rate_limiter._running(xmin, newest);
END
$held_by_running$;

-- The rows of the slots of (name, key) below most, without a lock, and
-- whether each is held by a transaction still running (_held_by_running,
-- evaluated beside the row, where its lockers' transaction ids mean
-- something: the one that locked the row (xmax), or the one that
-- inserted it (xmin: the caller's own insert, which it sees; another's it
-- does not see at all)). On a distributed install each statement names
-- the slots' distribution value: one for a keyed limit's slots, one per
-- slot for a global limit's (spread over the nodes).
CREATE FUNCTION rate_limiter._slot_rows(name text, key text, most int4)
RETURNS TABLE (shard int2, value float8, ts timestamptz, locked boolean)
LANGUAGE plpgsql VOLATILE
AS $slot_rows$
DECLARE
    d rate_limiter.rate_limits.dkey%TYPE;
    candidate int4;
BEGIN
    IF NOT rate_limiter._slots_elsewhere() THEN
        RETURN QUERY
            SELECT r.shard, r.value, r.ts,
                   rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
            FROM rate_limiter.rate_limits AS r
            WHERE _slot_rows.key IS NULL AND r.name = _slot_rows.name AND r.key IS NULL AND r.shard < most
            UNION ALL
            SELECT r.shard, r.value, r.ts,
                   rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
            FROM rate_limiter.rate_limits AS r
            WHERE r.name = _slot_rows.name AND r.key = _slot_rows.key AND r.shard < most;
    ELSIF key IS NOT NULL THEN
        d := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(d));
        RETURN QUERY
            SELECT r.shard, r.value, r.ts,
                   rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
            FROM rate_limiter.rate_limits AS r
            WHERE r.name = _slot_rows.name AND r.key = _slot_rows.key AND r.dkey = d AND r.shard < most;
    ELSE
        FOR candidate IN 0 .. most - 1 LOOP
            d := rate_limiter._slot_dkey(name, NULL, candidate, pg_catalog.pg_typeof(d));
            RETURN QUERY
                SELECT r.shard, r.value, r.ts,
                       rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
                FROM rate_limiter.rate_limits AS r
                WHERE r.name = _slot_rows.name AND r.key IS NULL AND r.shard = candidate AND r.dkey = d;
        END LOOP;
    END IF;
END
$slot_rows$;

-- status() of a concurrency limit (both editions' status() come here for
-- kind 'concurrency'): value = the slots free now (max - in flight),
-- capacity = max, full_at = when every slot is free if nothing more is
-- taken (now when none is held; the last timed lease's end when only
-- timed leases hold; NULL when a transaction lease holds one: its end is
-- not known), shards 1. It takes no lock: a transaction lease is seen as
-- a row whose locker (xmax) is still running, or, for a slot whose row is
-- being inserted, its _slot_lock in pg_locks. (A row locked by more than
-- one transaction names a multixact, not a transaction: counted as held.)
CREATE FUNCTION rate_limiter._concurrency_status(name text, key text, config rate_limiter.config)
RETURNS TABLE (value float8, capacity float8, full_at timestamptz, shards int4)
LANGUAGE plpgsql VOLATILE ROWS 1
AS $concurrency_status$
DECLARE
    limited record;
    at timestamptz := rate_limiter._clock();
    slot record;
    held int4 := 0;
    by_transactions boolean := false;
    last_end timestamptz;
    existing int4[] := '{}';
    slot_dkey rate_limiter.rate_limits.dkey%TYPE;
    candidate int4;
    inserting int4;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    limited := rate_limiter._concurrency_limit(name, config);
    FOR slot IN SELECT * FROM rate_limiter._slot_rows(name, key, limited.max) LOOP
        existing := existing || slot.shard::int4;
        IF slot.value > 0 AND slot.ts > at THEN
            held := held + 1;
            last_end := greatest(last_end, slot.ts);
        ELSIF slot.locked THEN
            held := held + 1;
            by_transactions := true;
        END IF;
    END LOOP;
    -- Slots without a row that another transaction is inserting (its
    -- _slot_lock held: on a distributed install, on the node of the
    -- slot's distribution value, asked there).
    IF rate_limiter._slots_elsewhere() THEN
        IF pg_catalog.cardinality(existing) < limited.max THEN
            inserting := 0;
            IF key IS NOT NULL THEN
                -- (A keyed limit's slots share one value: one call.)
                slot_dkey := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(slot_dkey));
                inserting := rate_limiter._slot_locks_held_where(slot_dkey, ARRAY(
                    SELECT rate_limiter._slot_lock(name, key, s) FROM pg_catalog.generate_series(0, limited.max - 1) AS s
                    WHERE s <> ALL (existing)));
            ELSE
                FOR candidate IN SELECT s FROM pg_catalog.generate_series(0, limited.max - 1) AS s
                                 WHERE s <> ALL (existing) LOOP
                    slot_dkey := rate_limiter._slot_dkey(name, NULL, candidate, pg_catalog.pg_typeof(slot_dkey));
                    inserting := inserting + rate_limiter._slot_locks_held_where(slot_dkey,
                        ARRAY[rate_limiter._slot_lock(name, NULL, candidate)]);
                END LOOP;
            END IF;
            held := held + inserting;
            by_transactions := by_transactions OR inserting > 0;
        END IF;
    ELSE
        SELECT held + count(*), by_transactions OR count(*) > 0 INTO held, by_transactions
        FROM pg_catalog.generate_series(0, limited.max - 1) AS s, pg_catalog.pg_locks AS l
        WHERE pg_catalog.cardinality(existing) < limited.max AND s <> ALL (existing) AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
          AND l.classid::text::bigint = (rate_limiter._slot_lock(_concurrency_status.name, _concurrency_status.key, s) >> 32) & 4294967295
          AND l.objid::text::bigint = rate_limiter._slot_lock(_concurrency_status.name, _concurrency_status.key, s) & 4294967295;
    END IF;
    value := limited.max - least(held, limited.max);
    capacity := limited.max;
    full_at := CASE WHEN by_transactions THEN NULL ELSE coalesce(last_end, at) END;
    shards := 1;
    RETURN NEXT;
END
$concurrency_status$;

-- prune() of rate_limiter.leases (both editions' prune() call it): the
-- rows of leases that hold no slot any more (released rows are deleted by
-- release(); these ended, or their slot's row was pruned). How many.
CREATE FUNCTION rate_limiter._prune_leases()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $prune_leases$
DECLARE
    at timestamptz := rate_limiter._clock();
    gone bigint;
BEGIN
    IF rate_limiter._slots_elsewhere() THEN
        -- Distributed: the leases are a reference table, which Citus does
        -- not delete from by a subquery over the distributed state; the
        -- leases that still hold their slot are read first.
        DELETE FROM rate_limiter.leases AS l
        WHERE l.id <> ALL (coalesce((
            SELECT pg_catalog.array_agg(h.id)
            FROM rate_limiter.leases AS h
            JOIN rate_limiter.rate_limits AS r
              ON r.name = h.name AND r.shard = h.slot AND (r.key = h.key OR (r.key IS NULL AND h.key IS NULL))
            WHERE r.value > 0 AND r.ts > at), '{}'));
        GET DIAGNOSTICS gone = ROW_COUNT;
        RETURN gone;
    END IF;
    DELETE FROM rate_limiter.leases AS l
    WHERE NOT EXISTS (SELECT FROM rate_limiter.rate_limits AS r
                      WHERE r.name = l.name AND r.key = l.key AND r.shard = l.slot AND r.value > 0 AND r.ts > at)
      AND NOT (l.key IS NULL AND EXISTS (SELECT FROM rate_limiter.rate_limits AS r
                                         WHERE r.name = l.name AND r.key IS NULL AND r.shard = l.slot
                                           AND r.value > 0 AND r.ts > at));
    GET DIAGNOSTICS gone = ROW_COUNT;
    RETURN gone;
END
$prune_leases$;
