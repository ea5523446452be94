-- Concurrency limits (docs/concurrency.md): at most max operations in
-- flight per (name, key). PL/pgSQL in both editions: scripts/portable.sh
-- takes every function below the line "Both editions" from here, and
-- concurrency_status.sql, concurrency_guard.sql and
-- concurrency_leases.sql whole (concurrency_citus.sql is native only). The
-- slots of (name, key) are its state rows, shard = slot, 0 .. max - 1:
-- value 0 free (ts: when it was last written), value 1 held by a timed
-- lease until ts. A transaction lease is a row lock on a free slot's row,
-- taken with SKIP LOCKED: nothing is written once the row exists, and the
-- slot is free again when the transaction ends, however it ends.

-- Native only: what the portable edition has in portable/sql/ ------------

-- The clock of rate_limiter.now_override, else clock_timestamp()
-- (src/clock.rs; portable: _now()).
CREATE FUNCTION rate_limiter._clock()
RETURNS timestamptz
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'clock_wrapper';

-- A name or key as error messages show it (src/names.rs).
CREATE FUNCTION rate_limiter._for_message(value text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT
AS 'MODULE_PATHNAME', 'for_message_wrapper';

-- Counts a decision of acquire() in rate_limiter.stats (src/api/
-- concurrency.rs; portable: nothing): 0 admitted, 1 refused, 2 refused in
-- shadow mode.
CREATE FUNCTION rate_limiter._stats_count(name text, verdict int4)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'stats_count_wrapper';

-- Whether the state table is distributed by Citus (src/api/
-- concurrency.rs; portable: false): the slots of a key are then read and
-- locked with its distribution value, which routes each statement to the
-- node holding them (docs/citus.md, "Concurrency limits").
CREATE FUNCTION rate_limiter._slots_elsewhere()
RETURNS boolean
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'slots_elsewhere_wrapper';

-- acquire() (src/api/acquire.rs): a free slot of a defined limit taken in
-- one statement, anything else by _acquire() below.
CREATE FUNCTION rate_limiter.acquire(
    name   text,
    key    text                DEFAULT NULL,
    wait   interval            DEFAULT '0',
    lease  interval            DEFAULT NULL,
    throws boolean             DEFAULT false,
    config rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, lease_id bigint, in_flight int4, retry_after interval)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'acquire_wrapper';

-- The SQLSTATE of a refusal with throws => true (rate_limiter.sqlstate,
-- checked when SET; _clock() has loaded the library that defines it).
CREATE FUNCTION rate_limiter._sqlstate()
RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.current_setting('rate_limiter.sqlstate') $$;

-- Both editions ---------------------------------------------------------

-- The max and lease of a concurrency config (22004 for a NULL max, 22023
-- for anything else out of place).
CREATE FUNCTION rate_limiter._concurrency_values(config rate_limiter.config, OUT max int4, OUT lease interval)
LANGUAGE plpgsql IMMUTABLE
AS $concurrency_values$
BEGIN
    IF config.kind IS NULL THEN
        RAISE EXCEPTION 'kind must not be NULL' USING ERRCODE = '22004';
    ELSIF config.kind::text <> 'concurrency' THEN
        RAISE EXCEPTION 'a % config is a rate limit: acquire() takes a concurrency limit', config.kind
            USING ERRCODE = '22023',
                  HINT = 'Build it with rate_limiter.concurrency(max), or call rate_limiter.rate_limit() for a rate limit.';
    ELSIF config.rate IS NULL THEN
        RAISE EXCEPTION 'max must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT (config.rate >= 1 AND config.rate <= 32767 AND config.rate = pg_catalog.trunc(config.rate)) THEN
        RAISE EXCEPTION 'max must be a whole number from 1 to 32767, got %', config.rate
            USING ERRCODE = '22023',
                  HINT = 'max is the number of slots, and a slot is a state row numbered by the smallint shard column.';
    ELSIF config.period IS NOT NULL AND config.period <= interval '0' THEN
        RAISE EXCEPTION 'lease must be greater than zero, got %', config.period USING ERRCODE = '22023';
    ELSIF pg_catalog.num_nonnulls(config.capacity, config.max_reserved, config.start, config.block_for,
                                  config.max_block, config.forget_after, config.time_zone) > 0
          OR coalesce(config.shards, 1) <> 1 THEN
        RAISE EXCEPTION 'a concurrency limit has only max and lease'
            USING ERRCODE = '22023',
                  HINT = 'Build it with rate_limiter.concurrency(max, lease).';
    END IF;
    max := config.rate::int4;
    lease := config.period;
END
$concurrency_values$;

CREATE FUNCTION rate_limiter.concurrency(max int4, lease interval DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $concurrency$
DECLARE
    made rate_limiter.config := ROW('concurrency', max, lease, NULL, NULL, 1, NULL,
                                      NULL, NULL, NULL, NULL)::rate_limiter.config;
BEGIN
    PERFORM rate_limiter._concurrency_values(made);
    RETURN made;
END
$concurrency$;

COMMENT ON FUNCTION rate_limiter.concurrency(int4, interval) IS
'A concurrency limit''s config (kind ''concurrency''): at most max (1 to 32767) operations in flight per key, for define() or acquire(config => ...). '
'lease: the default of acquire()''s lease (NULL: transaction leases). Errors: 22004 NULL max; 22023 max out of range, lease not greater than zero.';

-- define() of a concurrency config (both editions' define() come here for
-- kind 'concurrency'). The slots of a limit that stays a concurrency
-- limit are kept, leases in them too; a rate limit's state rows are
-- deleted (their numbers are tokens, not slots), as define() deletes them
-- when a kind changes.
CREATE FUNCTION rate_limiter._define_concurrency(name text, config rate_limiter.config, enforce boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $define_concurrency$
DECLARE
    checked record;
    previous text;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF enforce IS NULL THEN
        RAISE EXCEPTION 'enforce must not be NULL' USING ERRCODE = '22004';
    END IF;
    checked := rate_limiter._concurrency_values(config);
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute define() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE c.name = _define_concurrency.name) THEN
        RAISE EXCEPTION '"%" is a composite (define_all): a limit needs a name of its own', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'Choose another name, or undefine() the composite first.';
    END IF;
    IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE _define_concurrency.name = ANY (c.members)) THEN
        RAISE EXCEPTION 'rate limit "%" is a member of a composite: it cannot become a concurrency limit', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'undefine() the composite first.';
    END IF;
    SELECT d.kind::text INTO previous FROM rate_limiter.definitions AS d
    WHERE d.name = _define_concurrency.name FOR UPDATE;
    IF previous IS DISTINCT FROM 'concurrency' THEN
        DELETE FROM rate_limiter.rate_limits AS r WHERE r.name = _define_concurrency.name;
    END IF;
    INSERT INTO rate_limiter.definitions AS d (name, kind, rate, period, shards, enforce)
    VALUES (name, config.kind, checked.max, coalesce(checked.lease, interval '0'), 1, enforce)
    ON CONFLICT ON CONSTRAINT definitions_pkey DO UPDATE SET
        kind = excluded.kind, rate = excluded.rate, period = excluded.period, capacity = NULL,
        max_reserved = NULL, shards = 1, start = NULL, enforce = excluded.enforce, block_for = NULL,
        max_block = NULL, forget_after = NULL, time_zone = NULL;
END
$define_concurrency$;

-- The concurrency limit a call of (name, config) uses: max, lease (the
-- default of the call's), enforce. 42704 no definition and no config;
-- 22023 a rate limit's name; 42501 a config for a defined name.
CREATE FUNCTION rate_limiter._concurrency_limit(name text, config rate_limiter.config,
                                                OUT max int4, OUT lease interval, OUT enforce boolean)
LANGUAGE plpgsql STABLE
AS $concurrency_limit$
DECLARE
    defined rate_limiter.definitions;
    checked record;
BEGIN
    SELECT * INTO defined FROM rate_limiter.definitions AS d WHERE d.name = _concurrency_limit.name;
    IF pg_catalog.num_nulls(config) = 0 THEN
        IF defined.name IS NOT NULL THEN
            RAISE EXCEPTION 'permission denied to override the definition of limit "%" with an inline config',
                rate_limiter._for_message(name)
                USING ERRCODE = '42501',
                      HINT = 'The limit is defined: call it without config => ..., or change the definition with rate_limiter.define().';
        END IF;
        checked := rate_limiter._concurrency_values(config);
        max := checked.max;
        lease := checked.lease;
        enforce := true;
        RETURN;
    END IF;
    IF defined.name IS NULL THEN
        RAISE EXCEPTION 'concurrency limit "%" is not defined', rate_limiter._for_message(name)
            USING ERRCODE = '42704',
                  HINT = 'Define it with rate_limiter.define(name, rate_limiter.concurrency(max)), or pass config => rate_limiter.concurrency(...).';
    ELSIF defined.kind::text <> 'concurrency' THEN
        RAISE EXCEPTION '"%" is a rate limit, not a concurrency limit', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'Call rate_limiter.rate_limit() for a rate limit.';
    END IF;
    max := defined.rate::int4;
    lease := nullif(defined.period, interval '0');
    enforce := defined.enforce;
END
$concurrency_limit$;

-- The advisory lock that a caller inserting the row of slot (name, key,
-- slot) holds until its transaction ends, so that another caller passes
-- over that slot instead of waiting for the insert (an insert of the same
-- unique key would wait): the SKIP LOCKED of a row that does not exist yet.
CREATE FUNCTION rate_limiter._slot_lock(name text, key text, slot int4)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.hashtextextended(
        pg_catalog.length(name) || ':' || name || ':' || coalesce(pg_catalog.length(key) || ':' || key, '-'),
        slot)
$$;

-- The slots of (name, key) that this transaction holds with transaction
-- leases (a row lock of its own would not be passed over by SKIP LOCKED),
-- kept in a transaction-local setting: a subtransaction rolled back
-- forgets its own, as it releases their row locks.
CREATE FUNCTION rate_limiter._held_slots(name text, key text)
RETURNS int4[]
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.array_agg(held.slot)
    FROM pg_catalog.jsonb_to_recordset(
             coalesce(nullif(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), ''), '[]')::jsonb)
         AS held(n text, k text, slot int4)
    WHERE held.n = name AND held.k IS NOT DISTINCT FROM key
$$;

-- Takes a free slot of (name, key) for this transaction, without waiting:
-- the slot number, or NULL when every slot is held. A row of a free slot
-- is locked (SKIP LOCKED: a slot another transaction holds is passed
-- over; at READ COMMITTED the lock rechecks the newest version, so a
-- timed lease committed meanwhile is seen); else a slot without a row is
-- inserted, under its _slot_lock. A free slot is value = 0, or a timed
-- lease that expired before at. On a distributed install each statement
-- names the key's distribution value and runs on the node holding the
-- key's slots (a global limit's: _take_spread_slot), and _slot_lock is
-- taken there (_slot_lock_where).
CREATE FUNCTION rate_limiter._take_slot(name text, key text, most int4, at timestamptz)
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $take_slot$
DECLARE
    taken int4;
    own int4[] := CASE WHEN coalesce(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), '') = ''
                       THEN '{}' ELSE coalesce(rate_limiter._held_slots(name, key), '{}') END;
    existing int4[];
    candidate int4;
    -- On a distributed install, the key's distribution value (the key,
    -- read as the column's type: text, bigint, integer or uuid), which
    -- routes each statement to the node holding the key's slots; NULL on
    -- one server.
    d rate_limiter.rate_limits.dkey%TYPE;
    inserting boolean;
