-- The portable edition (docs/guarantees.md, "Portable edition"):
-- calendar windows' calendars (src/calendar.rs; docs/shapes.md,
-- "Calendar window"): where the windows of a unit start in a time zone,
-- from PostgreSQL's AT TIME ZONE, as the native extension computes them.
-- A calendar window's period is its unit's nominal length (a month 30
-- days, a year 365.25 days, as _period_micros counts them); times are
-- microseconds since 2000-01-01 (UTC for an instant, local for a local
-- time). (PL/pgSQL: the functions they call, in 20_math.sql, come later.)

-- The unit of a calendar window's period; NULL for any other period.
CREATE FUNCTION rate_limiter._calendar_unit(period bigint)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE period WHEN 60000000 THEN 'minute' WHEN 3600000000 THEN 'hour'
                       WHEN 86400000000 THEN 'day' WHEN 604800000000 THEN 'week'
                       WHEN 2592000000000 THEN 'month' WHEN 7776000000000 THEN 'quarter'
                       WHEN 31557600000000 THEN 'year' END
$$;

-- The period of a unit's windows (calendar_window's `unit`, any case);
-- 22023 for another name.
CREATE FUNCTION rate_limiter._calendar_period(unit text)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_period$
BEGIN
    CASE pg_catalog.lower(unit)
        WHEN 'minute' THEN RETURN '1 minute'::interval;
        WHEN 'hour' THEN RETURN '1 hour'::interval;
        WHEN 'day' THEN RETURN '1 day'::interval;
        WHEN 'week' THEN RETURN '7 days'::interval;
        WHEN 'month' THEN RETURN '1 mon'::interval;
        WHEN 'quarter' THEN RETURN '3 mons'::interval;
        WHEN 'year' THEN RETURN '1 year'::interval;
        ELSE
            RAISE EXCEPTION 'unknown calendar unit "%": use minute, hour, day, week, month, quarter or year', unit
                USING ERRCODE = '22023';
    END CASE;
END
$calendar_period$;

