-- The portable edition (docs/guarantees.md, "Portable edition"): blocks
-- (docs/blocks.md; the native extension's src/blocks.rs and
-- src/api/blocks.rs). block() and unblock() write rate_limiter.blocks;
-- every consuming and checking call of a blocked key is refused until the
-- block ends (_resolve in 40_definitions.sql says so, and each call
-- answers the refusal without a lock or a write).
--
-- Under REPEATABLE READ and SERIALIZABLE a call reads the blocks its
-- snapshot sees, where the native extension reads them as committed now.
-- block() and unblock() rewrite the definition row of the limit,
-- unchanged, as override() does (42_overrides.sql): a call whose snapshot
-- is older then fails with 40001 rather than decide without the block,
-- and a concurrent undefine() waits for the block, then deletes it.

-- A duration in microseconds, as _period_micros counts it, for the
-- parameter named parameter: 0 or more (time::duration_micros).
CREATE FUNCTION rate_limiter._duration_micros(duration interval, parameter text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $duration$
DECLARE
    total numeric := EXTRACT(epoch FROM duration) * 1000000;
BEGIN
    IF total < 0 THEN
        RAISE EXCEPTION '% must not be negative', parameter USING ERRCODE = '22023';
    END IF;
    IF total > 9223372036854775807 THEN
        RAISE EXCEPTION '% is too long', parameter USING ERRCODE = '22023';
    END IF;
    RETURN total::bigint;
END
$duration$;

-- The end of the block of (name, key) in microseconds, and its reason,
-- when the key is blocked at now (microseconds); NULLs otherwise.
-- (infinity is 9223372036854775807.)
CREATE FUNCTION rate_limiter._block_of(name text, key text, now bigint, OUT until bigint, OUT reason text)
LANGUAGE plpgsql STABLE
AS $block_of$
DECLARE
    ends timestamptz;
    why text;
BEGIN
    IF key IS NULL THEN
        SELECT b.until, b.reason INTO ends, why FROM rate_limiter.blocks AS b
        WHERE b.name = _block_of.name AND b.key IS NULL;
    ELSE
        SELECT b.until, b.reason INTO ends, why FROM rate_limiter.blocks AS b
        WHERE b.name = _block_of.name AND b.key = _block_of.key;
    END IF;
    IF ends IS NULL THEN
        RETURN;
    END IF;
    until := rate_limiter._block_micros(ends);
    IF now >= until THEN
        until := NULL;
        RETURN;
    END IF;
    reason := why;
END
$block_of$;

-- 22023 unless duration is finite and not negative (api::blocks::
-- checked_duration: as PostgreSQL orders intervals).
CREATE FUNCTION rate_limiter._block_duration(duration interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $block_duration$
BEGIN
    IF NOT pg_catalog.isfinite(duration) OR duration < '0'::interval THEN
        RAISE EXCEPTION 'duration must be finite and not negative' USING ERRCODE = '22023';
    END IF;
END
$block_duration$;

CREATE FUNCTION rate_limiter.block(name text, key text, duration interval, reason text DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $block$
DECLARE
    now_ts timestamptz;
    ends timestamptz;
BEGIN
    -- The native order: 22004, 22023, 42501, 42704, 25006.
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF duration IS NULL THEN
        RAISE EXCEPTION 'duration must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._block_duration(duration);
    PERFORM rate_limiter._managing('rate_limiter.block()', name);
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute block() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ts := rate_limiter._timestamp(rate_limiter._now());
    -- The definition rewritten unchanged (see the top of this file): an
    -- undefine() that committed meanwhile leaves no row (42704).
    UPDATE rate_limiter.definitions AS d SET enforce = d.enforce WHERE d.name = block.name;
    IF NOT FOUND THEN
        PERFORM rate_limiter._undefined(name);
    END IF;
    INSERT INTO rate_limiter.blocks AS b (name, key, until, strikes, reason)
    VALUES (block.name, block.key, now_ts + duration,
            CASE WHEN now_ts + duration > now_ts THEN 1 ELSE 0 END, block.reason)
    ON CONFLICT ON CONSTRAINT blocks_name_key DO UPDATE SET
        strikes = b.strikes
            + CASE WHEN b.until <= now_ts AND excluded.until > now_ts THEN 1 ELSE 0 END,
        reason = CASE WHEN b.until > now_ts THEN coalesce(excluded.reason, b.reason)
                      ELSE excluded.reason END,
        until = greatest(b.until, excluded.until),
        forget_at = greatest(b.forget_at, excluded.until)
    RETURNING b.until INTO ends;
    RETURN ends;
END
$block$;

CREATE FUNCTION rate_limiter.unblock(name text, key text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $unblock$
DECLARE
    now_ts timestamptz;
    lifted boolean;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._managing('rate_limiter.unblock()', name);
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute unblock() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    now_ts := rate_limiter._timestamp(rate_limiter._now());
    -- The limit's definition rewritten unchanged (see the top of this file).
    UPDATE rate_limiter.definitions AS d SET enforce = d.enforce WHERE d.name = unblock.name;
    IF key IS NULL THEN
        DELETE FROM rate_limiter.blocks AS b WHERE b.name = unblock.name AND b.key IS NULL
        RETURNING b.until > now_ts INTO lifted;
    ELSE
        DELETE FROM rate_limiter.blocks AS b WHERE b.name = unblock.name AND b.key = unblock.key
        RETURNING b.until > now_ts INTO lifted;
    END IF;
    RETURN coalesce(lifted, false);
END
$unblock$;

CREATE FUNCTION rate_limiter.blocked(name text, key text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $blocked$
DECLARE
    found_block rate_limiter.blocks;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._defined(name);
    IF key IS NULL THEN
        SELECT * INTO found_block FROM rate_limiter.blocks AS b WHERE b.name = blocked.name AND b.key IS NULL;
    ELSE
        SELECT * INTO found_block FROM rate_limiter.blocks AS b WHERE b.name = blocked.name AND b.key = blocked.key;
    END IF;
    IF found_block.name IS NULL
       OR (rate_limiter._block_of(name, key, rate_limiter._now())).until IS NULL THEN
        RETURN;
    END IF;
    until := found_block.until;
    strikes := found_block.strikes;
    reason := found_block.reason;
    RETURN NEXT;
END
$blocked$;

-- Starts the automatic block of (name, key) under config (with its
-- block_for) at now (microseconds): blocks::strike and
-- BlockPolicy::strike. The key's stored block is locked and read first:
-- strikes are counted from its strikes while they are remembered (now
-- before forget_at, or before until when forget_at is NULL), else from
-- zero; the block lasts block_for * 2^strikes (saturating), at most
-- max_block, and never ends before a block in force; forget_at is
-- forget_after after its end. An end past what a timestamp holds is
-- infinity.
CREATE FUNCTION rate_limiter._strike(name text, key text, config rate_limiter.config, now bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $strike$
DECLARE
    policy record := rate_limiter._config(config);
    stored rate_limiter.blocks;
    stored_until bigint;
    remembered int := 0;
    duration numeric;
    ends numeric;
    forget numeric;
BEGIN
    IF key IS NULL THEN
        SELECT * INTO stored FROM rate_limiter.blocks AS b WHERE b.name = _strike.name AND b.key IS NULL FOR UPDATE;
    ELSE
        SELECT * INTO stored FROM rate_limiter.blocks AS b WHERE b.name = _strike.name AND b.key = _strike.key FOR UPDATE;
    END IF;
    IF stored.name IS NOT NULL THEN
        stored_until := rate_limiter._block_micros(stored.until);
        IF now < coalesce(rate_limiter._block_micros(stored.forget_at), stored_until) THEN
            remembered := greatest(stored.strikes, 0);
        END IF;
    END IF;
    duration := CASE WHEN remembered >= 63 THEN 9223372036854775807
                     ELSE least(policy.block_for::numeric * (2::numeric ^ remembered), 9223372036854775807) END;
    IF policy.max_block IS NOT NULL THEN
        duration := least(duration, policy.max_block);
    END IF;
    ends := greatest(least(now::numeric + duration, 9223372036854775807), coalesce(stored_until, -9223372036854775808));
    forget := least(ends + policy.forget_after, 9223372036854775807);
    INSERT INTO rate_limiter.blocks AS b (name, key, until, strikes, reason, forget_at)
    VALUES (_strike.name, _strike.key, rate_limiter._block_timestamp(ends::bigint),
            least(remembered::bigint + 1, 2147483647)::int4, NULL, rate_limiter._block_timestamp(forget::bigint))
    ON CONFLICT ON CONSTRAINT blocks_name_key DO UPDATE SET
        until = greatest(b.until, excluded.until),
        strikes = excluded.strikes,
        reason = CASE WHEN b.until > excluded.until THEN b.reason END,
        forget_at = greatest(excluded.forget_at, b.until);
END
$strike$;

-- A stored end as microseconds (infinity: 9223372036854775807).
CREATE FUNCTION rate_limiter._block_micros(at timestamptz)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN at IS NULL THEN NULL
                WHEN pg_catalog.isfinite(at) THEN rate_limiter._micros(at)
                WHEN at > 'epoch'::timestamptz THEN 9223372036854775807
                ELSE -9223372036854775808 END
$$;

-- Microseconds as an end to store: infinity at or past the first
-- timestamp PostgreSQL cannot store (294277-01-01 UTC; blocks::stored).
CREATE FUNCTION rate_limiter._block_timestamp(micros bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN micros >= 9223371331200000000 THEN 'infinity'::timestamptz
                ELSE rate_limiter._timestamp(micros) END
$$;
