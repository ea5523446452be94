-- The portable edition (docs/guarantees.md, "Portable edition"): a
-- consuming call of a sharded limit (storage/shards.rs with SQL's row
-- locks), for _consume in 50_limit.sql.

-- The order in which a call of a limit with n (>= 2) shards looks at them
-- (shards::shard_order): two distinct shards drawn (the power of two
-- choices), then every other one once, from a random start.
CREATE FUNCTION rate_limiter._shard_order(n int, random bigint[])
RETURNS int[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $shard_order$
DECLARE
    first int := (random[1] % n)::int;
    second int := ((first + 1 + random[2] % (n - 1)) % n)::int;
    start int := (random[3] % n)::int;
BEGIN
    RETURN ARRAY[first, second]
        || ARRAY(SELECT (start + i) % n FROM pg_catalog.generate_series(0, n - 1) AS i
                 WHERE (start + i) % n NOT IN (first, second) ORDER BY i);
END
$shard_order$;

-- The advisory lock that marks a new shard row while the transaction
-- that inserts it is open: SQL cannot see a row another transaction has
-- inserted and not committed, so a shard without a visible row may be
-- one that is being inserted, and INSERT would then wait for that
-- transaction (and two calls inserting in opposite orders deadlock). The
-- native extension passes over such a shard; here, a call takes this lock
-- (pg_try_advisory_xact_lock, never waiting) before it inserts a shard
-- row, and a call that finds no row and cannot take the lock for a moment
-- treats the shard as busy. The keys: the state table's OID and a hash of
-- (name, key, shard) (a collision only makes a free shard look busy).
CREATE FUNCTION rate_limiter._new_row_lock(name text, key text, shard int2, OUT k1 int, OUT k2 int)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT 'rate_limiter.rate_limits'::pg_catalog.regclass::pg_catalog.oid::int,
           pg_catalog.hashtext(pg_catalog.concat_ws(E'\x1f', name, shard,
                                                    CASE WHEN key IS NULL THEN 'n' ELSE 'k' || key END))
$$;

-- Whether another transaction holds the lock of a new shard row (it is
-- inserting that row): taken and given back at once, at the session level.
CREATE FUNCTION rate_limiter._new_row_busy(name text, key text, shard int2)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $new_row_busy$
DECLARE
    lock record := rate_limiter._new_row_lock(name, key, shard);
BEGIN
    IF pg_catalog.pg_try_advisory_lock(lock.k1, lock.k2) THEN
        PERFORM pg_catalog.pg_advisory_unlock(lock.k1, lock.k2);
        RETURN false;
    END IF;
    RETURN true;
END
$new_row_busy$;

-- A shard peeked at without a lock and without waiting (the native
-- extension's peek with a dirty snapshot): 'row' with its state as the
-- call's snapshot sees it, 'new' when it has no row, 'busy' when a
-- transaction that was running when the snapshot was taken has written or
-- locked that row (its xmax is one of the snapshot's running
-- transactions: the row would make the call wait), with that state. A
-- row of another regime than regime has no state (NULLs: full); present:
-- there is a row.
CREATE FUNCTION rate_limiter._peek_shard(name text, key text, shard int2, regime bigint,
                                         OUT how text, OUT value float8, OUT ts bigint, OUT present boolean,
                                         OUT prev float8)
LANGUAGE plpgsql VOLATILE
AS $peek_shard$
DECLARE
    held_by xid;
    stored_regime bigint;
    snapshot pg_catalog.pg_snapshot;
    top numeric;
    holder numeric;
    own xid8;
BEGIN
    IF key IS NULL THEN
        SELECT r.value, rate_limiter._micros(r.ts), r.xmax, r.regime, r.prev INTO value, ts, held_by, stored_regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _peek_shard.name AND r.key IS NULL AND r.shard = _peek_shard.shard;
    ELSE
        SELECT r.value, rate_limiter._micros(r.ts), r.xmax, r.regime, r.prev INTO value, ts, held_by, stored_regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _peek_shard.name AND r.key = _peek_shard.key AND r.shard = _peek_shard.shard;
    END IF;
    present := FOUND;
    IF NOT present THEN
        how := CASE WHEN rate_limiter._new_row_busy(name, key, shard) THEN 'busy' ELSE 'new' END;
        RETURN;
    END IF;
    IF stored_regime IS DISTINCT FROM regime THEN
        value := NULL;
        ts := NULL;
        prev := NULL;
    END IF;
    how := 'row';
    IF held_by::text = '0' THEN
        RETURN;
    END IF;
    -- The row's xmax as a full transaction id (the epoch of the
    -- snapshot's xmax, or the one before): running when the snapshot saw
    -- it running or it started after the snapshot, and not this call's
    -- own transaction.
    snapshot := pg_catalog.pg_current_snapshot();
    top := pg_catalog.pg_snapshot_xmax(snapshot)::text::numeric;
    holder := pg_catalog.floor(top / 4294967296) * 4294967296 + held_by::text::numeric;
    IF holder > top + 2147483648 THEN
        holder := holder - 4294967296;
    END IF;
    own := pg_catalog.pg_current_xact_id_if_assigned();
    IF (own IS NULL OR holder <> own::text::numeric)
       AND holder >= pg_catalog.pg_snapshot_xmin(snapshot)::text::numeric
       AND (holder >= top OR EXISTS (SELECT FROM pg_catalog.pg_snapshot_xip(snapshot) AS running
                                    WHERE running::text::numeric = holder)) THEN
        how := 'busy';
    END IF;
END
$peek_shard$;

-- A shard's row locked without waiting (FOR UPDATE SKIP LOCKED): its
-- state as locked (NULLs for a row of another regime than regime), and
-- locked; NULLs and false when another transaction holds it (or it is
-- gone).
CREATE FUNCTION rate_limiter._lock_shard(name text, key text, shard int2, regime bigint,
                                         OUT value float8, OUT ts bigint, OUT locked boolean, OUT prev float8)
LANGUAGE plpgsql VOLATILE
AS $lock_shard$
DECLARE
    stored_regime bigint;
BEGIN
    IF key IS NULL THEN
        SELECT r.value, rate_limiter._micros(r.ts), r.regime, r.prev INTO value, ts, stored_regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _lock_shard.name AND r.key IS NULL AND r.shard = _lock_shard.shard FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.value, rate_limiter._micros(r.ts), r.regime, r.prev INTO value, ts, stored_regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _lock_shard.name AND r.key = _lock_shard.key AND r.shard = _lock_shard.shard
        FOR UPDATE SKIP LOCKED;
    END IF;
    locked := FOUND;
    IF locked AND stored_regime IS DISTINCT FROM regime THEN
        value := NULL;
        ts := NULL;
        prev := NULL;
    END IF;
END
$lock_shard$;

-- A consuming call of a sharded limit (storage/shards.rs, with SQL's row
-- locks). The shards are looked at in a random order, each peeked at
-- (_peek_shard): a busy one is passed over, as SKIP LOCKED would; the
-- first two free ones (with a row, or new) are the pair the math decides
-- on. Only the shards the decision writes are locked, without waiting: a
-- row someone locked meanwhile becomes busy and the next free shard takes
-- its place; once locked, the call decides again on the locked states with
-- the clock read after the locks. A refusal locks nothing (unless the
-- decision on locked rows is the refusal: they stay locked, as PostgreSQL
-- cannot give a row lock back). When fewer than two are free, the first
-- busy one stands in as a read-only partner, and the call waits for it
-- only if it is what stands in the way. When every shard is busy, the
-- call waits for the first one drawn. Before any such wait, with
-- lock-free refusals, every shard as committed (_committed): a refusal
-- there is the answer instead (refusals never wait: docs/guarantees.md,
-- "Concurrency and exactness"). It waits for a shard only while
-- every shard it holds has a lower number (no deadlock). restart: a new
-- row lost a race, or the definition changed: the caller starts again.
-- The rows are read and written under regime (47_state_rows.sql): a row
-- of another regime is free or busy as any row, reads as full, and is
-- updated.
CREATE FUNCTION rate_limiter._consume_sharded(name text, key text, count float8, reserve boolean,
                                              config rate_limiter.config, period bigint, start bigint,
                                              enforce boolean, inline_given boolean, regime bigint,
                                              OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                              OUT restart boolean)
LANGUAGE plpgsql VOLATILE
AS $consume_sharded$
DECLARE
    order_ int[] := rate_limiter._shard_order(config.shards, rate_limiter._draw());
    next_ int := 1;
    -- The pair (free shards, at most two) and the busy ones seen, in order.
    free_shard int[] := ARRAY[]::int[];
    free_exists boolean[] := ARRAY[]::boolean[];
    free_locked boolean[] := ARRAY[]::boolean[];
    free_value float8[] := ARRAY[]::float8[];
    free_ts bigint[] := ARRAY[]::bigint[];
    free_prev float8[] := ARRAY[]::float8[];
    busy_shard int[] := ARRAY[]::int[];
    busy_present boolean[] := ARRAY[]::boolean[];
    busy_value float8[] := ARRAY[]::float8[];
    busy_ts bigint[] := ARRAY[]::bigint[];
    busy_prev float8[] := ARRAY[]::float8[];
    held int := -1;
    looked record;
    capacity float8 := coalesce(config.capacity, config.rate);
    decision record;
    trial record;
    committed record;
    waiting int;
    partner_busy boolean;
    p_value float8;
    p_ts bigint;
    p_prev float8;
    index_ int;
    lost int;
    locked_now boolean;
    inserted int[] := ARRAY[]::int[];
    new_value float8;
    new_ts bigint;
    lock record;
BEGIN
    restart := false;
    FOR round IN 1..4 * config.shards + 8 LOOP
        WHILE pg_catalog.cardinality(free_shard) < 2 AND next_ <= config.shards LOOP
            looked := rate_limiter._peek_shard(name, key, order_[next_]::int2, regime);
            IF looked.how = 'busy' THEN
                busy_shard := busy_shard || order_[next_];
                busy_present := busy_present || looked.present;
                busy_value := busy_value || looked.value;
                busy_ts := busy_ts || looked.ts;
                busy_prev := busy_prev || looked.prev;
            ELSE
                free_shard := free_shard || order_[next_];
                free_exists := free_exists || (looked.how = 'row');
                free_locked := free_locked || false;
                free_value := free_value || looked.value;
                free_ts := free_ts || looked.ts;
                free_prev := free_prev || looked.prev;
            END IF;
            next_ := next_ + 1;
        END LOOP;
        IF pg_catalog.cardinality(free_shard) = 0 THEN
            -- Every shard is busy: wait for the first one drawn that the
            -- call may wait for.
            waiting := NULL;
            FOR i IN 1..coalesce(pg_catalog.cardinality(busy_shard), 0) LOOP
                IF held < busy_shard[i] THEN
                    waiting := i;
                    EXIT;
                END IF;
            END LOOP;
            IF waiting IS NULL THEN
                -- Waiting could deadlock: answer for the first two drawn.
                decision := rate_limiter._evaluate_pair(config.kind, config.rate, period, capacity, config.max_reserved,
                    config.shards, start, name, key, busy_value[1], busy_ts[1], busy_prev[1], false,
                    busy_value[2], busy_ts[2], busy_prev[2], false,
                    rate_limiter._now(), count, reserve);
                ok := decision.ok; retry_after := decision.retry_after; remaining := decision.remaining;
                RETURN;
            END IF;
            -- Refusals never wait (docs/guarantees.md, "Concurrency and
            -- exactness"): before waiting, every shard as committed; its
            -- refusal is the answer.
            IF rate_limiter._lock_free() THEN
                committed := rate_limiter._committed(name, key, count, reserve, config, period, start, regime);
                IF NOT committed.ok THEN
                    ok := false; retry_after := committed.retry_after; remaining := committed.remaining;
                    RETURN;
                END IF;
            END IF;
            IF NOT busy_present[waiting] THEN
                -- A new row that another transaction is inserting: wait for
                -- that transaction (for its lock), then read the row.
                lock := rate_limiter._new_row_lock(name, key, busy_shard[waiting]::int2);
                PERFORM pg_catalog.pg_advisory_xact_lock(lock.k1, lock.k2);
            END IF;
            looked := rate_limiter._row(name, key, busy_shard[waiting]::int2, true, regime);
            free_shard := ARRAY[busy_shard[waiting]];
            free_exists := ARRAY[looked.present];
            free_locked := ARRAY[looked.present];
            free_value := ARRAY[looked.value];
            free_ts := ARRAY[looked.ts];
            free_prev := ARRAY[looked.prev];
            IF looked.present THEN
                held := greatest(held, busy_shard[waiting]);
            END IF;
            busy_shard := busy_shard[1:waiting - 1] || busy_shard[waiting + 1:];
            busy_present := busy_present[1:waiting - 1] || busy_present[waiting + 1:];
            busy_value := busy_value[1:waiting - 1] || busy_value[waiting + 1:];
            busy_ts := busy_ts[1:waiting - 1] || busy_ts[waiting + 1:];
            busy_prev := busy_prev[1:waiting - 1] || busy_prev[waiting + 1:];
            CONTINUE;
        END IF;
        IF NOT inline_given AND NOT rate_limiter._still_applies(name, key, config, enforce, regime, NULL) THEN
            restart := true;
            RETURN;
        END IF;
        -- The pair: a second free shard, else the first busy one, read-only.
        partner_busy := pg_catalog.cardinality(free_shard) = 1;
        IF partner_busy THEN
            p_value := busy_value[1]; p_ts := busy_ts[1]; p_prev := busy_prev[1];
        ELSE
            p_value := free_value[2]; p_ts := free_ts[2]; p_prev := free_prev[2];
        END IF;
        decision := rate_limiter._evaluate_pair(config.kind, config.rate, period, capacity, config.max_reserved,
            config.shards, start, name, key, free_value[1], free_ts[1], free_prev[1], true,
            p_value, p_ts, p_prev, NOT partner_busy, rate_limiter._now(), count, reserve);
        IF NOT decision.ok AND partner_busy AND held < busy_shard[1] THEN
            -- Refused with a busy partner: if the partner is what stands in
            -- the way, wait for it and decide again.
            trial := rate_limiter._evaluate_pair(config.kind, config.rate, period, capacity, config.max_reserved,
                config.shards, start, name, key, free_value[1], free_ts[1], free_prev[1], true,
                p_value, p_ts, p_prev, true, rate_limiter._now(), count, reserve);
            IF trial.ok THEN
                IF rate_limiter._lock_free() THEN
                    committed := rate_limiter._committed(name, key, count, reserve, config, period, start, regime);
                    IF NOT committed.ok THEN
                        ok := false; retry_after := committed.retry_after; remaining := committed.remaining;
                        RETURN;
                    END IF;
                END IF;
                looked := rate_limiter._row(name, key, busy_shard[1]::int2, true, regime);
                free_shard := free_shard || busy_shard[1];
                free_exists := free_exists || looked.present;
                free_locked := free_locked || looked.present;
                free_value := free_value || looked.value;
                free_ts := free_ts || looked.ts;
                free_prev := free_prev || looked.prev;
                IF looked.present THEN
                    held := greatest(held, busy_shard[1]);
                END IF;
                busy_shard := busy_shard[2:];
                busy_present := busy_present[2:];
                busy_value := busy_value[2:];
                busy_ts := busy_ts[2:];
                busy_prev := busy_prev[2:];
                CONTINUE;
            END IF;
        END IF;
        IF NOT decision.ok THEN
            ok := false;
            retry_after := decision.retry_after;
            remaining := decision.remaining;
            RETURN;
        END IF;
        -- Lock the existing rows the decision writes, without waiting;
        -- then decide again (from the top) on the locked rows, the clock
        -- read after the locks.
        lost := NULL;
        locked_now := false;
        FOR i IN 1..pg_catalog.cardinality(free_shard) LOOP
            new_value := CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END;
            IF new_value IS NOT NULL AND free_exists[i] AND NOT free_locked[i] THEN
                looked := rate_limiter._lock_shard(name, key, free_shard[i]::int2, regime);
                IF NOT looked.locked THEN
                    lost := i;
                    EXIT;
                END IF;
                free_locked[i] := true;
                free_value[i] := looked.value;
                free_ts[i] := looked.ts;
                free_prev[i] := looked.prev;
                held := greatest(held, free_shard[i]);
                locked_now := true;
            END IF;
        END LOOP;
        IF lost IS NOT NULL THEN
            -- Someone holds it now (busy, first in line as the partner), or
            -- it is gone (new, free as before).
            looked := rate_limiter._peek_shard(name, key, free_shard[lost]::int2, regime);
            IF looked.how = 'new' THEN
                free_exists[lost] := false;
                free_value[lost] := NULL;
                free_ts[lost] := NULL;
                free_prev[lost] := NULL;
            ELSE
                busy_shard := free_shard[lost] || busy_shard;
                busy_present := looked.present || busy_present;
                busy_value := looked.value || busy_value;
                busy_ts := looked.ts || busy_ts;
                busy_prev := looked.prev || busy_prev;
                free_shard := free_shard[1:lost - 1] || free_shard[lost + 1:];
                free_exists := free_exists[1:lost - 1] || free_exists[lost + 1:];
                free_locked := free_locked[1:lost - 1] || free_locked[lost + 1:];
                free_value := free_value[1:lost - 1] || free_value[lost + 1:];
                free_ts := free_ts[1:lost - 1] || free_ts[lost + 1:];
                free_prev := free_prev[1:lost - 1] || free_prev[lost + 1:];
            END IF;
            CONTINUE;
        END IF;
        IF locked_now THEN
            CONTINUE;
        END IF;
        -- New rows first, so that a lost race leaves nothing written.
        FOR i IN 1..pg_catalog.cardinality(free_shard) LOOP
            new_value := CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END;
            new_ts := CASE WHEN i = 1 THEN decision.new_ts0 ELSE decision.new_ts1 END;
            IF NOT free_exists[i] AND new_value IS NOT NULL THEN
                lock := rate_limiter._new_row_lock(name, key, free_shard[i]::int2);
                IF pg_catalog.pg_try_advisory_xact_lock(lock.k1, lock.k2)
                   AND rate_limiter._write(name, key, free_shard[i]::int2, false, new_value, new_ts, regime,
                                           CASE WHEN i = 1 THEN decision.new_prev0 ELSE decision.new_prev1 END) THEN
                    inserted := inserted || free_shard[i];
                ELSE
                    -- Another transaction inserted it first, or is
                    -- inserting it: delete what this attempt inserted and
                    -- start again.
                    FOREACH index_ IN ARRAY inserted LOOP
                        IF key IS NULL THEN
                            DELETE FROM rate_limiter.rate_limits AS r
                            WHERE r.name = _consume_sharded.name AND r.key IS NULL AND r.shard = index_;
                        ELSE
                            DELETE FROM rate_limiter.rate_limits AS r
                            WHERE r.name = _consume_sharded.name AND r.key = _consume_sharded.key AND r.shard = index_;
                        END IF;
                    END LOOP;
                    restart := true;
                    RETURN;
                END IF;
            END IF;
        END LOOP;
        FOR i IN 1..pg_catalog.cardinality(free_shard) LOOP
            new_value := CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END;
            IF free_exists[i] AND new_value IS NOT NULL THEN
                PERFORM rate_limiter._write(name, key, free_shard[i]::int2, true, new_value,
                    CASE WHEN i = 1 THEN decision.new_ts0 ELSE decision.new_ts1 END, regime,
                    CASE WHEN i = 1 THEN decision.new_prev0 ELSE decision.new_prev1 END);
            END IF;
        END LOOP;
        ok := decision.ok;
        retry_after := decision.retry_after;
        remaining := decision.remaining;
        RETURN;
    END LOOP;
    RAISE EXCEPTION 'the shards of rate limit "%" kept changing during the call', rate_limiter._for_message(name)
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END
$consume_sharded$;
