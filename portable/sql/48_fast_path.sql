-- The portable edition (docs/guarantees.md, "Portable edition"): the
-- arithmetic of the fast paths, rate_limit's (50_limit.sql) and a
-- composite's (56_composite.sql), in one place. Each is one expression,
-- not STRICT, so that PostgreSQL inlines it into the caller's PL/pgSQL
-- expression (compiled once per transaction, where a function call would
-- cost on every call). They are _refill's, _tokens' and _evaluate's
-- arithmetic (20_math.sql, 21_sliding_window.sql, 15_calendar.sql), in the
-- same order, for the states the fast paths take: rate and value at most
-- 1e280 in magnitude, prev 0 or between 1e-200 and 1e280, a period of 1 to
-- 2^63 - 1 microseconds, count at most the capacity (so the plain
-- operators give what _add, _sub and _mul give). Times are microseconds
-- since 2000-01-01.

-- Whether a defined limit takes the fast paths for count: a period of 1
-- to 2^63 - 1 microseconds (period_us, numeric; NULL: no definition, or
-- sharded), no automatic blocks, rate and capacity in the range above,
-- count at most the capacity, and a token bucket, a calendar window, or a
-- fixed or sliding window with a start (its phase is not hashed per key).
CREATE FUNCTION rate_limiter._fast_limit(kind rate_limiter.kind, rate float8, capacity float8,
                                         start timestamptz, period_us numeric, block_for interval,
                                         count float8)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT period_us >= 1 AND period_us <= 9223372036854775807 AND block_for IS NULL
           AND rate >= 1e-280 AND rate <= 1e280 AND capacity <= 1e280 AND count <= capacity
           AND (kind = 'token bucket' OR start IS NOT NULL OR kind = 'calendar window')
$$;

-- Whether a stored state is in the fast paths' range: value at most
-- 1e280 in magnitude, prev NULL or between 1e-200 and 1e280 in magnitude.
CREATE FUNCTION rate_limiter._fast_state(value float8, prev float8)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT value >= -1e280 AND value <= 1e280
           AND (prev IS NULL OR pg_catalog.abs(prev) BETWEEN 1e-200 AND 1e280)
$$;

-- What an existing row's limit has left at now once count is taken from
-- it (negative: the call is refused). Exactly what the call leaves for a
-- token bucket and a fixed or sliding window; for a calendar window a
-- value that covers count is taken as it is (a calendar window's refill
-- never takes a value below count <= capacity away), so the answer is
-- only whether the call is admitted.
CREATE FUNCTION rate_limiter._fast_left(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                        zone text, value float8, ts bigint, prev float8, now bigint,
                                        count float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'token bucket'
                THEN least(value + (greatest(now - ts, 0)::float8 * rate) / period::float8, capacity) - count
                WHEN kind = 'sliding window'
                THEN rate_limiter._sliding_tokens(rate, period, value, ts, prev, now) - count
                WHEN kind = 'calendar window'
                THEN CASE WHEN value >= count THEN value
                          ELSE rate_limiter._calendar_tokens(rate, period, capacity, zone, value, ts, now) END
                     - count
                ELSE least(value + (greatest(now - ts, 0) / period)::float8 * rate, capacity) - count END
$$;

-- The value an admitted call stores in an existing row of a token bucket
-- or a fixed or sliding window: what it leaves, and for a sliding window
-- this window's count (the counts moved to now's window, the call counted
-- in it).
CREATE FUNCTION rate_limiter._fast_value(kind rate_limiter.kind, rate float8, period bigint, capacity float8,
                                         value float8, ts bigint, prev float8, now bigint, count float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind <> 'sliding window'
                THEN rate_limiter._fast_left(kind, rate, period, capacity, NULL, value, ts, prev, now, count)
                WHEN now - ts < period THEN value + count
                ELSE count END
$$;

-- The previous window's count an admitted call stores in an existing row
-- (NULL: 0): a sliding window's, one window on this window's count;
-- NULL for the other kinds.
CREATE FUNCTION rate_limiter._fast_prev(kind rate_limiter.kind, period bigint, value float8, ts bigint,
                                        prev float8, now bigint)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'sliding window'
                THEN CASE greatest(now - ts, 0) / period WHEN 0 THEN prev WHEN 1 THEN nullif(value, 0) END END
$$;

-- The timestamp an admitted call stores in an existing row of a token
-- bucket (the later of the row's and now: ts and now, as timestamps and
-- in microseconds) or a fixed or sliding window (the start of now's
-- window; 22008 past timestamptz's range).
CREATE FUNCTION rate_limiter._fast_ts(kind rate_limiter.kind, period bigint, ts timestamptz, ts_us bigint,
                                      now timestamptz, now_us bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'token bucket' THEN CASE WHEN now_us <= ts_us THEN ts ELSE now END
                ELSE rate_limiter._timestamp(ts_us + greatest(now_us - ts_us, 0) / period * period) END
$$;

-- A new row's value: a sliding window's count is count; the other kinds
-- store what is left of the capacity.
CREATE FUNCTION rate_limiter._fast_new_value(kind rate_limiter.kind, capacity float8, count float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'sliding window' THEN count ELSE capacity - count END
$$;

-- A new row's timestamp: a token bucket's now; a fixed or sliding
-- window's the start of now's window from its start (start_us; now less
-- (now - start) modulo the period, in bigint: _window_start's numeric is
-- for the ends of the range, and for a start after now); a calendar
-- window's the start of now's window (calendar, computed by the caller).
CREATE FUNCTION rate_limiter._fast_new_ts(kind rate_limiter.kind, period bigint, start_us bigint,
                                          now timestamptz, now_us bigint, calendar timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN kind = 'token bucket' THEN now
                WHEN kind = 'calendar window' THEN calendar
                WHEN now_us >= start_us
                THEN rate_limiter._timestamp(now_us - (now_us - start_us) % period)
                ELSE rate_limiter._timestamp(rate_limiter._window_start(start_us, period, now_us)) END
$$;

-- The clock of a fast path, read once its rows are held: the server's
-- clock, or rate_limiter.now_override (its setting's text, override) when
-- set (_now, 30_settings.sql). (VOLATILE as the clock is: inlined all the
-- same.)
CREATE FUNCTION rate_limiter._fast_now(override text)
RETURNS timestamptz
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN override IS NULL OR pg_catalog.btrim(override) = '' THEN pg_catalog.clock_timestamp()
                ELSE rate_limiter._timestamp(rate_limiter._now()) END
$$;
