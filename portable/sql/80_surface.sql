-- The portable edition (docs/guarantees.md, "Portable edition"): the
-- config constructors, and what the portable edition does not have:
-- statistics (shared memory) and Citus (C code on every node). Those
-- functions exist with the native signatures and raise 0A000 with a hint
-- naming the native extension, so a caller learns why rather than meeting
-- a missing function.

CREATE FUNCTION rate_limiter.token_bucket(
    rate         float8,
    period       interval,
    capacity     float8 DEFAULT NULL,
    max_reserved float8 DEFAULT NULL,
    shards       int4   DEFAULT 1)
RETURNS rate_limiter.config
-- SECURITY DEFINER: it checks the config with the extension's internal
-- functions, which no other role may call.
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $token_bucket$
DECLARE
    made rate_limiter.config := ROW('token bucket', rate, period, capacity, max_reserved, shards, NULL,
                                      NULL, NULL, NULL, NULL)::rate_limiter.config;
BEGIN
    IF rate IS NULL THEN
        RAISE EXCEPTION 'rate must not be NULL' USING ERRCODE = '22004';
    ELSIF period IS NULL THEN
        RAISE EXCEPTION 'period must not be NULL' USING ERRCODE = '22004';
    ELSIF shards IS NULL THEN
        RAISE EXCEPTION 'shards must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._config(made);
    RETURN made;
END
$token_bucket$;

