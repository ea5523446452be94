-- The portable edition (docs/guarantees.md, "Portable edition"): the
-- rate-limit math of algorithm/src/ (the native extension's
-- rate_limiter_algorithm crate), step for step, with the same floating-point
-- operations in the same order, so that both editions answer alike (the
-- differential test, tests/integration/tests/portable_differential.rs,
-- compares them).
--
-- Times are microseconds since 2000-01-01 00:00 UTC (what a timestamptz
-- stores), as bigint; durations are microseconds; tokens are float8.
-- A state is (value float8, ts bigint); NULL value: no row (full).

-- A timestamp as microseconds since 2000-01-01 (finite timestamps only).
CREATE FUNCTION rate_limiter._micros(at timestamptz)
RETURNS bigint
-- STABLE as extract(epoch FROM timestamptz) is, so that the planner
-- inlines it (it inlines no function declared less volatile than its body).
LANGUAGE sql STABLE STRICT PARALLEL SAFE
-- Through the interval since 2000-01-01, whose epoch PostgreSQL computes
-- in integers: extract(epoch FROM timestamptz) divides in numeric past
-- the year 294247 (where the timestamp minus the Unix epoch's offset no
-- longer fits in int64) and keeps about 16 digits, which cut the last
-- microseconds off (.789012 read as .789000).
AS $$ SELECT (EXTRACT(epoch FROM at - '2000-01-01 00:00:00+00'::timestamptz) * 1000000)::bigint $$;

-- Microseconds as an interval of only microseconds (as pgrx's
-- Interval::from_micros: no days, no months), exactly.
CREATE FUNCTION rate_limiter._interval(micros bigint)
RETURNS interval
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT pg_catalog.make_interval(hours => (micros / 3600000000 / 2)::int)
         + pg_catalog.make_interval(hours => (micros / 3600000000 - micros / 3600000000 / 2)::int)
         + pg_catalog.make_interval(secs => (micros % 3600000000)::float8 / 1000000)
$$;

-- Microseconds since 2000-01-01 as a timestamptz; 22008 outside
-- PostgreSQL's range (as the native storage::timestamp).
CREATE FUNCTION rate_limiter._timestamp(micros bigint)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $timestamp$
BEGIN
    IF micros < -211813488000000000 OR micros >= 9224318016000000000 THEN
        RAISE EXCEPTION 'the limit''s new timestamp is out of range for timestamptz' USING ERRCODE = '22008';
    END IF;
    RETURN '2000-01-01 00:00:00+00'::timestamptz + rate_limiter._interval(micros);
END
$timestamp$;

-- The length of period in microseconds, as PostgreSQL's extract(epoch)
-- counts it (a year 365.25 days, a month 30 days); 22023 when it is not
-- positive or does not fit a bigint (algorithm/src/time.rs).
CREATE FUNCTION rate_limiter._period_micros(period interval)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $period$
DECLARE
    total numeric := EXTRACT(epoch FROM period) * 1000000;
BEGIN
    IF total <= 0 THEN
        RAISE EXCEPTION 'period must be greater than zero' USING ERRCODE = '22023';
    END IF;
    IF total > 9223372036854775807 THEN
        RAISE EXCEPTION 'period is too long' USING ERRCODE = '22023';
    END IF;
    RETURN total::bigint;
END
$period$;

-- Float arithmetic as IEEE 754 (and Rust) does it: a result too large
-- is +-Infinity and one too small is 0, where PostgreSQL's float8
-- operators raise 22003 ("value out of range: overflow" / "underflow").
-- Used where a value can reach the ends of float8 (a debt near -1e308, a
-- rate of 5e-324); a caller checks the result as the native code checks
-- it. The plain operator answers whenever it can (operands of ordinary
-- size, or one of them infinite or 0); only the rest pays for the
-- exception block.
CREATE FUNCTION rate_limiter._ieee(op "char", a float8, b float8)
RETURNS float8
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $ieee$
DECLARE
    negative boolean;
