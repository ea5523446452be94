-- Timed leases of concurrency limits (docs/concurrency.md): release()
-- and renew(), and the write of a slot's lease end. PL/pgSQL in both
-- editions: scripts/portable.sh takes this whole file; acquire() is
-- sql/concurrency.sql's.

-- The lease id of (name) and its slot row, locked: what release() and
-- renew() act on. NULL when lease_id is no lease of name.
CREATE FUNCTION rate_limiter._lease(name text, lease_id bigint)
RETURNS rate_limiter.leases
LANGUAGE plpgsql VOLATILE
AS $lease$
DECLARE
    held rate_limiter.leases;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF lease_id IS NULL THEN
        RAISE EXCEPTION 'lease_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO held FROM rate_limiter.leases AS l
    WHERE l.id = lease_id AND l.name = _lease.name
    FOR UPDATE;
    RETURN held;
END
$lease$;

-- Writes value and ts (until) into the row of slot (name, key, slot),
-- only if a timed lease holds it at held_at (NULL: whatever it holds):
-- whether it did. On a distributed install the statement names the
-- slot's distribution value (it runs on the node holding the row).
CREATE FUNCTION rate_limiter._write_slot(name text, key text, slot int4, value float8, until timestamptz,
                                         held_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $write_slot$
DECLARE
    d rate_limiter.rate_limits.dkey%TYPE;
BEGIN
    IF rate_limiter._slots_elsewhere() THEN
        d := rate_limiter._slot_dkey(name, key, slot, pg_catalog.pg_typeof(d));
        IF key IS NULL THEN
            UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
            WHERE r.name = _write_slot.name AND r.key IS NULL AND r.shard = slot AND r.dkey = d
              AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
        ELSE
            UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
            WHERE r.name = _write_slot.name AND r.key = _write_slot.key AND r.shard = slot AND r.dkey = d
              AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
        END IF;
    ELSIF key IS NULL THEN
        UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
        WHERE r.name = _write_slot.name AND r.key IS NULL AND r.shard = slot
          AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
    ELSE
        UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
        WHERE r.name = _write_slot.name AND r.key = _write_slot.key AND r.shard = slot
          AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
    END IF;
    RETURN FOUND;
END
$write_slot$;

-- Sets the end of the timed lease held of slot (held) to until, if it
-- still holds it at at: whether it did.
CREATE FUNCTION rate_limiter._set_lease_end(held rate_limiter.leases, at timestamptz, until timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT rate_limiter._write_slot(held.name, held.key, held.slot, CASE WHEN until > at THEN 1 ELSE 0 END, until, at)
$$;

CREATE FUNCTION rate_limiter.release(name text, lease_id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $release$
DECLARE
    held rate_limiter.leases := rate_limiter._lease(name, lease_id);
    at timestamptz;
    freed boolean;
BEGIN
    IF held.id IS NULL THEN
        RETURN false;
    END IF;
    at := rate_limiter._clock();
    freed := rate_limiter._set_lease_end(held, at, at);
    DELETE FROM rate_limiter.leases AS l WHERE l.id = held.id;
    RETURN freed;
END
$release$;

COMMENT ON FUNCTION rate_limiter.release(text, bigint) IS
'Frees the slot of timed lease lease_id of concurrency limit name (from acquire(lease => ...)) at once. '
'Returns true if the lease held its slot; false when it had expired, was released already, or is not a lease of name (nothing is changed then). '
'Errors: 22004 NULL name/lease_id; 25006 in a read-only transaction.';

CREATE FUNCTION rate_limiter.renew(name text, lease_id bigint, lease interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $renew$
DECLARE
    held rate_limiter.leases;
    at timestamptz;
BEGIN
    IF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be greater than zero, got %', lease USING ERRCODE = '22023';
    END IF;
    held := rate_limiter._lease(name, lease_id);
    IF held.id IS NULL THEN
        RETURN false;
    END IF;
    at := rate_limiter._clock();
    IF NOT rate_limiter._set_lease_end(held, at, at + coalesce(lease, held.duration)) THEN
        RETURN false;
    END IF;
    IF lease IS NOT NULL AND lease <> held.duration THEN
        UPDATE rate_limiter.leases AS l SET duration = renew.lease WHERE l.id = held.id;
    END IF;
    RETURN true;
END
$renew$;

COMMENT ON FUNCTION rate_limiter.renew(text, bigint, interval) IS
'Extends timed lease lease_id of concurrency limit name to now + lease (NULL: the lease it was taken or last renewed with), while it still holds its slot. '
'Returns true if it did; false when the lease had expired, was released, or is not a lease of name (nothing is changed then). '
'Errors: 22004 NULL name/lease_id; 22023 lease not greater than zero; 25006 in a read-only transaction.';
