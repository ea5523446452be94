-- The portable edition (docs/guarantees.md, "Portable edition"): reading
-- a limit without consuming, status and http_headers (src/status.rs,
-- src/http.rs). No lock, no write: both work in read-only transactions and
-- on standbys.

-- Where (name, key) stands now (status::current), its rows read under
-- regime, and the time it was read at (microseconds). A key blocked until
-- blocked_until (43_blocks.sql) shows no tokens, and is full no earlier
-- than its block ends.
CREATE FUNCTION rate_limiter._current(name text, key text, config rate_limiter.config, period bigint, start bigint,
                                      regime bigint, blocked_until bigint,
                                      OUT value float8, OUT full_at bigint, OUT now_ bigint)
LANGUAGE plpgsql VOLATILE
AS $current$
DECLARE
    stored record := rate_limiter._states(name, key, greatest(config.shards, 1), regime);
    decided record;
BEGIN
    now_ := rate_limiter._now();
    decided := rate_limiter._status(config.kind, config.rate, period, coalesce(config.capacity, config.rate),
                                    config.shards, start, name, key, stored.stored_values, stored.stored_tss,
                                    stored.stored_prevs, now_, coalesce(config.time_zone, ''));
    value := decided.value;
    full_at := decided.full_at;
    IF blocked_until > now_ THEN
        value := 0;
        full_at := greatest(full_at, blocked_until);
    END IF;
END
$current$;

-- The config of a read of (name, key) (status::arguments): 22004 NULL
-- name, then the inline config, then the key's override or the
-- definition (42704).
CREATE FUNCTION rate_limiter._read_arguments(name text, key text, config rate_limiter.config)
RETURNS record
LANGUAGE plpgsql STABLE
AS $read_arguments$
DECLARE
    given boolean := pg_catalog.num_nulls(config) = 0;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF given THEN
        PERFORM rate_limiter._config(config);
    END IF;
    RETURN rate_limiter._resolve(name, key, config, given);
END
$read_arguments$;

CREATE FUNCTION rate_limiter.status(
    name   text,
    key    text                DEFAULT NULL,
    config rate_limiter.config DEFAULT NULL)
RETURNS TABLE (value float8, capacity float8, full_at timestamptz, shards int4)
LANGUAGE plpgsql VOLATILE ROWS 1 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $status$
BEGIN
    -- A concurrency limit (sql/concurrency.sql).
    IF name IS NOT NULL
       AND (CASE WHEN pg_catalog.num_nulls(config) = 0 THEN config.kind::text = 'concurrency'
                 ELSE EXISTS (SELECT FROM rate_limiter.definitions AS d
                              WHERE d.name = status.name AND d.kind::text = 'concurrency') END) THEN
        RETURN QUERY SELECT * FROM rate_limiter._concurrency_status(name, key, config);
        RETURN;
    END IF;
    -- A composite's name (56_composite.sql): its tightest member's (the
    -- fewest tokens now; of two alike, the one full later).
    IF config IS NULL AND name IS NOT NULL AND rate_limiter._composite_of(name) THEN
        RETURN QUERY
            SELECT s.value, s.capacity, s.full_at, s.shards
            FROM rate_limiter.composites AS c,
                 pg_catalog.unnest(c.members) WITH ORDINALITY AS m(member, position),
                 LATERAL rate_limiter._status(m.member, status.key, NULL) AS s
            WHERE c.name = status.name
            ORDER BY s.value, s.full_at DESC, m.position
            LIMIT 1;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM rate_limiter._status(name, key, config);
END
$status$;

-- status() of a limit.
CREATE FUNCTION rate_limiter._status(name text, key text, config rate_limiter.config)
RETURNS TABLE (value float8, capacity float8, full_at timestamptz, shards int4)
LANGUAGE plpgsql VOLATILE ROWS 1
AS $status_of$
DECLARE
    resolved record := rate_limiter._read_arguments(name, key, config);
    c rate_limiter.config := resolved.config;
    now_state record := rate_limiter._current(name, key, c, resolved.period, resolved.start, resolved.regime,
                                                      resolved.blocked_until);
BEGIN
    value := rate_limiter._shown(now_state.value);
    capacity := coalesce(c.capacity, c.rate);
    full_at := rate_limiter._timestamp(now_state.full_at);
    shards := c.shards;
    RETURN NEXT;