BEGIN
    BEGIN
        RETURN CASE op WHEN '+' THEN a + b WHEN '-' THEN a - b WHEN '*' THEN a * b ELSE a / b END;
    EXCEPTION WHEN numeric_value_out_of_range THEN
        -- (A sum or difference overflows only towards a's sign.)
        negative := CASE WHEN op IN ('+', '-') THEN a < 0 ELSE (a < 0) <> (b < 0) END;
        IF SQLERRM LIKE '%underflow%' THEN
            RETURN CASE WHEN negative THEN '-0'::float8 ELSE 0 END;
        END IF;
        RETURN CASE WHEN negative THEN '-Infinity'::float8 ELSE 'Infinity'::float8 END;
    END;
END
$ieee$;

-- The four operations as _ieee does them, written to be inlined: the
-- plain operator where its operands cannot overflow or underflow (sums
-- of values below half the float8 range; products and quotients of
-- magnitudes between 1e-150 and 1e150, or of 0), _ieee for the rest.
-- Where a value can be a rate, count or debt near the ends of float8
-- (a rate near 1.8e308 on several shards, a count of 5e-324).
CREATE FUNCTION rate_limiter._add(a float8, b float8)
RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN a BETWEEN -8.9e307 AND 8.9e307 AND b BETWEEN -8.9e307 AND 8.9e307 THEN a + b
                ELSE rate_limiter._ieee('+', a, b) END
$$;

CREATE FUNCTION rate_limiter._sub(a float8, b float8)
RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN a BETWEEN -8.9e307 AND 8.9e307 AND b BETWEEN -8.9e307 AND 8.9e307 THEN a - b
                ELSE rate_limiter._ieee('-', a, b) END
$$;

CREATE FUNCTION rate_limiter._mul(a float8, b float8)
RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN (pg_catalog.abs(a) BETWEEN 1e-150 AND 1e150 OR a = 0)
                 AND (pg_catalog.abs(b) BETWEEN 1e-150 AND 1e150 OR b = 0) THEN a * b
                ELSE rate_limiter._ieee('*', a, b) END
$$;

CREATE FUNCTION rate_limiter._div(a float8, b float8)
RETURNS float8
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN (pg_catalog.abs(a) BETWEEN 1e-150 AND 1e150 OR a = 0)
                 AND pg_catalog.abs(b) BETWEEN 1e-150 AND 1e150 THEN a / b
                ELSE rate_limiter._ieee('/', a, b) END
$$;

-- A config checked as the native ConfigValues::to_config and
-- Config::validate check it (same order, same messages): its period and
-- start in microseconds. 22004 for a NULL required field, 22023 for an
-- invalid one.
CREATE FUNCTION rate_limiter._config_nulls(config rate_limiter.config)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $config_nulls$
BEGIN
    IF config.kind IS NULL THEN
        RAISE EXCEPTION 'kind must not be NULL' USING ERRCODE = '22004';
    ELSIF config.kind::text = 'concurrency' THEN
        -- (docs/concurrency.md: 42_overrides.sql.)
        PERFORM rate_limiter._not_a_rate_limit();
    ELSIF config.rate IS NULL THEN
        RAISE EXCEPTION 'rate must not be NULL' USING ERRCODE = '22004';
    ELSIF config.period IS NULL THEN
        RAISE EXCEPTION 'period must not be NULL' USING ERRCODE = '22004';
    ELSIF config.shards IS NULL THEN
        RAISE EXCEPTION 'shards must not be NULL' USING ERRCODE = '22004';
    END IF;
END
$config_nulls$;

-- Checks a config as the native ConfigValues::to_config does, in its
-- order; its period and start in microseconds, and its automatic blocks
-- (docs/blocks.md; block_for NULL: none; forget_after NULL: a day).
CREATE FUNCTION rate_limiter._config(config rate_limiter.config, OUT period bigint, OUT start bigint,
                                     OUT block_for bigint, OUT max_block bigint, OUT forget_after bigint)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $config$
DECLARE
    per_shard float8;
BEGIN
    PERFORM rate_limiter._config_nulls(config);
    IF config.time_zone IS NOT NULL THEN
        PERFORM rate_limiter._calendar_zone(config.time_zone);
    END IF;
    IF config.start IS NOT NULL AND NOT pg_catalog.isfinite(config.start) THEN
        RAISE EXCEPTION 'start must be a finite timestamp' USING ERRCODE = '22023';
    END IF;
    period := rate_limiter._period_micros(config.period);
    IF config.block_for IS NULL THEN
        IF config.max_block IS NOT NULL OR config.forget_after IS NOT NULL THEN
            RAISE EXCEPTION 'max_block and forget_after need a block_for' USING ERRCODE = '22023';
        END IF;
    ELSE
        block_for := rate_limiter._duration_micros(config.block_for, 'block_for');
        max_block := rate_limiter._duration_micros(config.max_block, 'max_block');
        forget_after := coalesce(rate_limiter._duration_micros(config.forget_after, 'forget_after'), 86400000000);
    END IF;
    IF config.kind = 'calendar window' AND config.time_zone IS NOT NULL AND rate_limiter._calendar_unit(period) IS NULL THEN
        RAISE EXCEPTION 'a calendar window''s period is its unit: 1 minute, 1 hour, 1 day, 7 days, 1 month, 3 months or 1 year (rate_limiter.calendar_window)'
            USING ERRCODE = '22023';
    END IF;
    IF config.kind <> 'calendar window' AND config.time_zone IS NOT NULL THEN
        RAISE EXCEPTION 'time_zone applies only to calendar windows' USING ERRCODE = '22023';
    END IF;
    IF NOT (config.rate > 0 AND config.rate < 'Infinity'::float8) THEN
        -- (NaN is greater than every number in SQL, but fails here too.)
        RAISE EXCEPTION 'rate must be finite and greater than zero, got %', rate_limiter._show(config.rate)
            USING ERRCODE = '22023';
    END IF;
    IF config.capacity IS NOT NULL AND NOT (config.capacity >= 0 AND config.capacity < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'capacity must be finite and at least zero, got %', rate_limiter._show(config.capacity)
            USING ERRCODE = '22023';
    END IF;
    IF config.max_reserved IS NOT NULL AND NOT (config.max_reserved >= 0 AND config.max_reserved < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'max_reserved must be finite and at least zero, got %', rate_limiter._show(config.max_reserved)
            USING ERRCODE = '22023';
    END IF;
    IF config.shards < 1 THEN
        RAISE EXCEPTION 'shards must be at least 1, got %', config.shards USING ERRCODE = '22023';
    END IF;
    IF config.kind = 'sliding window' AND config.capacity IS DISTINCT FROM config.rate AND config.capacity IS NOT NULL THEN
        RAISE EXCEPTION 'a sliding window''s capacity is its rate: leave capacity NULL' USING ERRCODE = '22023';
    END IF;
    IF config.kind = 'token bucket' AND config.start IS NOT NULL THEN
        RAISE EXCEPTION 'start applies only to fixed and sliding windows: a token bucket has no windows' USING ERRCODE = '22023';
    END IF;
    IF config.kind = 'calendar window' THEN
        IF config.start IS NOT NULL THEN
            RAISE EXCEPTION 'a calendar window''s windows start where the calendar says: leave start NULL' USING ERRCODE = '22023';
        ELSIF config.shards > 1 THEN
            RAISE EXCEPTION 'a calendar window is not sharded: shards must be 1, got %', config.shards USING ERRCODE = '22023';
        ELSIF config.time_zone IS NULL THEN
            RAISE EXCEPTION 'a calendar window needs a unit and a time_zone (rate_limiter.calendar_window)' USING ERRCODE = '22023';
        END IF;
    END IF;
    IF config.shards > 32767 THEN
        RAISE EXCEPTION 'shards must be at most 32767 (the state table''s shard column is a smallint), got %', config.shards
            USING ERRCODE = '22023';
    END IF;
    IF block_for IS NOT NULL THEN
        IF block_for <= 0 THEN
            RAISE EXCEPTION 'block_for must be greater than zero' USING ERRCODE = '22023';
        ELSIF max_block < block_for THEN
            RAISE EXCEPTION 'max_block must be at least block_for' USING ERRCODE = '22023';
        ELSIF forget_after < 0 THEN
            RAISE EXCEPTION 'forget_after must not be negative' USING ERRCODE = '22023';
        END IF;
    END IF;
    IF config.shards > 1 THEN
        per_shard := rate_limiter._div(config.rate, config.shards::float8);
        IF per_shard = 0 THEN
            RAISE EXCEPTION 'rate % split over % shards is too small to represent', rate_limiter._show(config.rate), config.shards
                USING ERRCODE = '22023';
        END IF;
    END IF;
    start := CASE WHEN config.start IS NOT NULL THEN rate_limiter._micros(config.start) END;
END
$config$;

-- A float as Rust's Display writes it in messages that do not use show():
-- "inf", "-inf", "NaN", else the shortest decimal.
CREATE FUNCTION rate_limiter._display(value float8)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN value = 'Infinity'::float8 THEN 'inf'
                WHEN value = '-Infinity'::float8 THEN '-inf'
                ELSE rate_limiter._show(value) END
$$;

-- a - b, saturated to the bigint range (Rust's i64::saturating_sub), and
-- a + b likewise.
CREATE FUNCTION rate_limiter._sub_sat(a bigint, b bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT greatest(least(a::numeric - b::numeric, 9223372036854775807), -9223372036854775808)::bigint $$;

CREATE FUNCTION rate_limiter._add_sat(a bigint, b bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT greatest(least(a::numeric + b::numeric, 9223372036854775807), -9223372036854775808)::bigint $$;

-- The HINT of a count no call could ever be admitted with
-- (config::COUNT_HINT): its first remedy works from every function that
-- takes a count (guard() and rate_wait have no reserve).
CREATE FUNCTION rate_limiter._count_hint()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 'Ask for at most that much in one call, or raise the limit''s capacity (rate_limiter.define, or the inline config). rate_limit, rate_check and rate_limit_all can also pass reserve => true, to go into debt up to max_reserved.'::text
$$;

-- Checks a request's count against a valid config (Config::validate_count):
-- finite and >= 0, and within what the limit (for a sharded one: two of
-- its shards) could ever serve. 22023 naming count.
CREATE FUNCTION rate_limiter._validate_count(config rate_limiter.config, count float8, reserve boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $validate_count$
DECLARE
    capacity float8;
    max_reserved float8;
    what text;
    debt text;
BEGIN
    IF NOT (count >= 0 AND count < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'count must be finite and at least zero, got %', rate_limiter._show(count)
            USING ERRCODE = '22023';
    END IF;
    -- A sliding window's call is never bigger than its rate, reserve or not.
    reserve := reserve AND config.kind <> 'sliding window';
    IF config.shards > 1 THEN
        capacity := rate_limiter._mul(2.0::float8, rate_limiter._div(coalesce(config.capacity, config.rate), config.shards::float8));
        max_reserved := rate_limiter._mul(2.0::float8, rate_limiter._div(config.max_reserved, config.shards::float8));
        what := pg_catalog.format('what two of its %s shards hold', config.shards);
        debt := 'the debt two shards may owe';
    ELSE
        capacity := coalesce(config.capacity, config.rate);
        max_reserved := config.max_reserved;
        what := 'the capacity';
        debt := 'max_reserved';
    END IF;
    IF NOT reserve AND count > capacity THEN
        RAISE EXCEPTION 'count % exceeds % (%), so the call could never succeed',
            rate_limiter._show(count), what, rate_limiter._show(capacity)
            USING ERRCODE = '22023', HINT = rate_limiter._count_hint();
    END IF;
    IF reserve AND max_reserved IS NOT NULL AND count > rate_limiter._ieee('+', capacity, max_reserved) THEN
        RAISE EXCEPTION 'count % exceeds % (%) plus % (%), so the call could never succeed',
            rate_limiter._show(count), what, rate_limiter._show(capacity), debt, rate_limiter._show(max_reserved)
            USING ERRCODE = '22023', HINT = rate_limiter._count_hint();
    END IF;
END
$validate_count$;

-- The fixed window's per-key phase (fixed_window::phase): XXH3-64 of the
-- name's length (8 bytes, little-endian), the name, a marker (0 for the
-- global limit, 1 then the key), modulo the period. XXH3 in PL/pgSQL costs
-- time in proportion to the input (seconds for a key of a megabyte), and a
-- call needs the phase once per shard it looks at (every shard of a
-- sharded limit, for rate_check or status): the last input's hash is kept
-- in the session setting rate_limiter_portable.phase, under the input's
-- SHA-256, so that a call hashes its name and key once.
CREATE FUNCTION rate_limiter._phase(name text, key text, period bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL RESTRICTED
AS $phase$
DECLARE
    input bytea := rate_limiter._le64_bytes(pg_catalog.octet_length(name))
                   || pg_catalog.convert_to(name, pg_catalog.getdatabaseencoding())
                   || CASE WHEN key IS NULL THEN '\x00'::bytea
                           ELSE '\x01'::bytea || pg_catalog.convert_to(key, pg_catalog.getdatabaseencoding()) END;
    digest text;
    kept text;
    hash numeric;
BEGIN
    -- A short input (the usual name and key) is hashed at once: keeping
    -- it would cost more than hashing it again.
    IF pg_catalog.octet_length(input) <= 240 THEN
        RETURN pg_catalog.mod(rate_limiter._u64(rate_limiter._xxh3(input)), period)::bigint;
    END IF;
    digest := pg_catalog.encode(pg_catalog.sha256(input), 'hex');
    kept := pg_catalog.current_setting('rate_limiter_portable.phase', true);
    IF kept IS NOT NULL AND pg_catalog.split_part(kept, ':', 1) = digest THEN
        hash := pg_catalog.split_part(kept, ':', 2)::numeric;
    ELSE
        hash := rate_limiter._u64(rate_limiter._xxh3(input));
        PERFORM pg_catalog.set_config('rate_limiter_portable.phase', digest || ':' || hash, false);
    END IF;
    RETURN pg_catalog.mod(hash, period)::bigint;
END
$phase$;

-- The start of the window of period that contains now, windows starting
-- at anchor + k * period (clamped to the bigint range).
CREATE FUNCTION rate_limiter._window_start(anchor bigint, period bigint, now bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    -- now less (now - anchor) modulo period, the remainder taken towards
    -- minus infinity: exact integer arithmetic (a numeric quotient is
    -- rounded to about 16 digits, which put now a few microseconds before
    -- a boundary far from the anchor into the next window).
    SELECT greatest(least(now::numeric - (pg_catalog.mod(now::numeric - anchor::numeric, period::numeric)
                                          + CASE WHEN pg_catalog.mod(now::numeric - anchor::numeric, period::numeric) < 0
                                                 THEN period ELSE 0 END),
                          9223372036854775807), -9223372036854775808)::bigint
$$;

-- The state of a limit without a row (decision::initial_state): full, at
-- now (token bucket) or at the start of the current window; a sliding
-- window: nothing admitted (value and prev 0) in the current window. `capacity` is
-- the (shard's) effective capacity; start is the fixed window's anchor
-- when given, else the per-key phase is used; a calendar window's
-- windows start where its zone's calendar says (15_calendar.sql).
CREATE FUNCTION rate_limiter._initial(kind rate_limiter.kind, capacity float8, period bigint, start bigint,
                                      name text, key text, now bigint, zone text DEFAULT '',
                                      OUT value float8, OUT ts bigint, OUT prev float8)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'sliding window' THEN 0::float8 ELSE capacity END,
           CASE WHEN kind = 'token bucket' THEN now
                WHEN kind = 'calendar window' THEN rate_limiter._calendar_start(period, zone, now)
                ELSE rate_limiter._window_start(coalesce(start, rate_limiter._phase(name, key, period)), period, now) END,
           0::float8
$$;

-- The state at now (decision::refill): the token bucket adds
-- elapsed * rate / period, the fixed window rate per window started,
-- capped at capacity; time never runs backwards. A sliding window moves
-- its counts to the window containing now; a calendar window adds rate
-- per window of its calendar started since ts (calendar_window::refill).
CREATE FUNCTION rate_limiter._refill(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                     value float8, ts bigint, prev float8, now bigint, zone text DEFAULT '',
                                     OUT new_value float8, OUT new_ts bigint, OUT new_prev float8)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $refill$
DECLARE
    elapsed bigint := greatest(rate_limiter._sub_sat(now, ts), 0);
    windows bigint;
BEGIN
    new_prev := 0;
    IF kind = 'sliding window' THEN
        -- sliding_window::Window::advance: one window on, this window's
        -- count becomes the previous one's; two or more, both are 0.
        new_ts := rate_limiter._window_start(ts, period, now);
        IF new_ts <= ts THEN
            new_ts := ts;
            new_value := value;
            new_prev := prev;
        ELSE
            new_prev := CASE WHEN new_ts = rate_limiter._add_sat(ts, period) THEN value ELSE 0 END;
            new_value := 0;
        END IF;
    ELSIF kind = 'calendar window' THEN
        new_ts := rate_limiter._calendar_start(period, zone, now);
        windows := rate_limiter._calendar_between(period, zone, ts, new_ts);
        IF windows <= 0 THEN
            new_value := value;
            new_ts := ts;
        ELSIF rate <= 1e280 AND value BETWEEN -1e280 AND 1e280 THEN
            new_value := least(value + windows::float8 * rate, capacity);
        ELSE
            new_value := least(rate_limiter._ieee('+', value, rate_limiter._ieee('*', windows::float8, rate)), capacity);
        END IF;
    ELSIF kind = 'token bucket' THEN
        IF rate BETWEEN 1e-280 AND 1e280 AND value BETWEEN -1e280 AND 1e280 THEN
            new_value := least(value + (elapsed::float8 * rate) / period::float8, capacity);
        ELSE
            new_value := least(rate_limiter._ieee('+', value,
                                   rate_limiter._ieee('/', rate_limiter._ieee('*', elapsed::float8, rate), period::float8)),
                               capacity);
        END IF;
        new_ts := greatest(ts, now);
    ELSE
        windows := elapsed / period;
        IF rate <= 1e280 AND value BETWEEN -1e280 AND 1e280 THEN
            new_value := least(value + windows::float8 * rate, capacity);
        ELSE
            new_value := least(rate_limiter._ieee('+', value, rate_limiter._ieee('*', windows::float8, rate)), capacity);
        END IF;
        new_ts := ts + windows * period;
    END IF;
END
$refill$;

-- A token amount as a caller is shown it (shown::shown): at most nine
-- decimals, rounded down to a multiple of 1e-9, except that a value
-- within 1e-12 (relative above one token) below a multiple is shown as
-- that multiple (float noise); never -0; 9007199.254740992 (2^53 / 1e9)
-- tokens or more, NaN and infinities as they are. round() of a float8 is
-- ties-to-even, as Rust's round_ties_even: the same IEEE operations as
-- the native extension, so the same float.
CREATE FUNCTION rate_limiter._shown(value float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- (One expression, not STRICT: PostgreSQL inlines it into the caller's
-- expression, where a function call would cost microseconds on every
-- call's answer. NULL gives NULL all the same.)
AS $$
    SELECT CASE WHEN NOT (pg_catalog.abs(value) < 9007199.254740992::float8) THEN value + 0::float8
                WHEN pg_catalog.round(value * 1e9::float8) / 1e9::float8 - value
                     > 1e-12::float8 * greatest(pg_catalog.abs(value), 1::float8)
                THEN (pg_catalog.round(value * 1e9::float8) - 1::float8) / 1e9::float8 + 0::float8
                ELSE pg_catalog.round(value * 1e9::float8) / 1e9::float8 + 0::float8 END
$$;

-- What a call of an unsharded limit may take (shown::available): the
-- refilled value, or what is shown of it when that is more, so that a
-- count equal to the shown remaining is admitted.
CREATE FUNCTION rate_limiter._available(value float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- (Inlined, as _shown.)
AS $$
    SELECT greatest(value, rate_limiter._shown(value))
$$;

-- One call of an unsharded limit, or of one shard of a sharded one
-- (decision::evaluate): rate, capacity and max_reserved are the
-- (shard's) effective values; (stored_value, stored_ts) the stored state
-- (NULL: no row, full). The answer, and the state to store (NULL: write
-- nothing). The count must be valid for the limit (see _validate_count).
CREATE FUNCTION rate_limiter._evaluate(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                       max_reserved float8, start bigint, name text, key text,
                                       stored_value float8, stored_ts bigint, stored_prev float8, now bigint,
                                       count float8, reserve boolean, zone text DEFAULT '',
                                       OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                       OUT new_value float8, OUT new_ts bigint, OUT new_prev float8)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $evaluate$
DECLARE
    base_value float8 := stored_value;
    base_ts bigint := stored_ts;
    base_prev float8 := coalesce(stored_prev, 0);
    initial record;
    refilled record;
    tokens float8;
    value float8;
    allowed float8;
    available float8;
BEGIN
    IF base_value IS NULL THEN
        initial := rate_limiter._initial(kind, capacity, period, start, name, key, now, zone);
        base_value := initial.value;
        base_ts := initial.ts;
        base_prev := initial.prev;
    END IF;
    refilled := rate_limiter._refill(kind, rate, period, capacity, base_value, base_ts, base_prev, now, zone);
    tokens := CASE WHEN kind = 'sliding window'
                   THEN rate_limiter._tokens(kind, rate, period, refilled.new_value, refilled.new_ts, refilled.new_prev, now)
                   ELSE refilled.new_value END;
    value := rate_limiter._ieee('-', tokens, count);
    IF value = 'NaN'::float8 OR value = 'Infinity'::float8 OR value = '-Infinity'::float8 THEN
        RAISE EXCEPTION 'the limit''s value would be out of range (%)', rate_limiter._show(value) USING ERRCODE = '22003';
    END IF;
    -- What the call may take: the value, or what is shown of it when that
    -- is more, so that a count equal to the shown remaining is admitted.
    available := rate_limiter._available(tokens);
    -- The state after taking count (decision::take): a sliding window
    -- counts it in this window.
    new_value := CASE WHEN kind = 'sliding window' THEN rate_limiter._ieee('+', refilled.new_value, count) ELSE value END;
    new_ts := refilled.new_ts;
    new_prev := refilled.new_prev;
    IF count <= available THEN
        ok := true;
        remaining := value;
        RETURN;
    END IF;
    allowed := CASE WHEN NOT reserve THEN 0 ELSE coalesce(max_reserved, 'Infinity'::float8) END;
    IF rate_limiter._ieee('-', count, available) <= allowed THEN
        -- A reservation: the work may run once the debt is paid back (a
        -- sliding window: when the same call without reserve would have
        -- succeeded).
        ok := true;
        IF kind = 'sliding window' THEN
            retry_after := rate_limiter._earliest(kind, rate, period, capacity, base_value, base_ts, base_prev,
                                                  count, 0, now, true);
        ELSE
            retry_after := rate_limiter._earliest(kind, rate, period, capacity, new_value, new_ts, 0, 0, 0, now, true, zone);
        END IF;
        remaining := value;
        RETURN;
    END IF;
    ok := false;
    new_value := NULL;
    new_ts := NULL;
    new_prev := NULL;
    retry_after := rate_limiter._earliest(kind, rate, period, capacity, base_value, base_ts, base_prev, count, allowed,
                                          now, true, zone);
    remaining := tokens;
END
$evaluate$;

