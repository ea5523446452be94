-- The portable edition (docs/guarantees.md, "Portable edition"): the
-- sliding window's math (algorithm/src/sliding_window.rs, docs/shapes.md),
-- with the same float operations in the same order, so that both editions
-- give the same answers. A sliding window's state is value (what the
-- window starting at ts admitted), ts and prev (what the window before
-- admitted); _refill (20_math.sql) moves it to the window containing now.

-- The estimate of a refilled state at now (Window::estimate): prev weighed
-- by the part of the previous window still inside the last period, plus
-- value: prev * (1 - f) + value, f = (now - ts) / period clamped to [0, 1].
CREATE FUNCTION rate_limiter._estimate(value float8, ts bigint, prev float8, period bigint, now bigint)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT rate_limiter._add(
               rate_limiter._mul(prev, 1::float8 - least(greatest(rate_limiter._sub_sat(now, ts), 0), period)::float8
                                                   / period::float8),
               value)
$$;

-- What a call may take at now from a state of any kind, refilled to now
-- (decision::tokens): its value, or a sliding window's rate - estimate.
CREATE FUNCTION rate_limiter._tokens(kind rate_limiter.kind, rate float8, period bigint,
                                     value float8, ts bigint, prev float8, now bigint)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'sliding window'
                THEN rate_limiter._sub(rate, rate_limiter._estimate(value, ts, prev, period, now))
                ELSE value END
$$;

-- Whether count fits under rate at now (Window::fits).
CREATE FUNCTION rate_limiter._window_fits(rate float8, period bigint, value float8, ts bigint, prev float8,
                                          now bigint, count float8)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT rate_limiter._add(rate_limiter._estimate(value, ts, prev, period, now), count) <= rate
$$;

-- The first whole microsecond t >= from of the window (value, ts, prev)
-- where count fits under rate, near f of the window, or NULL when it does
-- not fit before the window ends (Window::first_fit).
CREATE FUNCTION rate_limiter._window_first_fit(rate float8, period bigint, value float8, ts bigint, prev float8,
                                               from_ bigint, count float8, f float8)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $window_first_fit$
DECLARE
    window_end bigint := rate_limiter._add_sat(ts, period);
    -- (Rust's f.max(0.0) is 0 for NaN; SQL's greatest would keep NaN.)
    offset_ float8 := pg_catalog.ceil(rate_limiter._mul(CASE WHEN f > 0 AND f <> 'NaN'::float8 THEN f ELSE 0 END,
                                                        period::float8));
    t bigint;
BEGIN
    IF offset_ = 'NaN'::float8 OR offset_ >= period::float8 THEN
        RETURN NULL;
    END IF;
    t := greatest(rate_limiter._add_sat(ts, offset_::bigint), from_);
    -- Within a window the estimate only falls: step back while the
    -- microsecond before fits too, then on until one fits.
    FOR attempt IN 1..4 LOOP
        IF t > from_ AND rate_limiter._window_fits(rate, period, value, ts, prev, t - 1, count) THEN
            t := t - 1;
        END IF;
    END LOOP;
    FOR attempt IN 1..4 LOOP
        IF t >= window_end THEN
            RETURN NULL;
        END IF;
        IF rate_limiter._window_fits(rate, period, value, ts, prev, t, count) THEN
            RETURN t;
        END IF;
        t := t + 1;
    END LOOP;
    RETURN NULL;
END
$window_first_fit$;

-- The earliest instant t >= now at which count fits under rate in the
-- refilled state (value, ts, prev) if nothing else is admitted: this
-- window, the next (where prev is this window's value), or the one after
-- (both 0); NULL when never (count above rate) (Window::earliest).
CREATE FUNCTION rate_limiter._window_earliest(rate float8, period bigint, value float8, ts bigint, prev float8,
                                              now bigint, count float8)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $window_earliest$
DECLARE
    room float8;
    next_ts bigint := rate_limiter._add_sat(ts, period);
    f float8;
    t bigint;
BEGIN
    IF count = 'NaN'::float8 OR count > rate THEN
        RETURN NULL;
    END IF;
    IF rate_limiter._window_fits(rate, period, value, ts, prev, now, count) THEN
        RETURN now;
    END IF;
    -- This window: prev * (1 - f) <= rate - value - count.
    room := rate_limiter._sub(rate_limiter._sub(rate, value), count);
    IF room >= 0 AND prev > 0 THEN
        f := 1::float8 - rate_limiter._div(room, prev);
        t := rate_limiter._window_first_fit(rate, period, value, ts, prev, now, count, f);
        IF t IS NOT NULL THEN
            RETURN t;
        END IF;
    END IF;
    -- The next window: value * (1 - f) <= rate - count.
    room := rate_limiter._sub(rate, count);
    f := CASE WHEN value > room THEN 1::float8 - rate_limiter._div(room, value) ELSE 0 END;
    t := rate_limiter._window_first_fit(rate, period, 0, next_ts, value, greatest(next_ts, now), count, f);
    IF t IS NOT NULL THEN
        RETURN t;
    END IF;
    -- The one after: both 0, and count <= rate.
    RETURN rate_limiter._add_sat(next_ts, period);
END
$window_earliest$;

-- What a call may take at now from a stored state (value, ts, prev; prev
-- NULL is 0), moved to the window containing now: _refill and _tokens in
-- one expression, for rate_limit's fast path (50_limit.sql), which calls
-- it only with rate and value at most 1e280 in magnitude and prev 0 or
-- between 1e-200 and 1e280: there the plain operators give what _add,
-- _sub and _mul give (no overflow, no underflow), and the expression is
-- inlined into the caller's (not STRICT; no function that is). One window
-- on, this window's count is the previous one's; two or more, nothing
-- weighs.
CREATE FUNCTION rate_limiter._sliding_tokens(rate float8, period bigint, value float8, ts bigint, prev float8,
                                             now bigint)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN now - ts < period
                THEN rate - (coalesce(prev, 0) * (1::float8 - least(greatest(now - ts, 0), period)::float8
                                                               / period::float8)
                             + value)
                WHEN now - ts - period < period
                THEN rate - (value * (1::float8 - (now - ts - period)::float8 / period::float8) + 0::float8)
                ELSE rate - 0::float8 END
$$;