END
$status_of$;

-- A limit name as a structured-field string (RFC 9651): printable ASCII
-- only (22023 otherwise), " and \ escaped.
CREATE FUNCTION rate_limiter._sf_string(name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $sf_string$
DECLARE
    bytes bytea := pg_catalog.convert_to(name, pg_catalog.getdatabaseencoding());
BEGIN
    FOR i IN 0..pg_catalog.length(bytes) - 1 LOOP
        IF pg_catalog.get_byte(bytes, i) NOT BETWEEN 32 AND 126 THEN
            RAISE EXCEPTION 'a limit name in an HTTP header must be printable ASCII' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    RETURN '"' || pg_catalog.replace(pg_catalog.replace(name, '\', '\\'), '"', '\"') || '"';
END
$sf_string$;

-- A non-negative structured-field integer: truncated, capped at
-- 999,999,999,999,999 (NaN and negatives are 0, as Rust's `as u64`).
CREATE FUNCTION rate_limiter._sf_integer(value numeric)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE WHEN value = 'NaN'::numeric OR value <= 0 THEN '0'
                ELSE pg_catalog.trunc(least(value, 999999999999999))::text END
$$;

-- A rate as a structured-field number: a whole number (or one of 10^12
-- or more, rounded half away from zero) as an integer, else a decimal
-- with at most three fraction digits, rounded as Rust's {:.3} rounds
-- the exact binary value (ties to even), trailing zeros dropped.
CREATE FUNCTION rate_limiter._sf_number(value float8)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $sf_number$
DECLARE
    whole float8 := pg_catalog.trunc(value);
    fraction float8 := value - pg_catalog.trunc(value);
    scaled float8;
    k int := 0;
    numerator numeric;
    denominator numeric;
    thousandths numeric;
    rest numeric;
    written text;
BEGIN
    IF fraction = 0 OR value >= 1e12 THEN
        RETURN rate_limiter._sf_integer(pg_catalog.floor(value + 0.5)::numeric);
    END IF;
    -- fraction = scaled / 2^k exactly (scaled a whole number below 2^53).
    scaled := fraction;
    WHILE scaled <> pg_catalog.trunc(scaled) LOOP
        scaled := scaled * 2;
        k := k + 1;
    END LOOP;
    numerator := scaled::bigint::numeric * 1000;
    denominator := 2::numeric ^ k;
    thousandths := pg_catalog.div(numerator, denominator);
    rest := numerator - thousandths * denominator;
    IF 2 * rest > denominator OR (2 * rest = denominator AND pg_catalog.mod(thousandths, 2) = 1) THEN
        thousandths := thousandths + 1;
    END IF;
    thousandths := whole::bigint::numeric * 1000 + thousandths;
    written := pg_catalog.div(thousandths, 1000)::text || '.'
               || pg_catalog.lpad(pg_catalog.mod(thousandths, 1000)::text, 3, '0');
    written := pg_catalog.rtrim(written, '0');
    RETURN CASE WHEN pg_catalog.right(written, 1) = '.' THEN written || '0' ELSE written END;
END
$sf_number$;

-- Whole seconds of micros, rounded up (never early), at least 0.
CREATE FUNCTION rate_limiter._seconds(micros numeric)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT rate_limiter._sf_integer(pg_catalog.div(greatest(micros, 0) + 999999, 1000000)) $$;

-- An interval in microseconds as the native http_headers counts it: a
-- month 30 days, a day 24 hours.
CREATE FUNCTION rate_limiter._interval_micros(value interval)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ((EXTRACT(year FROM value) * 12 + EXTRACT(month FROM value)) * 30
            + EXTRACT(day FROM value)) * 86400000000
           + EXTRACT(hour FROM value) * 3600000000
           + EXTRACT(minute FROM value) * 60000000
           + EXTRACT(microseconds FROM value)
$$;

CREATE FUNCTION rate_limiter.http_headers(
    name        text,
    key         text                DEFAULT NULL,
    ok          boolean             DEFAULT NULL,
    retry_after interval            DEFAULT NULL,
    remaining   float8              DEFAULT NULL,
    config      rate_limiter.config DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $http_headers$
DECLARE
    members text[];
    fields jsonb;
    policies text[] := '{}';
    limits text[] := '{}';
BEGIN
    IF config IS NULL AND name IS NOT NULL AND rate_limiter._composite_of(name) THEN
        -- A composite's name (56_composite.sql): one policy per member,
        -- each member's tokens as status shows them now; Retry-After the
        -- call's (its arguments checked as for one limit).
        IF remaining = 'NaN'::float8 THEN
            RAISE EXCEPTION 'remaining must be a number' USING ERRCODE = '22023';
        END IF;
        IF ok IS NOT NULL AND NOT ok AND retry_after IS NULL THEN
            RAISE EXCEPTION 'retry_after must not be NULL' USING ERRCODE = '22004';
        END IF;
        IF rate_limiter._interval_micros(retry_after) < 0 THEN
            RAISE EXCEPTION 'retry_after must not be negative' USING ERRCODE = '22023';
        END IF;
        SELECT c.members INTO members FROM rate_limiter.composites AS c WHERE c.name = http_headers.name;
        FOR i IN 1..pg_catalog.cardinality(members) LOOP
            fields := rate_limiter._http_headers(members[i], key, NULL, NULL, NULL, NULL);
            policies := policies || (fields->>'RateLimit-Policy');
            limits := limits || (fields->>'RateLimit');
        END LOOP;
        fields := pg_catalog.jsonb_build_object('RateLimit-Policy', pg_catalog.array_to_string(policies, ', '),
                                                'RateLimit', pg_catalog.array_to_string(limits, ', '));
        IF ok IS NOT NULL AND NOT ok THEN
            fields := fields || pg_catalog.jsonb_build_object(
                'Retry-After', rate_limiter._seconds(rate_limiter._interval_micros(retry_after)));
        END IF;
        RETURN fields;
    END IF;
    RETURN rate_limiter._http_headers(name, key, ok, retry_after, remaining, config);
END
$http_headers$;

-- http_headers() of a limit.
CREATE FUNCTION rate_limiter._http_headers(name text, key text, ok boolean, retry_after interval,
                                           remaining float8, config rate_limiter.config)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $http_headers_of$
DECLARE
    resolved record := rate_limiter._read_arguments(name, key, config);
    c rate_limiter.config := resolved.config;
    label text := rate_limiter._sf_string(name);
    now_state record := rate_limiter._current(name, key, c, resolved.period, resolved.start, resolved.regime,
                                                      resolved.blocked_until);
    -- The current value as status shows it (http::headers).
    left_ float8 := coalesce(remaining, rate_limiter._shown(now_state.value));
    retry_micros numeric;
    until numeric;
    window_ bigint;
    headers jsonb;
BEGIN
    IF left_ = 'NaN'::float8 THEN
        RAISE EXCEPTION 'remaining must be a number' USING ERRCODE = '22023';
    END IF;
    IF ok IS NOT NULL AND NOT ok AND retry_after IS NULL THEN
        RAISE EXCEPTION 'retry_after must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF retry_after IS NOT NULL THEN
        retry_micros := rate_limiter._interval_micros(retry_after);
        IF retry_micros < 0 THEN
            RAISE EXCEPTION 'retry_after must not be negative' USING ERRCODE = '22023';
        END IF;
    END IF;
    IF c.kind = 'calendar window' THEN
        -- A calendar window's policy window is its current window.
        window_ := rate_limiter._calendar_start(resolved.period, c.time_zone, now_state.now_);
        window_ := rate_limiter._calendar_nth(resolved.period, c.time_zone, window_, 1) - window_;
    END IF;
    until := CASE WHEN ok IS NOT NULL AND NOT ok THEN retry_micros
                  ELSE now_state.full_at::numeric - now_state.now_::numeric END;
    headers := pg_catalog.jsonb_build_object(
        'RateLimit-Policy', label || ';q=' || rate_limiter._sf_number(c.rate) || ';w='
                            || rate_limiter._seconds(CASE WHEN c.kind = 'calendar window' THEN window_ ELSE resolved.period END),
        'RateLimit', label || ';r=' || rate_limiter._sf_integer(pg_catalog.floor(greatest(left_, 0))::numeric)
                     || ';t=' || rate_limiter._seconds(until));
    IF ok IS NOT NULL AND NOT ok THEN
        headers := headers || pg_catalog.jsonb_build_object('Retry-After', rate_limiter._seconds(retry_micros));
    END IF;
    RETURN headers;
END
$http_headers_of$;
