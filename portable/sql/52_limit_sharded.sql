-- The portable edition (SPEC section 12): a consuming call of a sharded
-- limit (storage/shards.rs with SQL's row locks), for _consume in
-- 50_limit.sql.

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
    shard int;
    order_ int[] := ARRAY[first, second];
BEGIN
    FOR i IN 0..n - 1 LOOP
        shard := (start + i) % n;
        IF shard <> first AND shard <> second THEN
            order_ := order_ || shard;
        END IF;
    END LOOP;
    RETURN order_;
END
$shard_order$;

-- A shard locked without waiting (FOR UPDATE SKIP LOCKED): 'locked' with
-- its state, 'new' when it has no row, 'busy' with its committed state
-- when another transaction holds it.
CREATE FUNCTION rate_limiter._try_shard(name text, key text, shard int2,
                                        OUT how text, OUT value float8, OUT ts bigint)
LANGUAGE plpgsql VOLATILE
AS $try_shard$
BEGIN
    IF key IS NULL THEN
        SELECT r.value, rate_limiter._micros(r.ts) INTO value, ts FROM rate_limiter.rate_limits AS r
        WHERE r.name = _try_shard.name AND r.key IS NULL AND r.shard = _try_shard.shard FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.value, rate_limiter._micros(r.ts) INTO value, ts FROM rate_limiter.rate_limits AS r
        WHERE r.name = _try_shard.name AND r.key = _try_shard.key AND r.shard = _try_shard.shard FOR UPDATE SKIP LOCKED;
    END IF;
    IF FOUND THEN
        how := 'locked';
        RETURN;
    END IF;
    SELECT stored.value, stored.ts INTO value, ts FROM rate_limiter._row(name, key, shard, false) AS stored;
    how := CASE WHEN value IS NULL THEN 'new' ELSE 'busy' END;
END
$try_shard$;

-- A consuming call of a sharded limit (storage/shards.rs, with SQL's row
-- locks): the shards are looked at in a random order; the first two free
-- ones (locked without waiting, or new) are the pair the math decides
-- on. A shard another transaction holds is passed over (FOR UPDATE SKIP
-- LOCKED); when fewer than two are free, the first busy one stands in as
-- a read-only partner, and the call waits for it only if it is what
-- stands in the way. When every shard is busy, the call waits for the
-- first one drawn. It waits for a shard only while every shard it holds
-- has a lower number (no deadlock). restart: a new row lost a race, or
-- the definition changed: the caller starts again.
CREATE FUNCTION rate_limiter._consume_sharded(name text, key text, count float8, reserve boolean,
                                              config rate_limiter.config, period bigint, start bigint,
                                              enforce boolean, inline_given boolean,
                                              OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                              OUT restart boolean)
LANGUAGE plpgsql VOLATILE
AS $consume_sharded$
DECLARE
    order_ int[] := rate_limiter._shard_order(config.shards, rate_limiter._draw());
    next_ int := 1;
    -- The pair (free shards, at most two) and the busy ones seen, in order.
    free_shard int[] := ARRAY[]::int[];
    free_how text[] := ARRAY[]::text[];
    free_value float8[] := ARRAY[]::float8[];
    free_ts bigint[] := ARRAY[]::bigint[];
    busy_shard int[] := ARRAY[]::int[];
    busy_value float8[] := ARRAY[]::float8[];
    busy_ts bigint[] := ARRAY[]::bigint[];
    held int := -1;
    looked record;
    capacity float8 := coalesce(config.capacity, config.rate);
    decision record;
    trial record;
    waiting int;
    partner_busy boolean;
    p_value float8;
    p_ts bigint;
    now_ bigint;
    index_ int;
    inserted int[] := ARRAY[]::int[];
BEGIN
    restart := false;
    LOOP
        WHILE pg_catalog.cardinality(free_shard) < 2 AND next_ <= config.shards LOOP
            looked := rate_limiter._try_shard(name, key, order_[next_]::int2);
            IF looked.how = 'busy' THEN
                busy_shard := busy_shard || order_[next_];
                busy_value := busy_value || looked.value;
                busy_ts := busy_ts || looked.ts;
            ELSE
                free_shard := free_shard || order_[next_];
                free_how := free_how || looked.how;
                free_value := free_value || looked.value;
                free_ts := free_ts || looked.ts;
                IF looked.how = 'locked' THEN
                    held := greatest(held, order_[next_]);
                END IF;
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
                    config.shards, start, name, key, busy_value[1], busy_ts[1], false, busy_value[2], busy_ts[2], false,
                    rate_limiter._now(), count, reserve);
                ok := decision.ok; retry_after := decision.retry_after; remaining := decision.remaining;
                RETURN;
            END IF;
            looked := rate_limiter._row(name, key, busy_shard[waiting]::int2, true);
            free_shard := ARRAY[busy_shard[waiting]];
            free_how := ARRAY[CASE WHEN looked.value IS NULL THEN 'new' ELSE 'locked' END];
            free_value := ARRAY[looked.value];
            free_ts := ARRAY[looked.ts];
            IF looked.value IS NOT NULL THEN
                held := greatest(held, busy_shard[waiting]);
            END IF;
            busy_shard := busy_shard[1:waiting - 1] || busy_shard[waiting + 1:];
            busy_value := busy_value[1:waiting - 1] || busy_value[waiting + 1:];
            busy_ts := busy_ts[1:waiting - 1] || busy_ts[waiting + 1:];
            CONTINUE;
        END IF;
        IF NOT inline_given AND NOT rate_limiter._same_definition(name, config, enforce) THEN
            restart := true;
            RETURN;
        END IF;
        -- The pair: a second free shard, else the first busy one, read-only.
        partner_busy := pg_catalog.cardinality(free_shard) = 1;
        IF partner_busy THEN
            p_value := busy_value[1]; p_ts := busy_ts[1];
        ELSE
            p_value := free_value[2]; p_ts := free_ts[2];
        END IF;
        now_ := rate_limiter._now();
        decision := rate_limiter._evaluate_pair(config.kind, config.rate, period, capacity, config.max_reserved,
            config.shards, start, name, key, free_value[1], free_ts[1], true,
            p_value, p_ts, NOT partner_busy, now_, count, reserve);
        IF NOT decision.ok AND partner_busy AND held < busy_shard[1] THEN
            -- Refused with a busy partner: if the partner is what stands in
            -- the way, wait for it and decide again.
            trial := rate_limiter._evaluate_pair(config.kind, config.rate, period, capacity, config.max_reserved,
                config.shards, start, name, key, free_value[1], free_ts[1], true,
                p_value, p_ts, true, now_, count, reserve);
            IF trial.ok THEN
                looked := rate_limiter._row(name, key, busy_shard[1]::int2, true);
                free_shard := free_shard || busy_shard[1];
                free_how := free_how || CASE WHEN looked.value IS NULL THEN 'new' ELSE 'locked' END;
                free_value := free_value || looked.value;
                free_ts := free_ts || looked.ts;
                IF looked.value IS NOT NULL THEN
                    held := greatest(held, busy_shard[1]);
                END IF;
                busy_shard := busy_shard[2:];
                busy_value := busy_value[2:];
                busy_ts := busy_ts[2:];
                CONTINUE;
            END IF;
        END IF;
        IF decision.ok THEN
            -- New rows first, so that a lost race leaves nothing written.
            FOR i IN 1..pg_catalog.cardinality(free_shard) LOOP
                IF free_how[i] = 'new' AND (CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END) IS NOT NULL THEN
                    IF rate_limiter._write(name, key, free_shard[i]::int2, false,
                           CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END,
                           CASE WHEN i = 1 THEN decision.new_ts0 ELSE decision.new_ts1 END) THEN
                        inserted := inserted || free_shard[i];
                    ELSE
                        -- Another transaction inserted it first: delete what
                        -- this attempt inserted and start again.
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
                IF free_how[i] = 'locked' AND (CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END) IS NOT NULL THEN
                    PERFORM rate_limiter._write(name, key, free_shard[i]::int2, true,
                        CASE WHEN i = 1 THEN decision.new_value0 ELSE decision.new_value1 END,
                        CASE WHEN i = 1 THEN decision.new_ts0 ELSE decision.new_ts1 END);
                END IF;
            END LOOP;
        END IF;
        ok := decision.ok;
        retry_after := decision.retry_after;
        remaining := decision.remaining;
        RETURN;
    END LOOP;
END
$consume_sharded$;
