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
    until := CASE WHEN pg_catalog.isfinite(ends) THEN rate_limiter._micros(ends)
                  WHEN ends > 'epoch'::timestamptz THEN 9223372036854775807
                  ELSE -9223372036854775808 END;
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
        until = greatest(b.until, excluded.until)
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
