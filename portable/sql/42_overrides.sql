-- The portable edition (docs/guarantees.md, "Portable edition"): per-key
-- overrides and plans (docs/overrides.md; the native extension's
-- src/overrides.rs and src/api/overrides.rs). override() and
-- remove_override() write rate_limiter.overrides; a call of (name, key)
-- without an inline config uses the key's override while it is in force
-- (_resolve in 40_definitions.sql), and reads and writes its state rows
-- under the override's regime (the column rate_limits.regime).
--
-- Under REPEATABLE READ and SERIALIZABLE a call reads the overrides its
-- snapshot sees, where the native extension reads them as committed now.
-- So that it never decides under an override that has been replaced
-- since, override() and remove_override() rewrite the definition row of
-- the limit (and override() that of the plan), unchanged: a call whose
-- snapshot is older then finds that row replaced after its snapshot and
-- fails with 40001, as after a define() (_resolve). The same rewrite is
-- the lock that makes a concurrent undefine() of the limit or the plan
-- wait for the override and then see it: the native extension takes a
-- share lock (FOR SHARE) there, which SQL cannot take without leaving the
-- locker's transaction id in the row's xmax, where _replaced_after_snapshot
-- would read it as a replacement, again and again.

-- The regime of the state rows written under config (its period in
-- microseconds: period) for a limit defined as definition (period:
-- definition_period), as the native overrides::regime computes it: NULL
-- when kind, period and shards are the definition's (the rows mean the
-- same under both); else hashtextextended('<kind>/<period>/<shards>', 0).
CREATE FUNCTION rate_limiter._regime(config rate_limiter.config, period bigint,
                                     definition rate_limiter.config, definition_period bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN (config.kind, period, config.shards)
                     IS NOT DISTINCT FROM (definition.kind, definition_period, definition.shards) THEN NULL
                ELSE pg_catalog.hashtextextended(
                         pg_catalog.format('%s/%s/%s', config.kind, period, config.shards) COLLATE "C", 0) END
$$;

-- Whether an override that expires at expires_at applies at now
-- (microseconds): expires_at NULL, or later than now (Override::in_force;
-- infinity is later than every instant, -infinity earlier).
CREATE FUNCTION rate_limiter._in_force(expires_at timestamptz, now bigint)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT expires_at IS NULL
        OR CASE WHEN pg_catalog.isfinite(expires_at) THEN now < rate_limiter._micros(expires_at)
                ELSE expires_at > 'epoch'::timestamptz END
$$;

-- What the override of (name, key) makes apply to the key, when the key
-- has one in force: the override's own config, enforcing as it says or
-- else as the definition (defined_enforce); or its plan's definition,
-- enforcing as the override says or else as the plan. With the period and
-- start in microseconds and the regime of the key's state rows. NULLs
-- when the key has no override, or one that has expired. The stored
-- override is checked as the native extension checks it when it reads it,
-- expired or not (22004, 22023: a row written by hand); its plan is read
-- only while it applies (42704 when it is gone).
CREATE FUNCTION rate_limiter._overridden(name text, key text, definition rate_limiter.config,
                                         definition_period bigint, defined_enforce boolean,
                                         OUT config rate_limiter.config, OUT enforce boolean,
                                         OUT period bigint, OUT start bigint, OUT regime bigint)
LANGUAGE plpgsql STABLE
AS $overridden$
DECLARE
    stored rate_limiter.overrides;
    planned rate_limiter.definitions;
    checked record;
BEGIN
    SELECT * INTO stored FROM rate_limiter.overrides AS o
    WHERE o.name = _overridden.name AND o.key = _overridden.key;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF stored.kind IS NOT NULL THEN
        PERFORM rate_limiter._config(ROW(stored.kind, stored.rate, stored.period, stored.capacity,
                                         stored.max_reserved, stored.shards, stored.start, stored.block_for,
                                         stored.max_block, stored.forget_after, stored.time_zone)::rate_limiter.config);
    END IF;
    IF (stored.plan IS NULL) = (stored.kind IS NULL) THEN
        RAISE EXCEPTION 'a stored override must have exactly one of a config and a plan' USING ERRCODE = '22023';
    END IF;
    IF NOT rate_limiter._in_force(stored.expires_at, rate_limiter._now()) THEN
        RETURN;
    END IF;
    IF stored.plan IS NOT NULL THEN
        SELECT * INTO planned FROM rate_limiter.definitions AS d WHERE d.name = stored.plan;
        -- (A plan redefined since the snapshot: as the limit's own
        -- definition in _resolve.)
        IF FOUND AND pg_catalog.current_setting('transaction_isolation') <> 'read committed'
           AND rate_limiter._replaced_after_snapshot(stored.plan) THEN
            RAISE EXCEPTION 'could not serialize access: the definition of rate limit "%" changed after this transaction''s snapshot',
                rate_limiter._for_message(stored.plan)
                USING ERRCODE = '40001',
                      HINT = 'Retry the transaction: it will use the new definition.';
        END IF;
        IF planned.name IS NULL THEN
            PERFORM rate_limiter._undefined(stored.plan);
        END IF;
        config := ROW(planned.kind, planned.rate, planned.period, planned.capacity, planned.max_reserved,
                      planned.shards, planned.start, planned.block_for, planned.max_block,
                      planned.forget_after, planned.time_zone)::rate_limiter.config;
        enforce := coalesce(stored.enforce, planned.enforce);
    ELSE
        config := ROW(stored.kind, stored.rate, stored.period, stored.capacity, stored.max_reserved,
                      stored.shards, stored.start, stored.block_for, stored.max_block,
                      stored.forget_after, stored.time_zone)::rate_limiter.config;
        enforce := coalesce(stored.enforce, defined_enforce);
    END IF;
    checked := rate_limiter._config(config);
    period := checked.period;
    start := checked.start;
    regime := rate_limiter._regime(config, period, definition, definition_period);
END
$overridden$;

-- The 42704 of a name that has no definition (CallError::Undefined).
CREATE FUNCTION rate_limiter._undefined(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $undefined$
BEGIN
    RAISE EXCEPTION 'rate limit "%" is not defined', rate_limiter._for_message(name)
        USING ERRCODE = '42704',
              HINT = 'Define it with rate_limiter.define(), or pass config => rate_limiter.token_bucket(...) or rate_limiter.fixed_window(...).';
END
$undefined$;

-- The checks every function that manages overrides makes after its
-- arguments' (the native api::overrides::managing): a role that may call
-- define() (42501, naming function), then a defined name (42704). The
-- role is the session's (rate_limiter._invoker), and only in a call made
-- from no other function (rate_limiter._called_directly), as for an
-- inline config of a defined name (_resolve): these functions run as the
-- tables' owner and cannot see the role a SECURITY DEFINER caller runs
-- as, so they never admit a call the native extension would refuse.
CREATE FUNCTION rate_limiter._managing(function text, name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $managing$
BEGIN
    IF NOT pg_catalog.has_function_privilege(rate_limiter._invoker(),
               'rate_limiter.define(text, rate_limiter.config, boolean)', 'EXECUTE')
       OR NOT rate_limiter._called_directly() THEN
        RAISE EXCEPTION 'permission denied for %: it manages limits, and the current role may not call rate_limiter.define()', function
            USING ERRCODE = '42501',
                  HINT = 'Call it as a role that may call rate_limiter.define() (the README''s admin role).';
    END IF;
    PERFORM rate_limiter._defined(name);
END
$managing$;

-- Raises the 22023 of a concurrency limit where a rate limit is needed
-- (as the native config::unknown_kind).
CREATE FUNCTION rate_limiter._not_a_rate_limit()
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $not_a_rate_limit$
BEGIN
    RAISE EXCEPTION 'this is a concurrency limit, not a rate limit'
        USING ERRCODE = '22023',
              HINT = 'Take a slot with rate_limiter.acquire(): a concurrency limit counts operations in flight, not tokens.';
END
$not_a_rate_limit$;

-- Raises 42704 unless name is defined (22023 for a concurrency limit): as committed now (a definition
-- committed after a REPEATABLE READ snapshot is 40001, as in _resolve).
CREATE FUNCTION rate_limiter._defined(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $defined$
BEGIN
    IF EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = _defined.name) THEN
        -- Overrides and blocks are a rate limit's (docs/concurrency.md), as
        -- the native lookup of a concurrency limit refuses them.
        IF EXISTS (SELECT FROM rate_limiter.definitions AS d
                   WHERE d.name = _defined.name AND d.kind::text = 'concurrency') THEN
            PERFORM rate_limiter._not_a_rate_limit();
        END IF;
        RETURN;
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed'
       AND rate_limiter._defined_after_snapshot(name) THEN
        RAISE EXCEPTION 'could not serialize access: the definition of rate limit "%" changed after this transaction''s snapshot',
            rate_limiter._for_message(name)
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction: it will use the new definition.';
    END IF;
    PERFORM rate_limiter._undefined(name);
END
$defined$;

CREATE FUNCTION rate_limiter.override(
    name       text,
    key        text,
    config     rate_limiter.config DEFAULT NULL,
    plan       text                DEFAULT NULL,
    expires_at timestamptz         DEFAULT NULL,
    enforce    boolean             DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $override$
DECLARE
    given boolean := pg_catalog.num_nulls(config) = 0;
    named bigint;
BEGIN
    -- The native order: 22004, the config's NULL fields, 22023 (one of
    -- config and plan, the config's values, the plan), 42501, 42704 (the
    -- name, then the plan), 25006.
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF key IS NULL THEN
        RAISE EXCEPTION 'key must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF given THEN
        PERFORM rate_limiter._config_nulls(config);
    END IF;
    IF given = (plan IS NOT NULL) THEN
        RAISE EXCEPTION 'give exactly one of config and plan' USING ERRCODE = '22023';
    END IF;
    IF given THEN
        PERFORM rate_limiter._config(config);
    END IF;
    IF plan = name THEN
        RAISE EXCEPTION 'a limit cannot be its own key''s plan' USING ERRCODE = '22023';
    END IF;
    PERFORM rate_limiter._managing('rate_limiter.override()', name);
    IF plan IS NOT NULL THEN
        PERFORM rate_limiter._defined(plan);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute override() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- The definitions named, rewritten unchanged (see the top of this
    -- file): an undefine() of either that committed meanwhile leaves
    -- fewer rows, and nothing is written (42704).
    WITH touched AS (
        UPDATE rate_limiter.definitions AS d SET enforce = d.enforce
        WHERE d.name = override.name OR d.name = override.plan
        RETURNING 1
    )
    SELECT count(*) INTO named FROM touched;
    IF named < (CASE WHEN plan IS NULL THEN 1 ELSE 2 END) THEN
        PERFORM rate_limiter._undefined(coalesce(plan, name));
    END IF;
    INSERT INTO rate_limiter.overrides AS o
        (name, key, plan, kind, rate, period, capacity, max_reserved, shards, start, enforce, expires_at,
         block_for, max_block, forget_after, time_zone)
    VALUES (override.name, override.key, override.plan, config.kind, config.rate, config.period, config.capacity,
            config.max_reserved, config.shards, config.start, override.enforce, override.expires_at,
            config.block_for, config.max_block, config.forget_after, config.time_zone)
    ON CONFLICT ON CONSTRAINT overrides_pkey DO UPDATE SET
        plan = excluded.plan, kind = excluded.kind, rate = excluded.rate,
        period = excluded.period, capacity = excluded.capacity,
        max_reserved = excluded.max_reserved, shards = excluded.shards,
        start = excluded.start, enforce = excluded.enforce,
        expires_at = excluded.expires_at, block_for = excluded.block_for,
        max_block = excluded.max_block, forget_after = excluded.forget_after,
        time_zone = excluded.time_zone;
END
$override$;

CREATE FUNCTION rate_limiter.remove_override(name text, key text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $remove_override$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF key IS NULL THEN
        RAISE EXCEPTION 'key must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._managing('rate_limiter.remove_override()', name);
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute remove_override() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- The limit's definition rewritten unchanged (see the top of this file).
    UPDATE rate_limiter.definitions AS d SET enforce = d.enforce WHERE d.name = remove_override.name;
    DELETE FROM rate_limiter.overrides AS o WHERE o.name = remove_override.name AND o.key = remove_override.key;
    RETURN FOUND;
END
$remove_override$;
