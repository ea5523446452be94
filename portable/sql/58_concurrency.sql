-- Concurrency limits (docs/concurrency.md): their functions are the
-- native extension's PL/pgSQL (sql/concurrency.sql, which
-- scripts/portable.sh appends); here what they need that the native
-- extension has in C, and their table.

-- The kind and the table of concurrency limits, on an install made before
-- them: the portable update runs only the functions, so this DO block
-- (install and update) makes sure they are there (the revoke from PUBLIC
-- of every table follows in the same run). The new enum value is used by
-- no statement of the same run: a value added in a transaction cannot be
-- used before it commits.
DO $concurrency_objects$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_enum AS e
                   WHERE e.enumtypid = 'rate_limiter.kind'::pg_catalog.regtype AND e.enumlabel = 'concurrency') THEN
        ALTER TYPE rate_limiter.kind ADD VALUE 'concurrency';
    END IF;
    IF pg_catalog.to_regclass('rate_limiter.leases') IS NULL THEN
        CREATE TABLE rate_limiter.leases (
            id       bigint PRIMARY KEY,
            name     text COLLATE "C" NOT NULL,
            key      text COLLATE "C",
            slot     int2 NOT NULL,
            duration interval NOT NULL,
            CONSTRAINT leases_slot UNIQUE NULLS NOT DISTINCT (name, key, slot)
        );
    END IF;
END
$concurrency_objects$;

-- The clock of rate_limiter.now_override (its rules: _now()), else
-- clock_timestamp(), as the native _clock().
CREATE FUNCTION rate_limiter._clock()
RETURNS timestamptz
LANGUAGE sql VOLATILE
AS $$ SELECT rate_limiter._timestamp(rate_limiter._now()) $$;

-- The native extension counts acquire()'s decisions in rate_limiter.stats;
-- the portable edition has no statistics (80_surface.sql).
CREATE FUNCTION rate_limiter._stats_count(name text, verdict int4)
RETURNS void
LANGUAGE sql IMMUTABLE
AS $$ SELECT $$;

-- The native extension's state table may be distributed by Citus (its
-- slots' statements then name the key's distribution value); the
-- portable edition's never is.
CREATE FUNCTION rate_limiter._slots_elsewhere()
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT false $$;

-- acquire(): sql/concurrency.sql's _acquire (the native acquire takes a
-- free slot of a defined limit in C first, with the same answer).
CREATE FUNCTION rate_limiter.acquire(
    name   text,
    key    text                DEFAULT NULL,
    wait   interval            DEFAULT '0',
    lease  interval            DEFAULT NULL,
    throws boolean             DEFAULT false,
    config rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, lease_id bigint, in_flight int4, retry_after interval)
LANGUAGE plpgsql VOLATILE ROWS 1 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $acquire$
BEGIN
    -- (PL/pgSQL: _acquire comes later in the file.)
    RETURN QUERY SELECT * FROM rate_limiter._acquire(name, key, wait, lease, throws, config);
END
$acquire$;