BEGIN
    IF rate_limiter._slots_elsewhere() THEN
        IF key IS NULL THEN
            RETURN rate_limiter._take_spread_slot(name, most, at, own);
        END IF;
        d := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(d));
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.dkey = d AND r.shard < most
          AND NOT (r.value > 0 AND r.ts > at) AND r.shard <> ALL (own)
        ORDER BY r.shard LIMIT 1
        FOR UPDATE SKIP LOCKED;
    ELSIF key IS NULL THEN
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key IS NULL AND r.shard < most
          AND NOT (r.value > 0 AND r.ts > at) AND r.shard <> ALL (own)
        ORDER BY r.shard LIMIT 1
        FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.shard < most
          AND NOT (r.value > 0 AND r.ts > at) AND r.shard <> ALL (own)
        ORDER BY r.shard LIMIT 1
        FOR UPDATE SKIP LOCKED;
    END IF;
    IF taken IS NOT NULL THEN
        RETURN taken;
    END IF;
    IF d IS NOT NULL THEN
        SELECT pg_catalog.array_agg(r.shard) INTO existing FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.dkey = d AND r.shard < most;
    ELSIF key IS NULL THEN
        SELECT pg_catalog.array_agg(r.shard) INTO existing FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key IS NULL AND r.shard < most;
    ELSE
        SELECT pg_catalog.array_agg(r.shard) INTO existing FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.shard < most;
    END IF;
    IF coalesce(pg_catalog.cardinality(existing), 0) >= most THEN
        RETURN NULL;
    END IF;
    FOR candidate IN
        SELECT s FROM pg_catalog.generate_series(0, most - 1) AS s
        WHERE s <> ALL (coalesce(existing, '{}'))
    LOOP
        IF d IS NULL THEN
            inserting := pg_catalog.pg_try_advisory_xact_lock(rate_limiter._slot_lock(name, key, candidate));
        ELSE
            inserting := rate_limiter._slot_lock_where(d, rate_limiter._slot_lock(name, key, candidate));
        END IF;
        IF inserting THEN
            -- (DO NOTHING on the unique (name, key, shard), which is
            -- (name, key, shard, dkey) on a distributed install.)
            INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts, dkey)
            VALUES (name, key, candidate::int2, 0, at, d)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                RETURN candidate;
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$take_slot$;

