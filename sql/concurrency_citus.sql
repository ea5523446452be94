-- Concurrency limits on a distributed install (docs/citus.md, "Special
-- cases"; docs/citus-design.md, section 17): where a slot's row lives
-- and the advisory lock of a slot being inserted, taken on that row's
-- node. Native only (the portable edition is never distributed): the
-- shared PL/pgSQL (sql/concurrency.sql, concurrency_status.sql and
-- concurrency_leases.sql) calls these only when _slots_elsewhere().

-- The distribution value of slot (name, key, slot) on a distributed
-- install, as text of the column's type (typ): a keyed limit's slots
-- have the key's (the key read as that type: they live beside the key's
-- state), a global limit's slot n that of name/n, as distribute()
-- computes a global limit's shard n's (src/citus/value.rs).
CREATE FUNCTION rate_limiter._slot_dkey(name text, key text, slot int4, typ regtype)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN key IS NOT NULL THEN key
                WHEN typ = 'pg_catalog.uuid'::pg_catalog.regtype THEN pg_catalog.md5(name || '/' || slot)
                WHEN typ = 'pg_catalog.int8'::pg_catalog.regtype THEN pg_catalog.hashtextextended(name || '/' || slot, 0)::text
                WHEN typ = 'pg_catalog.int4'::pg_catalog.regtype THEN pg_catalog.hashtext(name || '/' || slot)::text
                ELSE name || '/' || slot END
$$;

-- How many of these _slot_locks another transaction of this node holds
-- (slots whose rows it is inserting, which status() counts as held).
CREATE FUNCTION rate_limiter._slot_locks_held(locks bigint[])
RETURNS int4
LANGUAGE sql STABLE
AS $$
    SELECT count(*)::int4 FROM pg_catalog.unnest(locks) AS lock, pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_catalog.pg_backend_pid()
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
      AND l.classid::text::bigint = (lock >> 32) & 4294967295
      AND l.objid::text::bigint = lock & 4294967295
$$;

-- On a distributed install, pg_try_advisory_xact_lock(lock) taken, and
-- _slot_locks_held(locks) counted, on the node holding the rows of
-- distribution value dkey (distribute() makes Citus delegate these calls
-- there, in the caller's transaction; plpgsql, so that they are never
-- inlined): the _slot_lock of a slot being inserted is then one lock
-- whichever node the callers are on, and a caller passes over a slot
-- another is inserting instead of waiting at the unique index for its
-- transaction. One of each for each type of the column dkey.
CREATE FUNCTION rate_limiter._slot_lock_on(dkey text, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey text, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

CREATE FUNCTION rate_limiter._slot_lock_on(dkey bigint, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey bigint, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

CREATE FUNCTION rate_limiter._slot_lock_on(dkey integer, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey integer, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

CREATE FUNCTION rate_limiter._slot_lock_on(dkey uuid, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey uuid, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

-- _slot_lock_on(dkey, lock) and _slot_locks_held_on(dkey, locks) called
-- so that Citus delegates them: in a statement of its own whose
-- distribution argument is a constant (a PL/pgSQL variable is a
-- parameter, which Citus does not delegate by), the function in FROM.
CREATE FUNCTION rate_limiter._slot_lock_where(dkey anyelement, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $slot_lock_where$
DECLARE
    taken boolean;
BEGIN
    EXECUTE pg_catalog.format('SELECT l FROM rate_limiter._slot_lock_on(%L::%s, %s) AS l',
                              dkey, pg_catalog.pg_typeof(dkey), lock)
    INTO taken;
    RETURN taken;
END
$slot_lock_where$;

CREATE FUNCTION rate_limiter._slot_locks_held_where(dkey anyelement, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $slot_locks_held_where$
DECLARE
    held int4;
BEGIN
    EXECUTE pg_catalog.format('SELECT h FROM rate_limiter._slot_locks_held_on(%L::%s, %L::bigint[]) AS h',
                              dkey, pg_catalog.pg_typeof(dkey), locks)
    INTO held;
    RETURN held;
END
$slot_locks_held_where$;

-- _take_slot() of a global limit on a distributed install: its slots'
-- rows are spread over the nodes (each its own distribution value), so
-- each slot is tried by statements of its own, in slot order: its row
-- locked if free (SKIP LOCKED), else inserted if it has none, under its
-- _slot_lock taken on the row's node (_slot_lock_where).
CREATE FUNCTION rate_limiter._take_spread_slot(name text, most int4, at timestamptz, own int4[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $take_spread_slot$
DECLARE
    d rate_limiter.rate_limits.dkey%TYPE;
    candidate int4;
    taken int4;
BEGIN
    FOR candidate IN SELECT s FROM pg_catalog.generate_series(0, most - 1) AS s WHERE s <> ALL (own) LOOP
        d := rate_limiter._slot_dkey(name, NULL, candidate, pg_catalog.pg_typeof(d));
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_spread_slot.name AND r.key IS NULL AND r.shard = candidate AND r.dkey = d
          AND NOT (r.value > 0 AND r.ts > at)
        FOR UPDATE SKIP LOCKED;
        IF taken IS NOT NULL THEN
            RETURN taken;
        END IF;
        IF NOT EXISTS (SELECT FROM rate_limiter.rate_limits AS r
                       WHERE r.name = _take_spread_slot.name AND r.key IS NULL AND r.shard = candidate AND r.dkey = d)
           AND rate_limiter._slot_lock_where(d, rate_limiter._slot_lock(name, NULL, candidate)) THEN
            INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts, dkey)
            VALUES (name, NULL, candidate::int2, 0, at, d)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                RETURN candidate;
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$take_spread_slot$;