-- Checks that AT TIME ZONE knows zone (22023 naming time_zone otherwise).
-- The last zone checked is remembered for the session, so the calls of a
-- calendar window pay the check once.
CREATE FUNCTION rate_limiter._calendar_zone(zone text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_zone$
BEGIN
    IF zone = pg_catalog.current_setting('rate_limiter_portable.zone', true) THEN
        RETURN;
    END IF;
    BEGIN
        PERFORM '2000-01-01 00:00:00+00'::timestamptz AT TIME ZONE zone;
    EXCEPTION WHEN invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION 'unknown time zone "%": use a name such as ''America/New_York'' or ''UTC''', zone
            USING ERRCODE = '22023';
    END;
    PERFORM pg_catalog.set_config('rate_limiter_portable.zone', zone, false);
END
$calendar_zone$;

-- A local time (timestamp) as microseconds since 2000-01-01 00:00.
CREATE FUNCTION rate_limiter._local_micros(local timestamp)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (EXTRACT(epoch FROM local - '2000-01-01 00:00:00'::timestamp) * 1000000)::bigint $$;

-- The start of the window containing the instant at (Calendar::
-- window_start): minute and hour windows start where the local clock's
-- minute or hour did; the others at the local midnight of the unit's
-- first day, or, where that instant is after at (a midnight that occurs
-- twice), where the local clock said it. (Few statements: it runs on
-- every call of a calendar window.)
CREATE FUNCTION rate_limiter._calendar_start(period bigint, zone text, at bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_start$
DECLARE
    -- at as a timestamptz: through a float8 of microseconds where that is
    -- exact (within 2^52 us, 142 years, of 2000), else _timestamp.
    local timestamp := CASE WHEN at > -4503599627370496 AND at < 4503599627370496
                            THEN '2000-01-01 00:00:00+00'::timestamptz + at::float8 * '1 microsecond'::interval
                            ELSE rate_limiter._timestamp(at) END AT TIME ZONE zone;
    truncated timestamp := pg_catalog.date_trunc(rate_limiter._calendar_unit(period), local);
    midnight bigint;
BEGIN
    IF period > 3600000000 THEN
        midnight := rate_limiter._micros(truncated AT TIME ZONE zone);
        IF midnight <= at THEN
            RETURN midnight;
        END IF;
    END IF;
    RETURN at - (EXTRACT(epoch FROM local - truncated) * 1000000)::bigint;
END
$calendar_start$;

-- A local time's number of units since an origin (days, weeks from a
-- Monday, months, quarters or years), for counting windows. (A year BC
-- counts astronomically: 1 BC is year 0.)
CREATE FUNCTION rate_limiter._calendar_index(unit text, local timestamp)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_index$
DECLARE
    day bigint := local::date - '2000-01-01'::date;
    year bigint := EXTRACT(year FROM local);
    months bigint;
BEGIN
    IF year < 0 THEN
        year := year + 1;
    END IF;
    months := year * 12 + EXTRACT(month FROM local)::bigint - 1;
    RETURN CASE unit WHEN 'week' THEN pg_catalog.floor((day - 2)::numeric / 7)::bigint
                     WHEN 'month' THEN months
                     WHEN 'quarter' THEN pg_catalog.floor(months::numeric / 3)::bigint
                     WHEN 'year' THEN year
                     ELSE day END;
END
$calendar_index$;

-- How many windows start after the window start a up to and including
-- the window start b (Calendar::windows_between): minute and hour
-- windows by elapsed time (rounded to whole units), the others by the
-- local calendar; 0 when b is not after a.
CREATE FUNCTION rate_limiter._calendar_between(period bigint, zone text, a bigint, b bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_between$
DECLARE
    unit text := rate_limiter._calendar_unit(period);
BEGIN
    IF b <= a THEN
        RETURN 0;
    END IF;
    IF unit IN ('minute', 'hour') THEN
        RETURN greatest(pg_catalog.trunc((b::numeric - a::numeric + pg_catalog.div(period, 2)) / period)::bigint, 0);
    END IF;
    RETURN greatest(rate_limiter._calendar_index(unit, rate_limiter._timestamp(b) AT TIME ZONE zone)
                    - rate_limiter._calendar_index(unit, rate_limiter._timestamp(a) AT TIME ZONE zone), 0);
END
$calendar_between$;

-- The start of the n-th window after the window start s (Calendar::
-- nth_start, n >= 1): minute and hour windows the window start n units
-- later; the others the local midnight n units after s's.
CREATE FUNCTION rate_limiter._calendar_nth(period bigint, zone text, s bigint, n bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_nth$
DECLARE
    unit text := rate_limiter._calendar_unit(period);
BEGIN
    IF unit IN ('minute', 'hour') THEN
        RETURN rate_limiter._calendar_start(period, zone, s + n * period);
    END IF;
    RETURN rate_limiter._micros((pg_catalog.date_trunc(unit, rate_limiter._timestamp(s) AT TIME ZONE zone)
                                 + n * rate_limiter._calendar_period(unit)) AT TIME ZONE zone);
END
$calendar_nth$;

-- What a calendar window's state (value, ts) holds at now, for
-- rate_limit's fast path (as _refill: rate per window started since ts,
-- up to capacity; none started: the value as it is).
CREATE FUNCTION rate_limiter._calendar_tokens(rate float8, period bigint, capacity float8, zone text,
                                              value float8, ts bigint, now bigint)
RETURNS float8
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $calendar_tokens$
DECLARE
    start bigint := rate_limiter._calendar_start(period, zone, now);
    windows bigint := CASE WHEN start = ts THEN 0 ELSE rate_limiter._calendar_between(period, zone, ts, start) END;
BEGIN
    RETURN CASE WHEN windows > 0 THEN least(value + windows::float8 * rate, capacity) ELSE value END;
END
$calendar_tokens$;