-- The earliest end of a timed lease that holds a slot of (name, key) at
-- at; NULL when none does.
CREATE FUNCTION rate_limiter._earliest_expiry(name text, key text, most int4, at timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $earliest_expiry$
DECLARE
    -- (PL/pgSQL: Citus 13 cannot plan a SQL function's parameters on a
    -- distributed table.) A keyed limit's slots on a distributed install:
    -- read where they live.
    d rate_limiter.rate_limits.dkey%TYPE;
    earliest timestamptz;
BEGIN
    IF key IS NULL THEN
        SELECT pg_catalog.min(r.ts) INTO earliest FROM rate_limiter.rate_limits AS r
        WHERE r.name = _earliest_expiry.name AND r.key IS NULL AND r.shard < most
          AND r.value > 0 AND r.ts > at;
    ELSIF rate_limiter._slots_elsewhere() THEN
        d := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(d));
        SELECT pg_catalog.min(r.ts) INTO earliest FROM rate_limiter.rate_limits AS r
        WHERE r.name = _earliest_expiry.name AND r.key = _earliest_expiry.key AND r.dkey = d AND r.shard < most
          AND r.value > 0 AND r.ts > at;
    ELSE
        SELECT pg_catalog.min(r.ts) INTO earliest FROM rate_limiter.rate_limits AS r
        WHERE r.name = _earliest_expiry.name AND r.key = _earliest_expiry.key AND r.shard < most
          AND r.value > 0 AND r.ts > at;
    END IF;
    RETURN earliest;
