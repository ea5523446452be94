-- The portable edition (docs/guarantees.md, "Portable edition"):
-- rate_credit (src/credit.rs) and rate_wait (src/wait.rs). A credit
-- leaves a row of another regime than the key's alone (it reads as full:
-- 47_state_rows.sql).

CREATE FUNCTION rate_limiter.rate_credit(
    name   text,
    key    text                DEFAULT NULL,
    count  float8              DEFAULT 1,
    config rate_limiter.config DEFAULT NULL)
RETURNS float8
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $rate_credit$
DECLARE
    given boolean := pg_catalog.num_nulls(config) = 0;
    resolved record;
    c rate_limiter.config;
    looked record;
    shard_rate float8;
    shard_capacity float8;
    held int[];
    held_values float8[];
    held_tss bigint[];
    held_prevs float8[];
    credited record;
    value_after float8;
    member text;
    now_ bigint;
    i int;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF count IS NULL THEN
        RAISE EXCEPTION 'count must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF given THEN
        PERFORM rate_limiter._config(config);
    END IF;
    IF NOT (count >= 0 AND count < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'count must be finite and at least zero, got %', rate_limiter._show(count) USING ERRCODE = '22023';
    END IF;
    -- A composite's name (56_composite.sql): every member; the least of
    -- their values afterwards.
    IF NOT given AND rate_limiter._composite_of(name) THEN
        FOR member IN SELECT m.member FROM rate_limiter.composites AS co,
                          pg_catalog.unnest(co.members) WITH ORDINALITY AS m(member, position)
                      WHERE co.name = rate_credit.name ORDER BY m.position LOOP
            value_after := least(value_after, rate_limiter.rate_credit(member, key, count));
        END LOOP;
        RETURN value_after;
    END IF;
    FOR attempt IN 1..17 LOOP
        resolved := rate_limiter._resolve(name, key, config, given);
        c := resolved.config;
        IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
            RAISE EXCEPTION 'cannot execute rate_credit() in a read-only transaction' USING ERRCODE = '25006';
        END IF;
        -- Lock every existing shard, in ascending order; a missing one is
        -- full and takes nothing.
        held := ARRAY[]::int[];
        held_values := ARRAY[]::float8[];
        held_tss := ARRAY[]::bigint[];
        held_prevs := ARRAY[]::float8[];
        FOR shard IN 0..greatest(c.shards, 1) - 1 LOOP
            looked := rate_limiter._row(name, key, shard::int2, true, resolved.regime);
            IF looked.value IS NOT NULL THEN
                held := held || shard;
                held_values := held_values || looked.value;
                held_tss := held_tss || looked.ts;
                held_prevs := held_prevs || looked.prev;
            END IF;
        END LOOP;
        IF NOT given AND NOT rate_limiter._still_applies(name, key, c, resolved.enforce, resolved.regime, resolved.blocked_until) THEN
            CONTINUE;
        END IF;
        shard_rate := c.rate / greatest(c.shards, 1)::float8;
        shard_capacity := coalesce(c.capacity, c.rate) / greatest(c.shards, 1)::float8;
        now_ := rate_limiter._now();
        credited := rate_limiter._credit(c.kind, shard_rate, resolved.period, shard_capacity,
                                         held_values, held_tss, held_prevs, count, now_, coalesce(c.time_zone, ''));
        FOR i IN 1..pg_catalog.cardinality(held) LOOP
            IF (credited.new_values[i], credited.new_tss[i], credited.new_prevs[i])
               IS DISTINCT FROM (held_values[i], held_tss[i], coalesce(held_prevs[i], 0)) THEN
                PERFORM rate_limiter._write(name, key, held[i]::int2, true, credited.new_values[i], credited.new_tss[i],
                                            resolved.regime, credited.new_prevs[i]);
            END IF;
        END LOOP;
        -- The value afterwards (tokens), summed over the shards in order
        -- (a missing shard is full).
        value_after := 0;
        FOR shard IN 0..greatest(c.shards, 1) - 1 LOOP
            i := pg_catalog.array_position(held, shard);
            value_after := value_after
                + CASE WHEN i IS NULL THEN shard_capacity
                       ELSE rate_limiter._tokens(c.kind, shard_rate, resolved.period, credited.new_values[i],
                                                 credited.new_tss[i], credited.new_prevs[i], now_) END;
        END LOOP;
        RETURN rate_limiter._shown(value_after);
    END LOOP;
    PERFORM rate_limiter._kept_changing(name);
END
$rate_credit$;

CREATE FUNCTION rate_limiter.rate_wait(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    timeout interval            DEFAULT '30 seconds',
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql VOLATILE ROWS 1 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $rate_wait$
DECLARE
    given boolean := pg_catalog.num_nulls(config) = 0;
    deadline numeric;
    probe record;
    attempt record;
    retry bigint;
    left_ float8;
    composite boolean;
BEGIN
    IF timeout IS NULL THEN
        RAISE EXCEPTION 'timeout must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF rate_limiter._interval_micros(timeout) < 0 THEN
        RAISE EXCEPTION 'timeout must not be negative' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute rate_wait() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    PERFORM rate_limiter._required(name, count, false, false);
    IF given THEN
        PERFORM rate_limiter._config(config);
    END IF;
    -- A composite's name (56_composite.sql): each try is its members'.
    composite := NOT given AND rate_limiter._composite_of(name);
    -- The deadline on the real clock, as timestamptz + interval counts.
    deadline := rate_limiter._micros(pg_catalog.clock_timestamp() + timeout);
    LOOP
        -- Look first (no lock, no transaction id); consume only when the
        -- limit would admit, in a subtransaction kept only when admitted.
        IF composite THEN
            probe := rate_limiter._composite(name, key, count, false, false);
        ELSE
            probe := rate_limiter._check(name, key, count, false, config, given);
        END IF;
        IF NOT probe.ok THEN
            retry := coalesce(probe.retry_after, 1000);
            left_ := probe.remaining;
        ELSE
            BEGIN
                IF composite THEN
                    attempt := rate_limiter._composite(name, key, count, false, true);
                ELSE
                    attempt := rate_limiter._consume(name, key, count, false, config, given);
                END IF;
                IF attempt.ok THEN
                    ok := true;
                    retry_after := rate_limiter._interval(attempt.retry_after);
                    remaining := rate_limiter._shown(attempt.remaining);
                    RETURN NEXT;
                    RETURN;
                END IF;
                -- Refused after all: undo the try.
                RAISE EXCEPTION USING ERRCODE = 'RLW01', MESSAGE = 'refused';
            EXCEPTION WHEN SQLSTATE 'RLW01' THEN
                retry := greatest(coalesce(attempt.retry_after, 0), 1000);
                left_ := attempt.remaining;
            END;
        END IF;
        IF rate_limiter._micros(pg_catalog.clock_timestamp())::numeric + retry > deadline THEN
            ok := false;
            retry_after := rate_limiter._interval(retry);
            remaining := rate_limiter._shown(left_);
            RETURN NEXT;
            RETURN;
        END IF;
        PERFORM pg_catalog.pg_sleep(greatest(retry::float8 / 1e6::float8, 0.001::float8));
    END LOOP;
END
$rate_wait$;
