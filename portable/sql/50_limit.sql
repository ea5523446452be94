-- The portable edition (docs/guarantees.md, "Portable edition"): rate_limit
-- (rate_check and rate_reset: 51_check_reset.sql). The state is read, locked and written with
-- ordinary statements in the caller's transaction (SELECT ... FOR UPDATE,
-- UPDATE, INSERT ... ON CONFLICT DO NOTHING), so PostgreSQL itself applies
-- whatever the table carries, and:
-- * under READ COMMITTED concurrent callers serialize on the row;
-- * under REPEATABLE READ or SERIALIZABLE a row changed after the
--   snapshot is 40001 (FOR UPDATE), also when two sessions create the
--   same new row (ON CONFLICT DO NOTHING on a row the snapshot cannot see);
-- * rows are taken in one order, (name, key, shard), so calls never
--   deadlock;
-- * a definition that changed while the call waited for its row (define()
--   locks the definition, then the rows it discards) is read again and the
--   call starts again (after 16 restarts: 40001);
-- * a row of another regime than the call's reads as missing and is
--   overwritten (47_state_rows.sql).

-- The verdict of a decision as a call answers it (verdict::shadow): in
-- shadow mode a refusal answers ok with no retry_after.
CREATE FUNCTION rate_limiter._shadow(decided_ok boolean, decided_retry_after bigint, enforce boolean,
                                     OUT ok boolean, OUT retry_after bigint, OUT verdict text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN decided_ok OR NOT enforce THEN true ELSE false END,
           CASE WHEN decided_ok OR enforce THEN decided_retry_after END,
           CASE WHEN decided_ok THEN 'admitted' WHEN enforce THEN 'refused' ELSE 'shadow refused' END
$$;

-- Whether the definition of name is still (config, enforce): a define()
-- that committed while the call waited for a row changed it.
CREATE FUNCTION rate_limiter._same_definition(name text, config rate_limiter.config, enforce boolean)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT (d.kind, d.rate, d.period, d.capacity, d.max_reserved, d.shards, d.start, d.enforce,
                             d.time_zone)
                            IS NOT DISTINCT FROM
                            (config.kind, config.rate, config.period, config.capacity, config.max_reserved,
                             config.shards, config.start, enforce, config.time_zone)
                     FROM rate_limiter.definitions AS d WHERE d.name = _same_definition.name), false)
$$;