END
$earliest_expiry$;

-- A new lease id: 63 random bits (gen_random_uuid, a strong random
-- source), never 0.
CREATE FUNCTION rate_limiter._lease_id()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT greatest(1, ('x' || pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 16))::bit(64)::bigint
                       & 9223372036854775807)
$$;

-- The texts of a refusal with throws => true (the native acquire raises
-- them itself: a SQLSTATE of rate_limiter.sqlstate does not pass through
-- its SPI call).
CREATE FUNCTION rate_limiter._concurrency_refusal(name text, key text, most int4, retry_after interval,
                                                  OUT message text, OUT detail text, OUT hint text)
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN key IS NULL
                THEN pg_catalog.format('concurrency limit "%s" is full (global limit)', rate_limiter._for_message(name))
                ELSE pg_catalog.format('concurrency limit "%s" is full for key "%s"', rate_limiter._for_message(name),
                                       rate_limiter._for_message(key)) END,
           pg_catalog.json_build_object('name', name, 'key', key, 'in_flight', most, 'max', most,
                                        'retry_after_ms', EXTRACT(epoch FROM retry_after) * 1000)::text,
           CASE WHEN retry_after IS NULL
                THEN 'Retry when one of the operations in flight ends (wait => ... waits for it).'
                ELSE 'Retry when one of the operations in flight ends, at the latest when the first lease ends.' END
