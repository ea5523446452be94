-- The portable edition (docs/guarantees.md, "Portable edition"): the math
-- of sharded limits (algorithm/src/shards.rs), on top of 20_math.sql's
-- single-state math.

-- How a call is served from two shards with refilled values v0 and v1
-- (shards::plan): 'single 0' / 'single 1' (wholly from that one, left with
-- `value`), 'both' (each left with `value`), or 'refused'. allowed is the
-- debt one shard may be left with.
CREATE FUNCTION rate_limiter._plan(v0 float8, v1 float8, writable0 boolean, writable1 boolean,
                                   count float8, allowed float8, OUT how text, OUT value float8)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $plan$
DECLARE
    level float8;
BEGIN
    -- The fuller first; on a tie, the first of the pair.
    IF v1 > v0 THEN
        IF writable1 AND rate_limiter._sub(v1, count) >= -allowed THEN
            how := 'single 1'; value := rate_limiter._sub(v1, count); RETURN;
        END IF;
        IF writable0 AND rate_limiter._sub(v0, count) >= -allowed THEN
            how := 'single 0'; value := rate_limiter._sub(v0, count); RETURN;
        END IF;
    ELSE
        IF writable0 AND rate_limiter._sub(v0, count) >= -allowed THEN
            how := 'single 0'; value := rate_limiter._sub(v0, count); RETURN;
        END IF;
        IF writable1 AND rate_limiter._sub(v1, count) >= -allowed THEN
            how := 'single 1'; value := rate_limiter._sub(v1, count); RETURN;
        END IF;
    END IF;
    IF writable0 AND writable1 THEN
        level := rate_limiter._div(rate_limiter._sub(rate_limiter._add(v0, v1), count), 2.0::float8);
        -- Taking from both never adds to either.
        IF level >= -allowed AND level <= least(v0, v1) THEN
            how := 'both'; value := level; RETURN;
        END IF;
    END IF;
    how := 'refused';
END
$plan$;

-- Whether the two (free) shards in states (v0, t0, p0) and (v1, t1, p1)
-- serve count at `at` by _plan, on what each could give then (_tokens).
CREATE FUNCTION rate_limiter._pair_served(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                          v0 float8, t0 bigint, p0 float8, v1 float8, t1 bigint, p1 float8,
                                          count float8, allowed float8, at bigint)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $pair_served$
DECLARE
    a record := rate_limiter._refill(kind, rate, period, capacity, v0, t0, p0, at);
    b record := rate_limiter._refill(kind, rate, period, capacity, v1, t1, p1, at);
BEGIN
    RETURN (rate_limiter._plan(rate_limiter._tokens(kind, rate, period, a.new_value, a.new_ts, a.new_prev, at),
                               rate_limiter._tokens(kind, rate, period, b.new_value, b.new_ts, b.new_prev, at),
                               true, true, count, allowed)).how <> 'refused';
END
$pair_served$;