CREATE FUNCTION rate_limiter.fixed_window(
    rate         float8,
    period       interval,
    capacity     float8      DEFAULT NULL,
    max_reserved float8      DEFAULT NULL,
    shards       int4        DEFAULT 1,
    start        timestamptz DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fixed_window$
DECLARE
    made rate_limiter.config := ROW('fixed window', rate, period, capacity, max_reserved, shards, start,
                                      NULL, NULL, NULL, NULL)::rate_limiter.config;
BEGIN
    IF rate IS NULL THEN
        RAISE EXCEPTION 'rate must not be NULL' USING ERRCODE = '22004';
    ELSIF period IS NULL THEN
        RAISE EXCEPTION 'period must not be NULL' USING ERRCODE = '22004';
    ELSIF shards IS NULL THEN
        RAISE EXCEPTION 'shards must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._config(made);
    RETURN made;
END
$fixed_window$;

CREATE FUNCTION rate_limiter.sliding_window(
    rate         float8,
    period       interval,
    max_reserved float8      DEFAULT NULL,
    shards       int4        DEFAULT 1,
    start        timestamptz DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $sliding_window$
DECLARE
    made rate_limiter.config := ROW('sliding window', rate, period, NULL, max_reserved, shards, start,
                                      NULL, NULL, NULL, NULL)::rate_limiter.config;
BEGIN
    IF rate IS NULL THEN
        RAISE EXCEPTION 'rate must not be NULL' USING ERRCODE = '22004';
    ELSIF period IS NULL THEN
        RAISE EXCEPTION 'period must not be NULL' USING ERRCODE = '22004';
    ELSIF shards IS NULL THEN
        RAISE EXCEPTION 'shards must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._config(made);
    RETURN made;
END
$sliding_window$;

CREATE FUNCTION rate_limiter.calendar_window(
    rate         float8,
    unit         text,
    time_zone    text   DEFAULT 'UTC',
    capacity     float8 DEFAULT NULL,
    max_reserved float8 DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $calendar_window$
DECLARE
    made rate_limiter.config;
BEGIN
    -- The native order: rate, the unit, the zone, then the config's checks.
    IF rate IS NULL THEN
        RAISE EXCEPTION 'rate must not be NULL' USING ERRCODE = '22004';
    ELSIF unit IS NULL THEN
        RAISE EXCEPTION 'unit must not be NULL' USING ERRCODE = '22004';
    END IF;
    made := ROW('calendar window', rate, rate_limiter._calendar_period(unit), capacity, max_reserved, 1, NULL,
                NULL, NULL, NULL, time_zone)::rate_limiter.config;
    IF time_zone IS NULL THEN
        RAISE EXCEPTION 'time_zone must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._config(made);
    RETURN made;
END
$calendar_window$;

CREATE FUNCTION rate_limiter.with_block(
    config       rate_limiter.config,
    block_for    interval,
    max_block    interval DEFAULT NULL,
    forget_after interval DEFAULT '1 day')
RETURNS rate_limiter.config
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $with_block$
DECLARE
    made rate_limiter.config := config;
BEGIN
    -- The native order: config's NULLs, block_for, forget_after, then the
    -- config's checks.
    IF pg_catalog.num_nulls(config) = 1 THEN
        RAISE EXCEPTION 'config must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._config_nulls(config);
    IF config.time_zone IS NOT NULL THEN
        PERFORM rate_limiter._calendar_zone(config.time_zone);
    END IF;
    IF block_for IS NULL THEN
        RAISE EXCEPTION 'block_for must not be NULL' USING ERRCODE = '22004';
    ELSIF forget_after IS NULL THEN
        RAISE EXCEPTION 'forget_after must not be NULL' USING ERRCODE = '22004';
    END IF;
    made.block_for := block_for;
    made.max_block := max_block;
    made.forget_after := forget_after;
    PERFORM rate_limiter._config(made);
    RETURN made;
END
$with_block$;

-- What a function of the native extension alone raises here.
CREATE FUNCTION rate_limiter._native_only(feature text, why text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $native_only$
BEGIN
    RAISE EXCEPTION '% is not available in the portable edition of rate_limiter', feature
        USING ERRCODE = '0A000',
              DETAIL = why,
              HINT = 'Install the native rate_limiter extension (README, "Install") to use it; the portable edition''s tables carry over (README, "Switching editions").';
END
$native_only$;

CREATE FUNCTION rate_limiter._stats()
RETURNS TABLE (name text, calls bigint, admitted bigint, refused bigint, reserved bigint,
               tokens float8, credited float8, near_limit bigint, shadow_refused bigint,
               contended bigint, stats_reset timestamptz, blocked bigint)
-- SECURITY DEFINER: a role that may read the view (monitor) learns why it
-- is empty (0A000), rather than meeting the internal function's 42501.
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $stats$
BEGIN
    PERFORM rate_limiter._native_only('rate_limiter.stats',
        'The counters live in shared memory, which only a native extension loaded with shared_preload_libraries can have.');
END
$stats$;

CREATE VIEW rate_limiter.stats AS SELECT * FROM rate_limiter._stats();

CREATE FUNCTION rate_limiter._stats_info()
RETURNS TABLE (evicted bigint, uncounted bigint, since timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $stats_info$
BEGIN
    PERFORM rate_limiter._native_only('rate_limiter.stats_info',
        'The counters live in shared memory, which only a native extension loaded with shared_preload_libraries can have.');
END
$stats_info$;

CREATE VIEW rate_limiter.stats_info AS SELECT * FROM rate_limiter._stats_info();

CREATE FUNCTION rate_limiter.stats_reset(name text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $stats_reset$
BEGIN
    PERFORM rate_limiter._native_only('rate_limiter.stats_reset()',
        'The counters live in shared memory, which only a native extension loaded with shared_preload_libraries can have.');
END
$stats_reset$;

CREATE FUNCTION rate_limiter.distribute(colocate_with regclass DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $distribute$
BEGIN
    PERFORM rate_limiter._native_only('rate_limiter.distribute()',
        'Distributing the state over a Citus cluster needs the native extension on every node.');
END
$distribute$;

CREATE FUNCTION rate_limiter.undistribute()
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $undistribute$
BEGIN
    PERFORM rate_limiter._native_only('rate_limiter.undistribute()',
        'Distributing the state over a Citus cluster needs the native extension on every node.');
END
$undistribute$;

CREATE FUNCTION rate_limiter.prepare_node(nodename text, nodeport integer DEFAULT 5432)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $prepare_node$
BEGIN
    PERFORM rate_limiter._native_only('rate_limiter.prepare_node()',
        'Distributing the state over a Citus cluster needs the native extension on every node.');
END
$prepare_node$;

COMMENT ON FUNCTION rate_limiter.stats_reset(text) IS
    'Not in the portable edition (0A000): statistics live in shared memory, which only the native extension has';
COMMENT ON FUNCTION rate_limiter.distribute(regclass) IS
    'Not in the portable edition (0A000): distributing the state over Citus needs the native extension on every node';
COMMENT ON FUNCTION rate_limiter.undistribute() IS
    'Not in the portable edition (0A000): distributing the state over Citus needs the native extension on every node';
COMMENT ON FUNCTION rate_limiter.prepare_node(text, integer) IS
    'Not in the portable edition (0A000): distributing the state over Citus needs the native extension on every node';