$$;

-- acquire(): the native extension's takes a free slot of a defined limit
-- itself (src/api/acquire.rs) and calls this for everything else; the
-- portable edition's calls it (portable/sql/58_concurrency.sql).
CREATE FUNCTION rate_limiter._acquire(name text, key text, wait interval, lease interval, throws boolean,
                                      config rate_limiter.config)
RETURNS TABLE (ok boolean, lease_id bigint, in_flight int4, retry_after interval)
LANGUAGE plpgsql VOLATILE ROWS 1
AS $acquire$
DECLARE
    limited record;
    defined_kind text;
    most int4;
    enforcing boolean;
    duration interval;
    deadline timestamptz;
    at timestamptz;
    slot int4;
    pause float8 := 0.001;
    id bigint;
    earliest timestamptz;
    held text := pg_catalog.current_setting('rate_limiter_internal.held_slots', true);
    refusal record;
    elsewhere boolean := rate_limiter._slots_elsewhere();
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF wait IS NULL THEN
        RAISE EXCEPTION 'wait must not be NULL' USING ERRCODE = '22004';
    ELSIF throws IS NULL THEN
        RAISE EXCEPTION 'throws must not be NULL' USING ERRCODE = '22004';
    ELSIF wait < interval '0' THEN
        RAISE EXCEPTION 'wait must not be negative, got %', wait USING ERRCODE = '22023';
    ELSIF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be greater than zero, got %', lease USING ERRCODE = '22023';
    END IF;
    -- A defined limit, read here (the common case: one statement); else
    -- _concurrency_limit, which also raises every error.
    IF pg_catalog.num_nulls(config) = 1 THEN
        SELECT d.kind::text, d.rate::int4, coalesce(lease, nullif(d.period, interval '0')), d.enforce
        INTO defined_kind, most, duration, enforcing
        FROM rate_limiter.definitions AS d WHERE d.name = _acquire.name;
    END IF;
    IF defined_kind IS DISTINCT FROM 'concurrency' THEN
        limited := rate_limiter._concurrency_limit(name, config);
        most := limited.max;
        duration := coalesce(lease, limited.lease);
        enforcing := limited.enforce;
    END IF;
    -- Distributed by Citus, a timed lease is written into the leases'
    -- reference table; an install distributed before 0.6.0 and updated
    -- since has a table of each node's own until distribute() runs again.
    -- (Nested: without Citus pg_dist_partition does not exist, and the
    -- condition is planned only when reached.)
    IF elsewhere AND duration IS NOT NULL THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                       WHERE p.logicalrelid = 'rate_limiter.leases'::pg_catalog.regclass AND p.partmethod = 'n') THEN
            RAISE EXCEPTION 'rate_limiter.leases is not a reference table of this cluster: a timed lease written now would be this node''s alone'
                USING ERRCODE = '55000',
                      HINT = 'Call SELECT rate_limiter.distribute(); on the coordinator once more (after ALTER EXTENSION rate_limiter UPDATE it makes the leases a reference table), then retry.';
        END IF;
    END IF;
    deadline := pg_catalog.clock_timestamp() + wait;
    LOOP
        at := rate_limiter._clock();
        -- The first try of _take_slot, here when this transaction holds
        -- no slot yet (the common case): a free slot's row, locked.
        IF (held IS NULL OR held = '') AND NOT elsewhere THEN
            IF key IS NULL THEN
                SELECT r.shard INTO slot FROM rate_limiter.rate_limits AS r
                WHERE r.name = _acquire.name AND r.key IS NULL AND r.shard < most
                  AND NOT (r.value > 0 AND r.ts > at)
                ORDER BY r.shard LIMIT 1
                FOR UPDATE SKIP LOCKED;
            ELSE
                SELECT r.shard INTO slot FROM rate_limiter.rate_limits AS r
                WHERE r.name = _acquire.name AND r.key = _acquire.key AND r.shard < most
                  AND NOT (r.value > 0 AND r.ts > at)
                ORDER BY r.shard LIMIT 1
                FOR UPDATE SKIP LOCKED;
            END IF;
        END IF;
        IF slot IS NULL THEN
            slot := rate_limiter._take_slot(name, key, most, at);
        END IF;
        EXIT WHEN slot IS NOT NULL OR pg_catalog.clock_timestamp() >= deadline;
        -- Holding nothing (a refused _take_slot keeps no lock it needs):
        -- pg_sleep is cancellable, and statement_timeout applies.
        PERFORM pg_catalog.pg_sleep(least(pause,
            EXTRACT(epoch FROM deadline - pg_catalog.clock_timestamp())::float8));
        pause := least(pause * 2, 0.05);
    END LOOP;
    IF slot IS NOT NULL THEN
        IF duration IS NULL THEN
            PERFORM pg_catalog.set_config('rate_limiter_internal.held_slots',
                (coalesce(nullif(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), ''), '[]')::jsonb
                 || pg_catalog.jsonb_build_object('n', name, 'k', key, 'slot', slot))::text, true);
            held := 'taken';
        ELSE
            id := rate_limiter._lease_id();
            PERFORM rate_limiter._write_slot(name, key, slot, 1, at + duration, NULL);
            INSERT INTO rate_limiter.leases AS l (id, name, key, slot, duration)
            VALUES (id, name, key, slot::int2, duration)
            ON CONFLICT ON CONSTRAINT leases_slot DO UPDATE SET id = excluded.id, duration = excluded.duration;
        END IF;
        PERFORM rate_limiter._stats_count(name, 0);
        RETURN QUERY SELECT true, id, NULL::int4, NULL::interval;
        RETURN;
    END IF;
    earliest := rate_limiter._earliest_expiry(name, key, most, at);
    IF NOT enforcing THEN
        -- Shadow mode: the refusal answered as admitted, holding nothing.
        PERFORM rate_limiter._stats_count(name, 2);
        RETURN QUERY SELECT true, NULL::bigint, most, NULL::interval;
        RETURN;
    END IF;
    PERFORM rate_limiter._stats_count(name, 1);
    IF throws THEN
        refusal := rate_limiter._concurrency_refusal(name, key, most, earliest - at);
        RAISE EXCEPTION USING
            ERRCODE = rate_limiter._sqlstate(),
            MESSAGE = refusal.message, DETAIL = refusal.detail, HINT = refusal.hint;
    END IF;
    RETURN QUERY SELECT false, NULL::bigint, most, earliest - at;
END
$acquire$;

COMMENT ON FUNCTION rate_limiter.acquire(text, text, interval, interval, boolean, rate_limiter.config) IS
'Takes one of the max slots of concurrency limit (name, key). lease NULL (and no lease in the definition): a transaction lease, held until this transaction ends, lease_id NULL; '
'lease given: a timed lease, committed with the transaction, held until release(name, lease_id) or now + lease (renew() extends it). '
'Returns one row: ok, lease_id, in_flight (max when refused; NULL when admitted), retry_after (refused: until the earliest timed lease ends; NULL when only transaction leases hold slots). '
'wait: how long to wait for a slot, holding nothing meanwhile. Shadow mode (define(..., enforce => false)): a refusal is answered ok = true, holding nothing. '
'Errors: 22004 NULL name/wait/throws, NULL max in config; 42704 no config and no definition; 22023 a rate limit''s name or config, negative wait, lease not greater than zero; '
'42501 an inline config for a defined name; the rate_limiter.sqlstate SQLSTATE (default RL429, JSON DETAIL with in_flight and max) when refused with throws => true.';