-- The smallest delay t >= 1 after which the two (free) shards in states
-- (v0, t0) and (v1, t1) serve count by _plan (shards::pair_retry_after):
-- a binary search with the very test a later call applies.
CREATE FUNCTION rate_limiter._pair_retry_after(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                               v0 float8, t0 bigint, p0 float8, v1 float8, t1 bigint, p1 float8,
                                               count float8, allowed float8, now bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $pair_retry_after$
DECLARE
    high bigint := 1;
    low bigint := 0;
    middle bigint;
BEGIN
    high := greatest(high, rate_limiter._retry_after(kind, rate, period, capacity, v0, t0, p0, capacity, 0, now));
    high := greatest(high, rate_limiter._retry_after(kind, rate, period, capacity, v1, t1, p1, capacity, 0, now));
    IF NOT rate_limiter._pair_served(kind, rate, period, capacity, v0, t0, p0, v1, t1, p1, count, allowed,
                                     rate_limiter._add_sat(now, high)) THEN
        RAISE EXCEPTION 'two full shards cannot serve this count' USING ERRCODE = '22003';
    END IF;
    WHILE high - low > 1 LOOP
        middle := low + (high - low) / 2;
        IF rate_limiter._pair_served(kind, rate, period, capacity, v0, t0, p0, v1, t1, p1, count, allowed,
                                     rate_limiter._add_sat(now, middle)) THEN
            high := middle;
        ELSE
            low := middle;
        END IF;
    END LOOP;
    RETURN high;
END
$pair_retry_after$;

-- One call of a sharded limit on the two shards it looked at
-- (shards::evaluate_pair): the limit's config (shards >= 2), each shard's
-- stored state (NULL value: no row, full) and whether the call may
-- consume from it. The answer (remaining estimates the whole limit), and
-- each shard's state to store (NULL: write nothing). The count must be
-- valid for the limit.
CREATE FUNCTION rate_limiter._evaluate_pair(kind rate_limiter.kind, config_rate float8, period bigint,
                                            config_capacity float8, config_max_reserved float8, shards int,
                                            start bigint, name text, key text,
                                            value0 float8, ts0 bigint, prev0 float8, writable0 boolean,
                                            value1 float8, ts1 bigint, prev1 float8, writable1 boolean,
                                            now bigint, count float8, reserve boolean,
                                            OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                            OUT new_value0 float8, OUT new_ts0 bigint, OUT new_prev0 float8,
                                            OUT new_value1 float8, OUT new_ts1 bigint, OUT new_prev1 float8)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $evaluate_pair$
DECLARE
    rate float8 := rate_limiter._div(config_rate, shards::float8);
    capacity float8 := rate_limiter._div(config_capacity, shards::float8);
    max_reserved float8 := rate_limiter._div(config_max_reserved, shards::float8);
    allowed float8 := CASE WHEN NOT reserve THEN 0 ELSE coalesce(rate_limiter._div(config_max_reserved, shards::float8), 'Infinity'::float8) END;
    initial record;
    a record;
    b record;
    chosen record;
    tokens0 float8;
    tokens1 float8;
    after0 float8;
    after1 float8;
    wait bigint;
    sliding boolean := kind = 'sliding window';
BEGIN
    prev0 := coalesce(prev0, 0);
    prev1 := coalesce(prev1, 0);
    IF value0 IS NULL THEN
        initial := rate_limiter._initial(kind, capacity, period, start, name, key, now);
        value0 := initial.value; ts0 := initial.ts; prev0 := initial.prev;
    END IF;
    IF value1 IS NULL THEN
        initial := rate_limiter._initial(kind, capacity, period, start, name, key, now);
        value1 := initial.value; ts1 := initial.ts; prev1 := initial.prev;
    END IF;
    a := rate_limiter._refill(kind, rate, period, capacity, value0, ts0, prev0, now);
    b := rate_limiter._refill(kind, rate, period, capacity, value1, ts1, prev1, now);
    tokens0 := rate_limiter._tokens(kind, rate, period, a.new_value, a.new_ts, a.new_prev, now);
    tokens1 := rate_limiter._tokens(kind, rate, period, b.new_value, b.new_ts, b.new_prev, now);
    chosen := rate_limiter._plan(tokens0, tokens1, writable0, writable1, count, allowed);
    IF chosen.how = 'refused' THEN
        ok := false;
        retry_after := rate_limiter._pair_retry_after(kind, rate, period, capacity, value0, ts0, prev0,
                                                      value1, ts1, prev1, count, allowed, now);
        remaining := rate_limiter._mul(rate_limiter._div(rate_limiter._add(tokens0, tokens1), 2.0::float8),
                                       shards::float8);
        RETURN;
    END IF;
    IF chosen.value = 'NaN'::float8 OR chosen.value = 'Infinity'::float8 OR chosen.value = '-Infinity'::float8 THEN
        RAISE EXCEPTION 'the limit''s value would be out of range (%)', rate_limiter._show(chosen.value) USING ERRCODE = '22003';
    END IF;
    ok := true;
    -- The states after taking (decision::take, decision::settle): a
    -- sliding window counts what each shard gave in its window.
    IF chosen.how = 'single 0' THEN
        new_value0 := CASE WHEN sliding THEN rate_limiter._ieee('+', a.new_value, count) ELSE chosen.value END;
        new_ts0 := a.new_ts; new_prev0 := a.new_prev;
    ELSIF chosen.how = 'single 1' THEN
        new_value1 := CASE WHEN sliding THEN rate_limiter._ieee('+', b.new_value, count) ELSE chosen.value END;
        new_ts1 := b.new_ts; new_prev1 := b.new_prev;
    ELSE
        -- least: float rounding must never add tokens to a shard.
        new_value0 := least(chosen.value, tokens0); new_ts0 := a.new_ts; new_prev0 := a.new_prev;
        new_value1 := least(chosen.value, tokens1); new_ts1 := b.new_ts; new_prev1 := b.new_prev;
        IF sliding THEN
            new_value0 := rate_limiter._ieee('+', a.new_value, greatest(rate_limiter._ieee('-', tokens0, new_value0), 0));
            new_value1 := rate_limiter._ieee('+', b.new_value, greatest(rate_limiter._ieee('-', tokens1, new_value1), 0));
        END IF;
    END IF;
    after0 := CASE WHEN new_value0 IS NULL THEN tokens0
                   ELSE rate_limiter._tokens(kind, rate, period, new_value0, new_ts0, new_prev0, now) END;
    after1 := CASE WHEN new_value1 IS NULL THEN tokens1
                   ELSE rate_limiter._tokens(kind, rate, period, new_value1, new_ts1, new_prev1, now) END;
    IF new_value0 IS NOT NULL AND after0 < 0 THEN
        wait := rate_limiter._retry_after(kind, rate, period, capacity, new_value0, new_ts0, new_prev0, 0, 0, now);
        retry_after := greatest(retry_after, wait);
    END IF;
    IF new_value1 IS NOT NULL AND after1 < 0 THEN
        wait := rate_limiter._retry_after(kind, rate, period, capacity, new_value1, new_ts1, new_prev1, 0, 0, now);
        retry_after := greatest(retry_after, wait);
    END IF;
    remaining := rate_limiter._mul(rate_limiter._div(rate_limiter._add(after0, after1), 2.0::float8), shards::float8);
END
$evaluate_pair$;

-- The sum of values in their order, as a loop of IEEE additions from
-- from_ gives it: from -0 in shards::evaluate_fullest (Rust's f64 sum),
-- from +0 in status::current. largest: at least every |value| (the
-- caller knows it). One aggregate when no partial sum can overflow
-- (largest at most 8.9e307 / their number, so each float8 addition is
-- IEEE's and never raises), else the loop of rate_limiter._add. (from_ +
-- the aggregate, which starts from the first value: the two differ only
-- in the sign of a zero sum.)
CREATE FUNCTION rate_limiter._sum(values_ float8[], from_ float8, largest float8)
RETURNS float8
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $sum$
DECLARE
    total float8 := from_;
    v float8;
BEGIN
    IF largest <= 8.9e307 / greatest(pg_catalog.cardinality(values_), 1) THEN
        RETURN from_ + coalesce((SELECT pg_catalog.sum(u.v) FROM pg_catalog.unnest(values_) AS u(v)), from_);
    END IF;
    FOREACH v IN ARRAY values_ LOOP
        total := rate_limiter._add(total, v);
    END LOOP;
    RETURN total;
END
$sum$;

-- What rate_check answers for a sharded limit given every shard's stored
-- state (values[i], tss[i] for shard i - 1; NULL: no row, full), and what
-- rate_limit_all decides on them (shards::evaluate_fullest): the answer
-- for the two fullest shards (ties: the lower shard), with remaining the
-- sum over every shard (after the call when admitted); which shards
-- (0-based) and their states to store.
CREATE FUNCTION rate_limiter._evaluate_fullest(kind rate_limiter.kind, config_rate float8, period bigint,
                                               config_capacity float8, config_max_reserved float8, shards int,
                                               start bigint, name text, key text,
                                               stored_values float8[], stored_tss bigint[], stored_prevs float8[],
                                               now bigint, count float8, reserve boolean,
                                               OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                               OUT best0 int, OUT best1 int,
                                               OUT new_value0 float8, OUT new_ts0 bigint, OUT new_prev0 float8,
                                               OUT new_value1 float8, OUT new_ts1 bigint, OUT new_prev1 float8)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $evaluate_fullest$
DECLARE
    rate float8 := rate_limiter._div(config_rate, shards::float8);
    capacity float8 := rate_limiter._div(config_capacity, shards::float8);
    values_now float8[] := ARRAY[]::float8[];
    initial record;
    refilled record;
    total float8;
    decision record;
    i bigint;
    v float8;
    largest float8 := 0;
    -- The lowest two shards without a row (1-based; NULL: fewer), their
    -- value now, and the two fullest shards with a row and their values.
    rowless0 int;
    rowless1 int;
    rowless float8;
    row0 bigint;
    row0_value float8;
    row1 bigint;
    row1_value float8;
    best bigint[];
BEGIN
    -- Every shard without a row has the same state now: computed once,
    -- and the array filled with it in one step; then each stored row's
    -- state replaces its element in place. The two fullest (ties: the
    -- lower shard) are the best two of the two fullest rows and the two
    -- lowest rowless shards: work per row, not per shard.
    rowless0 := pg_catalog.array_position(stored_values, NULL);
    IF rowless0 IS NOT NULL THEN
        rowless1 := pg_catalog.array_position(stored_values, NULL, rowless0 + 1);
        initial := rate_limiter._initial(kind, capacity, period, start, name, key, now);
        refilled := rate_limiter._refill(kind, rate, period, capacity, initial.value, initial.ts, initial.prev, now);
        rowless := rate_limiter._tokens(kind, rate, period, refilled.new_value, refilled.new_ts, refilled.new_prev, now);
        values_now := pg_catalog.array_fill(rowless, ARRAY[shards]);
        largest := pg_catalog.abs(rowless);
    ELSE
        values_now := pg_catalog.array_fill(0::float8, ARRAY[shards]);
    END IF;
    FOR i IN SELECT o.n FROM pg_catalog.unnest(stored_values) WITH ORDINALITY AS o(v, n) WHERE o.v IS NOT NULL LOOP
        refilled := rate_limiter._refill(kind, rate, period, capacity, stored_values[i], stored_tss[i],
                                         coalesce(stored_prevs[i], 0), now);
        v := rate_limiter._tokens(kind, rate, period, refilled.new_value, refilled.new_ts, refilled.new_prev, now);
        values_now[i] := v;
        largest := greatest(largest, pg_catalog.abs(v));
        IF row0 IS NULL OR v > row0_value THEN
            row1 := row0; row1_value := row0_value;
            row0 := i; row0_value := v;
        ELSIF row1 IS NULL OR v > row1_value THEN
            row1 := i; row1_value := v;
        END IF;
    END LOOP;
    best := ARRAY(SELECT c.n - 1 FROM (VALUES (row0, row0_value), (row1, row1_value),
                                             (rowless0, rowless), (rowless1, rowless)) AS c(n, v)
                  WHERE c.n IS NOT NULL ORDER BY c.v DESC, c.n LIMIT 2);
    best0 := best[1];
    best1 := best[2];
    decision := rate_limiter._evaluate_pair(kind, config_rate, period, config_capacity, config_max_reserved, shards,
        start, name, key,
        stored_values[best0 + 1], stored_tss[best0 + 1], stored_prevs[best0 + 1], true,
        stored_values[best1 + 1], stored_tss[best1 + 1], stored_prevs[best1 + 1], true,
        now, count, reserve);
    total := rate_limiter._sum(values_now, '-0'::float8, largest);
    ok := decision.ok;
    retry_after := decision.retry_after;
    remaining := CASE WHEN decision.ok THEN rate_limiter._sub(total, count) ELSE total END;
    new_value0 := decision.new_value0; new_ts0 := decision.new_ts0; new_prev0 := decision.new_prev0;
    new_value1 := decision.new_value1; new_ts1 := decision.new_ts1; new_prev1 := decision.new_prev1;
END
$evaluate_fullest$;

-- Tokens given back (credit::credit): every state refilled to now, then
-- count shared out, the emptiest shard first (ties: the lower shard),
-- none above capacity. values and tss: the stored states (no NULLs).
CREATE FUNCTION rate_limiter._credit(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                     stored_values float8[], stored_tss bigint[], stored_prevs float8[],
                                     count float8, now bigint, zone text DEFAULT '',
                                     OUT new_values float8[], OUT new_tss bigint[], OUT new_prevs float8[])
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $credit$
DECLARE
    refilled record;
    left_over float8 := count;
    tokens_now float8[] := ARRAY[]::float8[];
    room float8;
    taken float8;
    i int;
BEGIN
    new_values := ARRAY[]::float8[];
    new_tss := ARRAY[]::bigint[];
    new_prevs := ARRAY[]::float8[];
    FOR n IN 1..pg_catalog.cardinality(stored_values) LOOP
        refilled := rate_limiter._refill(kind, rate, period, capacity, stored_values[n], stored_tss[n],
                                         coalesce(stored_prevs[n], 0), now, zone);
        new_values := new_values || refilled.new_value;
        new_tss := new_tss || refilled.new_ts;
        new_prevs := new_prevs || refilled.new_prev;
        tokens_now := tokens_now || rate_limiter._tokens(kind, rate, period, refilled.new_value, refilled.new_ts,
                                                         refilled.new_prev, now);
    END LOOP;
    FOR i IN SELECT o.n FROM pg_catalog.unnest(tokens_now) WITH ORDINALITY AS o(v, n) ORDER BY o.v, o.n LOOP
        EXIT WHEN left_over <= 0;
        -- A sliding window gives back at most what its current window
        -- admitted: its previous window's count is history.
        room := greatest(CASE WHEN kind = 'sliding window' THEN new_values[i] ELSE capacity - new_values[i] END, 0);
        taken := least(room, left_over);
        new_values[i] := CASE WHEN kind = 'sliding window' THEN new_values[i] - taken ELSE new_values[i] + taken END;
        left_over := left_over - taken;
    END LOOP;
END
$credit$;

-- Where a limit stands (status::status): tokens available now summed over
-- its shards, and when it is full again (now when full). values and tss
-- as for _evaluate_fullest (NULL: no row).
CREATE FUNCTION rate_limiter._status(kind rate_limiter.kind, config_rate float8, period bigint,
                                     config_capacity float8, shards int, start bigint, name text, key text,
                                     stored_values float8[], stored_tss bigint[], stored_prevs float8[], now bigint,
                                     zone text DEFAULT '',
                                     OUT value float8, OUT full_at bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $status$
DECLARE
    rate float8 := rate_limiter._div(config_rate, shards::float8);
    capacity float8 := rate_limiter._div(config_capacity, shards::float8);
    initial record;
    refilled record;
    values_now float8[];
    tokens float8;
    i bigint;
    largest float8 := 0;
BEGIN
    full_at := now;
    -- Every shard without a row has the same state: its value now and
    -- when it is full are computed once, and the array filled with it;
    -- then each stored row's state replaces its element (work per row).
    IF pg_catalog.array_position(stored_values, NULL) IS NOT NULL THEN
        initial := rate_limiter._initial(kind, capacity, period, start, name, key, now, zone);
        refilled := rate_limiter._refill(kind, rate, period, capacity, initial.value, initial.ts, initial.prev, now, zone);
        tokens := rate_limiter._tokens(kind, rate, period, refilled.new_value, refilled.new_ts, refilled.new_prev, now);
        values_now := pg_catalog.array_fill(tokens, ARRAY[shards]);
        largest := pg_catalog.abs(tokens);
        IF tokens < capacity THEN
            full_at := greatest(full_at, rate_limiter._add_sat(now,
                rate_limiter._retry_after(kind, rate, period, capacity, initial.value, initial.ts, initial.prev,
                                          capacity, 0, now, zone)));
        END IF;
    ELSE
        values_now := pg_catalog.array_fill(0::float8, ARRAY[shards]);
    END IF;
    FOR i IN SELECT o.n FROM pg_catalog.unnest(stored_values) WITH ORDINALITY AS o(v, n) WHERE o.v IS NOT NULL LOOP
        refilled := rate_limiter._refill(kind, rate, period, capacity, stored_values[i], stored_tss[i],
                                         coalesce(stored_prevs[i], 0), now, zone);
        tokens := rate_limiter._tokens(kind, rate, period, refilled.new_value, refilled.new_ts, refilled.new_prev, now);
        values_now[i] := tokens;
        largest := greatest(largest, pg_catalog.abs(tokens));
        IF tokens < capacity THEN
            full_at := greatest(full_at, rate_limiter._add_sat(now,
                rate_limiter._retry_after(kind, rate, period, capacity, stored_values[i], stored_tss[i],
                                          coalesce(stored_prevs[i], 0), capacity, 0, now, zone)));
        END IF;
    END LOOP;
    value := rate_limiter._sum(values_now, 0::float8, largest);
END
$status$;
