-- The portable edition (docs/guarantees.md, "Portable edition"): prune
-- (src/prune.rs). The rows are read in batches without a lock; a batch's
-- candidates are read again with FOR UPDATE SKIP LOCKED and judged again
-- on the locked versions, with the clock read after the locks, then
-- deleted. A row another transaction holds is in use and left alone.
-- Then the overrides that have expired go (docs/overrides.md, "Expiry and
-- prune").

-- Whether a stored row goes (prune::doomed), judged under what applies to
-- its key (its override in force, when overridden says the key has an
-- override row; else the definition): a row of another regime than that
-- one (it reads as missing); a shard of a defined limit when a missing
-- row would answer exactly as it does (prune::prunable); any other row
-- when older_than is given and its ts is older than now - older_than.
CREATE FUNCTION rate_limiter._doomed(name text, key text, shard int2, value float8, ts bigint, prev float8,
                                     regime bigint,
                                     defined rate_limiter.definitions, overridden boolean,
                                     now bigint, older_than bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $doomed$
DECLARE
    c rate_limiter.config;
    checked record;
    applies record;
    shards float8;
    shard_capacity float8;
    refilled record;
    initial record;
BEGIN
    -- A concurrency limit's slot (docs/concurrency.md): a row not held by a
    -- timed lease carries nothing (a transaction lease's row is locked,
    -- and the delete passes over locked rows), as natively.
    IF defined.kind::text = 'concurrency' THEN
        RETURN NOT (value > 0 AND ts > now);
    END IF;
    IF defined.name IS NOT NULL THEN
        IF overridden AND key IS NOT NULL THEN
            applies := rate_limiter._resolve(name, key, NULL, false);
        ELSE
            c := ROW(defined.kind, defined.rate, defined.period, defined.capacity, defined.max_reserved,
                     defined.shards, defined.start, defined.block_for, defined.max_block,
                     defined.forget_after, defined.time_zone)::rate_limiter.config;
            checked := rate_limiter._config(c);
            SELECT c AS config, checked.period AS period, checked.start AS start, NULL::bigint AS regime INTO applies;
        END IF;
        IF regime IS DISTINCT FROM applies.regime THEN
            RETURN true;
        END IF;
        c := applies.config;
        IF shard < greatest(c.shards, 1) THEN
            shards := greatest(c.shards, 1)::float8;
            shard_capacity := coalesce(c.capacity, c.rate) / shards;
            refilled := rate_limiter._refill(c.kind, c.rate / shards, applies.period, shard_capacity, value, ts,
                                             coalesce(prev, 0), now, coalesce(c.time_zone, ''));
            initial := rate_limiter._initial(c.kind, shard_capacity, applies.period, applies.start, name, key, now,
                                             coalesce(c.time_zone, ''));
            RETURN refilled.new_value = initial.value AND refilled.new_ts = initial.ts
                   AND refilled.new_prev = initial.prev;
        END IF;
    END IF;
    RETURN older_than IS NOT NULL AND ts < rate_limiter._sub_sat(now, older_than);
END
$doomed$;

CREATE FUNCTION rate_limiter.prune(older_than interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $prune$
DECLARE
    older bigint;
    batch tid[] := ARRAY[]::tid[];
    seen int := 0;
    doomed tid[];
    deleted bigint := 0;
    stored record;
    now_ bigint;
    expired bigint;
    ended bigint;
    leases bigint;
BEGIN
    IF older_than IS NOT NULL THEN
        IF (EXTRACT(year FROM older_than), EXTRACT(month FROM older_than),
            EXTRACT(day FROM older_than), EXTRACT(hour FROM older_than),
            EXTRACT(minute FROM older_than), EXTRACT(microseconds FROM older_than))
           = (0, 0, 0, 0, 0, 0) THEN
            older := 0;
        ELSE
            BEGIN
                older := rate_limiter._period_micros(older_than);
            EXCEPTION WHEN invalid_parameter_value THEN
                RAISE EXCEPTION 'older_than must be zero or a positive interval' USING ERRCODE = '22023';
            END;
        END IF;
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute prune() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    FOR stored IN SELECT r.ctid, r.name, r.key, r.shard, r.value, rate_limiter._micros(r.ts) AS ts, r.prev, r.regime,
                         d AS defined,
                         EXISTS (SELECT FROM rate_limiter.overrides AS o
                                 WHERE o.name = r.name AND o.key = r.key) AS overridden
                  FROM rate_limiter.rate_limits AS r
                  LEFT JOIN rate_limiter.definitions AS d ON d.name = r.name LOOP
        seen := seen + 1;
        now_ := rate_limiter._now();
        IF rate_limiter._doomed(stored.name, stored.key, stored.shard, stored.value, stored.ts, stored.prev,
                                stored.regime,
                                stored.defined, stored.overridden, now_, older) THEN
            batch := batch || stored.ctid;
        END IF;
        IF seen % 1000 = 0 THEN
            deleted := deleted + rate_limiter._prune_batch(batch, older);
            batch := ARRAY[]::tid[];
        END IF;
    END LOOP;
    deleted := deleted + rate_limiter._prune_batch(batch, older);
    -- The overrides that apply no more (expires_at not after now).
    DELETE FROM rate_limiter.overrides AS o WHERE o.expires_at <= rate_limiter._timestamp(rate_limiter._now());
    GET DIAGNOSTICS expired = ROW_COUNT;
    IF expired > 0 THEN
        RAISE NOTICE 'rate_limiter.prune() deleted % expired overrides', expired;
    END IF;
    -- The blocks that have ended and whose strikes are forgotten (until, and
    -- forget_at when set, not after now).
    DELETE FROM rate_limiter.blocks AS b
    WHERE b.until <= rate_limiter._timestamp(rate_limiter._now())
      AND (b.forget_at IS NULL OR b.forget_at <= rate_limiter._timestamp(rate_limiter._now()));
    GET DIAGNOSTICS ended = ROW_COUNT;
    IF ended > 0 THEN
        RAISE NOTICE 'rate_limiter.prune() deleted % ended blocks', ended;
    END IF;
    -- The timed leases that have ended (sql/concurrency.sql).
    leases := rate_limiter._prune_leases();
    IF leases > 0 THEN
        RAISE NOTICE 'rate_limiter.prune() deleted % ended leases', leases;
    END IF;
    RETURN deleted + expired + ended + leases;
END
$prune$;

-- Locks the candidates that no one holds, judges them again on the
-- locked versions and deletes the ones that go: how many.
CREATE FUNCTION rate_limiter._prune_batch(candidates tid[], older bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $prune_batch$
DECLARE
    locked record;
    doomed tid[] := ARRAY[]::tid[];
    gone bigint;
BEGIN
    IF pg_catalog.cardinality(candidates) = 0 THEN
        RETURN 0;
    END IF;
    FOR locked IN SELECT r.ctid, r.name, r.key, r.shard, r.value, rate_limiter._micros(r.ts) AS ts, r.prev, r.regime
                  FROM rate_limiter.rate_limits AS r
                  WHERE r.ctid = ANY (candidates)
                  FOR UPDATE OF r SKIP LOCKED LOOP
        IF rate_limiter._doomed(locked.name, locked.key, locked.shard, locked.value, locked.ts, locked.prev,
                                locked.regime,
                                (SELECT d FROM rate_limiter.definitions AS d WHERE d.name = locked.name),
                                EXISTS (SELECT FROM rate_limiter.overrides AS o
                                        WHERE o.name = locked.name AND o.key = locked.key),
                                rate_limiter._now(), older) THEN
            doomed := doomed || locked.ctid;
        END IF;
    END LOOP;
    DELETE FROM rate_limiter.rate_limits AS r WHERE r.ctid = ANY (doomed);
    GET DIAGNOSTICS gone = ROW_COUNT;
    RETURN gone;
END
$prune_batch$;
