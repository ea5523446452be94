-- The portable edition (docs/guarantees.md, "Portable edition"): when a
-- call would succeed (decision::earliest, decision::retry_after), for
-- every kind: the formula (a sliding window's: _window_earliest), checked
-- with the arithmetic a later call uses.

-- Whether count from state (value, ts) passes, delay microseconds after
-- now (none when delay is not positive), the test a call applies with a
-- debt of at most allowed: on the refilled value, or (shown) on what a
-- call of _evaluate may take (_available). For _earliest (the closure
-- `admitted` of decision::earliest).
CREATE FUNCTION rate_limiter._admitted_after(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                             value float8, ts bigint, prev float8, count float8, allowed float8,
                                             now bigint, delay numeric, shown boolean, zone text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $admitted_after$
DECLARE
    at bigint;
    later record;
    tokens float8;
BEGIN
    IF delay <= 0 THEN
        RETURN false;
    END IF;
    at := rate_limiter._add_sat(now, delay::bigint);
    later := rate_limiter._refill(kind, rate, period, capacity, value, ts, prev, at, zone);
    tokens := rate_limiter._tokens(kind, rate, period, later.new_value, later.new_ts, later.new_prev, at);
    RETURN rate_limiter._ieee('-', count,
        CASE WHEN shown THEN rate_limiter._available(tokens) ELSE tokens END) <= allowed;
END
$admitted_after$;

-- The smallest delay after which count from state (value, ts) passes the
-- test a call applies, with a debt of at most allowed
-- (decision::earliest): on the refilled value itself, or (shown) on what
-- a call of _evaluate may take (_available). The formula, checked with
-- the arithmetic a later call uses: later by a step (at most four) when
-- float rounding made it early, then earlier by as many steps as still
-- pass (galloping back 1, 2, 4, ... steps, then bisecting). 22003 when it
-- would be out of range.
CREATE FUNCTION rate_limiter._earliest(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                       value float8, ts bigint, prev float8, count float8, allowed float8,
                                       now bigint, shown boolean, zone text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $earliest$
DECLARE
    refilled record;
    tokens float8;
    estimate float8;
    step bigint;
    delay bigint;
    admitted_steps numeric := 0;
    refused_steps numeric := 1;
    middle numeric;
BEGIN
    refilled := rate_limiter._refill(kind, rate, period, capacity, value, ts, prev, now, zone);
    tokens := rate_limiter._ieee('-', rate_limiter._ieee('-', count, allowed), refilled.new_value);
    IF kind = 'calendar window' THEN
        -- Windows are not a fixed step: search among window starts.
        RETURN rate_limiter._calendar_earliest(kind, rate, period, capacity, value, ts, prev, count, allowed, now,
                                               shown, zone, refilled.new_ts, tokens);
    END IF;
    IF kind = 'sliding window' THEN
        -- sliding_window::wait: the instant the call fits, less now.
        estimate := coalesce((rate_limiter._window_earliest(rate, period, refilled.new_value, refilled.new_ts,
                                  refilled.new_prev, now, rate_limiter._ieee('-', count, allowed))::numeric
                              - now::numeric)::float8,
                             'Infinity'::float8);
        step := 1;
    ELSIF kind = 'token bucket' THEN
        estimate := pg_catalog.ceil(rate_limiter._ieee('+', (refilled.new_ts::numeric - now::numeric)::float8,
                        rate_limiter._ieee('/', rate_limiter._ieee('*', tokens, period::float8), rate)));
        step := 1;
    ELSE
        estimate := rate_limiter._ieee('+', (refilled.new_ts::numeric - now::numeric)::float8,
                        rate_limiter._ieee('*', pg_catalog.ceil(rate_limiter._ieee('/', tokens, rate)), period::float8));
        step := period;
    END IF;
    IF NOT (estimate < 2305843009213693952::float8) OR estimate = '-Infinity'::float8 THEN
        RAISE EXCEPTION 'retry_after would be % microseconds, which is out of range', rate_limiter._display(estimate)
            USING ERRCODE = '22003';
    END IF;
    delay := CASE WHEN estimate < 1 THEN 1 ELSE pg_catalog.trunc(estimate)::bigint END;
    FOR attempt IN 1..4 LOOP
        EXIT WHEN rate_limiter._admitted_after(kind, rate, period, capacity, value, ts, prev, count, allowed, now, delay, shown);
        delay := rate_limiter._add_sat(delay, step);
    END LOOP;
    -- Back while still admitted: gallop, then bisect between the last
    -- admitted number of steps and the first refused one.
    WHILE rate_limiter._admitted_after(kind, rate, period, capacity, value, ts, prev, count, allowed, now,
                                       delay::numeric - refused_steps * step::numeric, shown) LOOP
        admitted_steps := refused_steps;
        refused_steps := refused_steps * 2;
    END LOOP;
    WHILE refused_steps - admitted_steps > 1 LOOP
        middle := admitted_steps + pg_catalog.div(refused_steps - admitted_steps, 2);
        IF rate_limiter._admitted_after(kind, rate, period, capacity, value, ts, prev, count, allowed, now,
                                        delay::numeric - middle * step::numeric, shown) THEN
            admitted_steps := middle;
        ELSE
            refused_steps := middle;
        END IF;
    END LOOP;
    RETURN (delay::numeric - admitted_steps * step::numeric)::bigint;
END
$earliest$;

-- The smallest delay (whole microseconds; for a fixed window, a window
-- start) after which a call for count tokens from state (value, ts) is
-- admitted with a debt of at most allowed (decision::retry_after, the
-- exact test): see _earliest.
CREATE FUNCTION rate_limiter._retry_after(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                          value float8, ts bigint, prev float8, count float8, allowed float8,
                                          now bigint, zone text DEFAULT '')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT rate_limiter._earliest(kind, rate, period, capacity, value, ts, prev, count, allowed, now, false, zone)
$$;

-- _earliest of a calendar window (calendar_window::earliest): among the
-- window starts after refilled_ts, from the ceil(tokens / rate)-th, later
-- by a window (at most four) while the call is not admitted, then
-- earlier by as many windows as still are (galloping, then bisecting).
-- 22003 when that many windows of the nominal length (period) do not fit
-- 2^61 microseconds, or would come within twice their length of the end
-- of PostgreSQL's timestamps.
CREATE FUNCTION rate_limiter._calendar_earliest(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                                value float8, ts bigint, prev float8, count float8, allowed float8,
                                                now bigint, shown boolean, zone text, refilled_ts bigint, tokens float8)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_earliest$
DECLARE
    windows float8 := pg_catalog.ceil(rate_limiter._ieee('/', tokens, rate));
    n bigint;
    delay numeric;
    admitted_back bigint := 0;
    refused_back bigint := 1;
    middle bigint;
    found boolean;
BEGIN
    IF NOT (rate_limiter._ieee('*', windows, period::float8) < 2305843009213693951::float8) THEN
        RAISE EXCEPTION 'retry_after would be % calendar windows away, which is out of range', rate_limiter._display(windows)
            USING ERRCODE = '22003';
    END IF;
    n := CASE WHEN windows >= 1 THEN windows::bigint ELSE 1 END;
    FOR attempt IN 1..4 LOOP
        delay := rate_limiter._calendar_delay(period, zone, refilled_ts, n, now);
        EXIT WHEN rate_limiter._admitted_after(kind, rate, period, capacity, value, ts, prev, count, allowed, now,
                                               delay, shown, zone);
        n := n + 1;
    END LOOP;
    LOOP
        found := refused_back < n
                 AND rate_limiter._admitted_after(kind, rate, period, capacity, value, ts, prev, count, allowed, now,
                         rate_limiter._calendar_delay(period, zone, refilled_ts, n - refused_back, now), shown, zone);
        EXIT WHEN NOT found;
        admitted_back := refused_back;
        refused_back := refused_back * 2;
    END LOOP;
    WHILE refused_back - admitted_back > 1 LOOP
        middle := admitted_back + (refused_back - admitted_back) / 2;
        IF middle < n AND rate_limiter._admitted_after(kind, rate, period, capacity, value, ts, prev, count, allowed, now,
                              rate_limiter._calendar_delay(period, zone, refilled_ts, n - middle, now), shown, zone) THEN
            admitted_back := middle;
        ELSE
            refused_back := middle;
        END IF;
    END LOOP;
    RETURN rate_limiter._calendar_delay(period, zone, refilled_ts, n - admitted_back, now);
END
$calendar_earliest$;

-- Microseconds from now to the n-th window start after the window start
-- s (the closure `delay` of calendar_window::earliest), 22003 out of range.
CREATE FUNCTION rate_limiter._calendar_delay(period bigint, zone text, s bigint, n bigint, now bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_delay$
DECLARE
    delay numeric;
BEGIN
    IF now::numeric + 2 * n::numeric * period::numeric >= 9224318016000000000 THEN
        RAISE EXCEPTION 'retry_after would be % calendar windows away, which is out of range', rate_limiter._display(n::float8)
            USING ERRCODE = '22003';
    END IF;
    delay := rate_limiter._calendar_nth(period, zone, s, n)::numeric - now::numeric;
    IF delay >= 2305843009213693951 THEN
        RAISE EXCEPTION 'retry_after would be % calendar windows away, which is out of range', rate_limiter._display(n::float8)
            USING ERRCODE = '22003';
    END IF;
    RETURN delay::bigint;
END
$calendar_delay$;