-- Whether what applies to (name, key) is still (config, enforce, regime),
-- and the key not blocked (definitions::recheck): a define(), override(),
-- remove_override() or block()
-- that committed while the call waited for a row changed it (or the
-- key's override expired meanwhile). A key without an override row needs
-- only the definition's.
CREATE FUNCTION rate_limiter._still_applies(name text, key text, config rate_limiter.config, enforce boolean,
                                            regime bigint, blocked_until bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $still_applies$
DECLARE
    now_applies record;
BEGIN
    -- A block committed, changed or lifted while the call waited
    -- (43_blocks.sql): start again.
    IF (rate_limiter._block_of(name, key, rate_limiter._now())).until IS DISTINCT FROM blocked_until THEN
        RETURN false;
    END IF;
    IF key IS NULL OR NOT EXISTS (SELECT FROM rate_limiter.overrides AS o
                                  WHERE o.name = _still_applies.name AND o.key = _still_applies.key) THEN
        RETURN regime IS NULL AND rate_limiter._same_definition(name, config, enforce);
    END IF;
    now_applies := rate_limiter._resolve(name, key, NULL, false);
    RETURN (now_applies.config, now_applies.enforce, now_applies.regime) IS NOT DISTINCT FROM (config, enforce, regime);
END
$still_applies$;

-- The error of a call whose definition kept changing.
CREATE FUNCTION rate_limiter._kept_changing(name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $kept_changing$
BEGIN
    RAISE EXCEPTION 'the definition of rate limit "%" kept changing during the call', rate_limiter._for_message(name)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$kept_changing$;

-- A consuming call (limit::consume): the answer as the call gives it,
-- and its verdict ('admitted', 'refused', 'shadow refused').
CREATE FUNCTION rate_limiter._consume(name text, key text, count float8, reserve boolean,
                                      inline rate_limiter.config, inline_given boolean,
                                      OUT ok boolean, OUT retry_after bigint, OUT remaining float8, OUT verdict text,
                                      OUT blocked boolean, OUT block_reason text)
LANGUAGE plpgsql VOLATILE
AS $consume$
DECLARE
    limit_ record;
    config rate_limiter.config;
    stored record;
    decision record;
    answered record;
    capacity float8;
    refused boolean;
BEGIN
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        -- (After the definition and the count, as the native extension:
        -- 42704, then 22023 for a count the limit could never admit.)
        limit_ := rate_limiter._resolve(name, key, inline, inline_given);
        PERFORM rate_limiter._validate_count(limit_.config, count, reserve);
        RAISE EXCEPTION 'cannot execute rate_limit() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    FOR attempt IN 1..17 LOOP
        limit_ := rate_limiter._resolve(name, key, inline, inline_given);
        config := limit_.config;
        PERFORM rate_limiter._validate_count(config, count, reserve);
        -- A blocked key is refused without a lock or a write (43_blocks.sql).
        IF limit_.blocked_until IS NOT NULL THEN
            answered := rate_limiter._shadow(false, greatest(limit_.blocked_until - rate_limiter._now(), 1),
                                             limit_.enforce);
            ok := answered.ok;
            retry_after := answered.retry_after;
            remaining := 0;
            verdict := answered.verdict;
            blocked := true;
            block_reason := limit_.block_reason;
            RETURN;
        END IF;
        -- Refusals never wait (docs/guarantees.md, "Concurrency and
        -- exactness"): decide first on the rows as committed, without a lock;
        -- only a call that state could admit locks, waits if it must, and
        -- decides again.
        -- (A sharded limit reads its shards as committed only before it
        -- would wait for one: _consume_sharded.)
        refused := false;
        IF config.shards <= 1 AND rate_limiter._lock_free() THEN
            decision := rate_limiter._committed(name, key, count, reserve, config, limit_.period, limit_.start,
                                                limit_.regime);
            refused := NOT decision.ok;
        END IF;
        IF refused THEN
            NULL;
        ELSIF config.shards > 1 THEN
            decision := rate_limiter._consume_sharded(name, key, count, reserve, config, limit_.period, limit_.start,
                                                      limit_.enforce, inline_given, limit_.regime);
            IF decision.restart THEN
                CONTINUE;
            END IF;
        ELSE
            stored := rate_limiter._row(name, key, 0::int2, true, limit_.regime);
            IF NOT inline_given AND NOT rate_limiter._still_applies(name, key, config, limit_.enforce, limit_.regime, NULL) THEN
                CONTINUE;
            END IF;
            capacity := coalesce(config.capacity, config.rate);
            decision := rate_limiter._evaluate(config.kind, config.rate, limit_.period, capacity, config.max_reserved,
                                               limit_.start, name, key, stored.value, stored.ts, stored.prev,
                                               rate_limiter._now(), count, reserve, coalesce(config.time_zone, ''));
            IF decision.new_value IS NOT NULL
               AND NOT rate_limiter._write(name, key, 0::int2, stored.present, decision.new_value, decision.new_ts,
                                           limit_.regime, decision.new_prev) THEN
                -- Another transaction created the row first: take it.
                CONTINUE;
            END IF;
        END IF;
        -- The admitted call that used the limit up starts its automatic
        -- block (43_blocks.sql).
        IF decision.ok AND config.block_for IS NOT NULL AND decision.remaining < 1 THEN
            PERFORM rate_limiter._strike(name, key, config, rate_limiter._now());
        END IF;
        answered := rate_limiter._shadow(decision.ok, decision.retry_after, limit_.enforce);
        ok := answered.ok;
        retry_after := answered.retry_after;
        remaining := decision.remaining;
        verdict := answered.verdict;
        RETURN;
    END LOOP;
    PERFORM rate_limiter._kept_changing(name);
END
$consume$;

-- The decision on the call's rows as committed, read without a lock or a
-- wait (storage::read_committed): a plain SELECT, which under READ
-- COMMITTED sees what has committed by now and under REPEATABLE READ or
-- SERIALIZABLE the transaction's snapshot (with SERIALIZABLE's predicate
-- locks: a refusal is a read). A sharded limit answers for its two fullest
-- shards. What rate_check answers, and the refusal a consuming call gives
-- without locking (docs/guarantees.md, "Concurrency and exactness":
-- refusals never wait); new_ts* are the timestamps the call would store
-- (NULL: none).
CREATE FUNCTION rate_limiter._committed(name text, key text, count float8, reserve boolean,
                                        config rate_limiter.config, period bigint, start bigint, regime bigint,
                                        OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                        OUT new_ts bigint, OUT new_ts0 bigint, OUT new_ts1 bigint)
LANGUAGE plpgsql VOLATILE
AS $committed$
DECLARE
    stored record;
    decision record;
BEGIN
    IF config.shards > 1 THEN
        -- Every shard's row in one statement: work per row, not per shard.
        stored := rate_limiter._states(name, key, config.shards, regime);
        decision := rate_limiter._evaluate_fullest(config.kind, config.rate, period,
            coalesce(config.capacity, config.rate), config.max_reserved, config.shards, start, name, key,
            stored.stored_values, stored.stored_tss, stored.stored_prevs, rate_limiter._now(), count, reserve);
        IF decision.new_value0 IS NOT NULL THEN
            new_ts0 := decision.new_ts0;
        END IF;
        IF decision.new_value1 IS NOT NULL THEN
            new_ts1 := decision.new_ts1;
        END IF;
    ELSE
        stored := rate_limiter._row(name, key, 0::int2, false, regime);
        decision := rate_limiter._evaluate(config.kind, config.rate, period, coalesce(config.capacity, config.rate),
                                           config.max_reserved, start, name, key, stored.value, stored.ts,
                                           stored.prev, rate_limiter._now(), count, reserve, coalesce(config.time_zone, ''));
        IF decision.new_value IS NOT NULL THEN
            new_ts := decision.new_ts;
        END IF;
    END IF;
    ok := decision.ok;
    retry_after := decision.retry_after;
    remaining := decision.remaining;
END
$committed$;

-- The answer rate_limit would give, without a lock or a write
-- (limit::check): a sharded limit answers for its two fullest shards.
CREATE FUNCTION rate_limiter._check(name text, key text, count float8, reserve boolean,
                                    inline rate_limiter.config, inline_given boolean,
                                    OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                    OUT blocked boolean, OUT block_reason text)
LANGUAGE plpgsql VOLATILE
AS $check$
DECLARE
    limit_ record;
    decision record;
    answered record;
BEGIN
    limit_ := rate_limiter._resolve(name, key, inline, inline_given);
    PERFORM rate_limiter._validate_count(limit_.config, count, reserve);
    IF limit_.blocked_until IS NOT NULL THEN
        answered := rate_limiter._shadow(false, greatest(limit_.blocked_until - rate_limiter._now(), 1),
                                         limit_.enforce);
        ok := answered.ok;
        retry_after := answered.retry_after;
        remaining := 0;
        blocked := true;
        block_reason := limit_.block_reason;
        RETURN;
    END IF;
    decision := rate_limiter._committed(name, key, count, reserve, limit_.config, limit_.period, limit_.start,
                                        limit_.regime);
    -- As rate_limit would: a state it could not store is an error.
    IF decision.new_ts IS NOT NULL THEN
        PERFORM rate_limiter._timestamp(decision.new_ts);
    END IF;
    IF decision.new_ts0 IS NOT NULL THEN
        PERFORM rate_limiter._timestamp(decision.new_ts0);
    END IF;
    IF decision.new_ts1 IS NOT NULL THEN
        PERFORM rate_limiter._timestamp(decision.new_ts1);
    END IF;
    answered := rate_limiter._shadow(decision.ok, decision.retry_after, limit_.enforce);
    ok := answered.ok;
    retry_after := answered.retry_after;
    remaining := decision.remaining;
END
$check$;

-- Checks the arguments of rate_limit and rate_check (22004, in order).
CREATE FUNCTION rate_limiter._required(name text, count float8, reserve boolean, throws boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $required$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF count IS NULL THEN
        RAISE EXCEPTION 'count must not be NULL' USING ERRCODE = '22004';
    ELSIF reserve IS NULL THEN
        RAISE EXCEPTION 'reserve must not be NULL' USING ERRCODE = '22004';
    ELSIF throws IS NULL THEN
        RAISE EXCEPTION 'throws must not be NULL' USING ERRCODE = '22004';
    END IF;
END
$required$;

CREATE FUNCTION rate_limiter.rate_limit(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    reserve boolean             DEFAULT false,
    throws  boolean             DEFAULT false,
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql VOLATILE ROWS 1 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $rate_limit$
DECLARE
    given boolean := pg_catalog.num_nulls(config) = 0;
    answer record;
    override text;
    now_us bigint;
    now_ts timestamptz;
    definition_ctid tid;
    overridden boolean;
    limit_kind rate_limiter.kind;
    limit_rate float8;
    limit_capacity float8;
    limit_defined_capacity float8;
    limit_shards int;
    limit_start timestamptz;
    limit_interval interval;
    limit_block_for interval;
    limit_zone text;
    calendar_local timestamp;
    calendar_trunc timestamp;
    calendar_ts timestamptz;
    limit_period_us numeric;
    limit_period bigint;
    fast boolean := false;
    lock_free text;
    row_ctid tid;
    row_value float8;
    row_ts timestamptz;
    row_regime bigint;
    row_ts_us bigint;
    new_value float8;
    new_ts timestamptz;
    windows bigint;
    -- A sliding window's (21_sliding_window.sql): its previous window's
    -- count as stored and to store (NULL: 0), and what the call leaves
    -- (the other kinds store that as their value).
    row_prev float8;
    new_prev float8;
    left_after float8;
BEGIN
    -- The fast path: a call of a defined, unsharded token bucket (or fixed
    -- or sliding window with a start, or calendar window) with a key and a count in the usual range, under
    -- READ COMMITTED, that is admitted without a debt. It reads the
    -- definition and the row as committed (no lock: a refusal goes to the
    -- general path, which answers it without a lock: refusals never wait),
    -- then locks the row (SELECT ... FOR UPDATE: it waits for a holder and
    -- reads the row as the holder committed it), reads the clock, and decides
    -- again and updates the row, or inserts a new key's row while the
    -- version of the definition it read is still the committed one (the
    -- INSERT's SELECT sees what committed before it: a define() that
    -- discarded the row while the call waited for it leaves it no row, and
    -- no insert). The arithmetic
    -- is _refill's and _evaluate's, in the same order (48_fast_path.sql),
    -- so it answers exactly as the general path (_consume) does. A name
    -- with no definition may be a composite's, which has a fast path of
    -- its own (56_composite.sql). Anything else (no
    -- definition, shards, inline configs, the global key, a limit with
    -- automatic blocks, a key with an
    -- override (expired or not) or a block (ended or not, 43_blocks.sql)
    -- or a row of another regime
    -- (42_overrides.sql), a refusal, a
    -- reservation, numbers near the ends of float8, a fixed or sliding
    -- window without a start, a lost race to insert, read-only or stricter isolation,
    -- lock-free refusals turned off) takes the general path, which then
    -- holds the lock taken here, if any. (An override() rewrites the
    -- definition's row: the insert below, guarded by the version read,
    -- then inserts nothing.)
    -- Cost: every column a statement here computes, and every
    -- function it names, is compiled again each time the statement runs;
    -- so the statements read and write plain columns and PL/pgSQL, whose
    -- expressions are compiled once per transaction, does the arithmetic.
    IF NOT given AND key IS NOT NULL AND count >= 0 AND count <= 1e280
       AND name IS NOT NULL AND reserve IS NOT NULL AND throws IS NOT NULL
       AND NOT pg_catalog.current_setting('transaction_read_only')::boolean
       AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        SELECT d.ctid, d.kind, d.rate, d.capacity, d.shards, d.start, d.period, d.block_for, d.time_zone,
               EXISTS (SELECT FROM rate_limiter.overrides AS o WHERE o.name = rate_limit.name AND o.key = rate_limit.key)
               OR EXISTS (SELECT FROM rate_limiter.blocks AS b WHERE b.name = rate_limit.name AND b.key = rate_limit.key)
        INTO definition_ctid, limit_kind, limit_rate, limit_defined_capacity, limit_shards,
             limit_start, limit_interval, limit_block_for, limit_zone, overridden
        FROM rate_limiter.definitions AS d WHERE d.name = rate_limit.name;
        limit_capacity := coalesce(limit_defined_capacity, limit_rate);
        limit_period_us := CASE WHEN limit_shards = 1 THEN EXTRACT(epoch FROM limit_interval) * 1000000 END;
        lock_free := pg_catalog.current_setting('rate_limiter.lock_free_refusals', true);
        -- (limit_period_us is NULL when there is no definition.)
        IF NOT overridden
           AND rate_limiter._fast_limit(limit_kind, limit_rate, limit_capacity, limit_start, limit_period_us,
                                        limit_block_for, count)
           AND (lock_free = 'on' OR lock_free IS NULL OR lock_free = '' OR rate_limiter._lock_free()) THEN
            limit_period := limit_period_us::bigint;
            override := pg_catalog.current_setting('rate_limiter.now_override', true);
            -- Refusals never wait (docs/guarantees.md, "Concurrency and
            -- exactness"): the row as committed, without a lock. A refusal
            -- (or a state outside this path's range) goes to the general
            -- path, which answers it from the committed state too; otherwise
            -- lock that version (its name and key checked: a TID may be
            -- reused once the version is gone) and decide again under the
            -- lock. A version changed or deleted meanwhile is not found:
            -- general path (on a minor release whose TID scan rechecks no
            -- TID after a wait, the latest version, decided on again; one
            -- of another regime is not found either way).
            SELECT r.ctid, r.value, r.ts, r.regime, r.prev INTO row_ctid, row_value, row_ts, row_regime, row_prev
            FROM rate_limiter.rate_limits AS r
            WHERE r.name = rate_limit.name AND r.key = rate_limit.key AND r.shard = 0;
            IF row_regime IS NOT NULL THEN
                NULL;
            ELSIF row_ctid IS NOT NULL THEN
                IF override IS NULL OR pg_catalog.btrim(override) = '' THEN
                    now_us := rate_limiter._micros(pg_catalog.clock_timestamp());
                ELSE
                    now_us := rate_limiter._now();
                END IF;
                row_ts_us := rate_limiter._micros(row_ts);
                IF rate_limiter._fast_state(row_value, row_prev)
                   AND rate_limiter._fast_left(limit_kind, limit_rate, limit_period, limit_capacity, limit_zone,
                                               row_value, row_ts_us, row_prev, now_us, count) >= 0 THEN
                    SELECT r.value, r.ts, r.prev INTO row_value, row_ts, row_prev
                    FROM rate_limiter.rate_limits AS r
                    WHERE r.ctid = row_ctid AND r.name = rate_limit.name AND r.key = rate_limit.key AND r.shard = 0
                      AND r.regime IS NULL
                    FOR UPDATE;
                    fast := FOUND AND rate_limiter._fast_state(row_value, row_prev);
                END IF;
            ELSE
                fast := true;
            END IF;
        END IF;
        IF fast THEN
            -- The clock, read once the row is held.
            now_ts := rate_limiter._fast_now(override);
            now_us := rate_limiter._micros(now_ts);
            IF limit_kind = 'calendar window' THEN
                -- _calendar_start of now, inline (it runs on every call),
                -- as a timestamptz (an hour's part of an hour: no days).
                calendar_local := now_ts AT TIME ZONE limit_zone;
                calendar_trunc := pg_catalog.date_trunc(rate_limiter._calendar_unit(limit_period), calendar_local);
                calendar_ts := calendar_trunc AT TIME ZONE limit_zone;
                IF limit_period <= 3600000000 THEN
                    calendar_ts := now_ts - (calendar_local - calendar_trunc);
                ELSIF calendar_ts > now_ts THEN
                    calendar_ts := rate_limiter._timestamp(
                        now_us - (EXTRACT(epoch FROM calendar_local - calendar_trunc) * 1000000)::bigint);
                END IF;
            END IF;
            IF row_ctid IS NULL THEN
                left_after := limit_capacity - count;
                new_value := rate_limiter._fast_new_value(limit_kind, limit_capacity, count);
                new_ts := rate_limiter._fast_new_ts(limit_kind, limit_period, rate_limiter._micros(limit_start), now_ts,
                                                    now_us, calendar_ts);
                INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts)
                SELECT rate_limit.name, rate_limit.key, 0, new_value, new_ts
                FROM rate_limiter.definitions AS d
                -- The version of the definition read above, if it is still
                -- the committed one (a TID scan). Its slot cannot hold
                -- another version yet: a version that died after the
                -- calling statement's snapshot was taken is not pruned
                -- while that snapshot holds back the horizon.
                WHERE d.ctid = definition_ctid AND d.name = rate_limit.name
                ON CONFLICT ON CONSTRAINT rate_limits_name_key_shard_key DO NOTHING;
            ELSE
                row_ts_us := rate_limiter._micros(row_ts);
                IF limit_kind = 'calendar window' THEN
                    -- As _refill: rate per window of the calendar started
                    -- since the row's.
                    windows := CASE WHEN calendar_ts = row_ts THEN 0
                                    ELSE rate_limiter._calendar_between(limit_period, limit_zone, row_ts_us,
                                                                        rate_limiter._micros(calendar_ts)) END;
                    new_value := CASE WHEN windows > 0 THEN least(row_value + windows::float8 * limit_rate, limit_capacity)
                                      ELSE row_value END - count;
                    new_ts := CASE WHEN windows > 0 THEN calendar_ts ELSE row_ts END;
                ELSE
                    new_value := rate_limiter._fast_value(limit_kind, limit_rate, limit_period, limit_capacity,
                                                          row_value, row_ts_us, row_prev, now_us, count);
                    IF limit_kind = 'sliding window' THEN
                        left_after := rate_limiter._fast_left(limit_kind, limit_rate, limit_period, limit_capacity,
                                                              NULL, row_value, row_ts_us, row_prev, now_us, count);
                        new_prev := rate_limiter._fast_prev(limit_kind, limit_period, row_value, row_ts_us, row_prev,
                                                            now_us);
                    END IF;
                    IF coalesce(left_after, new_value) >= 0 THEN
                        new_ts := rate_limiter._fast_ts(limit_kind, limit_period, row_ts, row_ts_us, now_ts, now_us);
                    END IF;
                END IF;
                left_after := coalesce(left_after, new_value);
                IF left_after >= 0 THEN
                    -- The version just locked (a TID scan: no second index descent).
                    UPDATE rate_limiter.rate_limits AS r SET value = new_value, ts = new_ts, prev = new_prev
                    WHERE r.ctid = row_ctid;
                END IF;
            END IF;
            IF left_after >= 0 AND FOUND THEN
                ok := true;
                retry_after := NULL;
                remaining := rate_limiter._shown(left_after);
                RETURN NEXT;
                RETURN;
            END IF;
        ELSIF definition_ctid IS NULL
              AND (lock_free = 'on' OR lock_free IS NULL OR lock_free = '' OR rate_limiter._lock_free()) THEN
            -- No definition: a composite's name may take its fast path
            -- (56_composite.sql).
            left_after := rate_limiter._composite_fast(name, key, count);
            IF left_after IS NOT NULL THEN
                ok := true;
                retry_after := NULL;
                remaining := rate_limiter._shown(left_after);
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
    END IF;
    PERFORM rate_limiter._required(name, count, reserve, throws);
    -- A composite's name (56_composite.sql).
    IF NOT given AND definition_ctid IS NULL AND rate_limiter._composite_of(name) THEN
        RETURN QUERY SELECT * FROM rate_limiter._composite_answer(name, key, count, reserve, throws, true);
        RETURN;
    END IF;
    IF given THEN
        PERFORM rate_limiter._config(config);
    END IF;
    answer := rate_limiter._consume(name, key, count, reserve, config, given);
    IF NOT answer.ok AND throws THEN
        PERFORM rate_limiter._refuse(name, key, coalesce(answer.retry_after, 0), answer.remaining,
                                     answer.blocked, answer.block_reason);
    END IF;
    ok := answer.ok;
    retry_after := rate_limiter._interval(answer.retry_after);
    remaining := rate_limiter._shown(answer.remaining);
    RETURN NEXT;
END
$rate_limit$;
