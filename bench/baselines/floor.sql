-- BASELINE (b), "the floor": one INSERT ... ON CONFLICT DO UPDATE ...
-- RETURNING statement doing the token-bucket arithmetic in SQL: the least
-- work any transactional two-number limiter can do. It returns only the
-- new value (no retry_after, no validation, no definitions).
--
-- baseline.floor_token_bucket() wraps the statement in a SQL function so it
-- can be called once per key from one statement (scenario 1); pgbench
-- sends the bare statement (bench/pgbench/floor.sql).
CREATE SCHEMA IF NOT EXISTS baseline;

CREATE TABLE baseline.floor_limits (
    name  text NOT NULL,
    key   text NOT NULL,
    value float8 NOT NULL,
    ts    timestamptz NOT NULL,
    -- The same index fillfactor as rate_limiter.rate_limits' unique index
    -- (100; a btree's default is 90), so that scenario 4 compares like
    -- with like.
    PRIMARY KEY (name, key) WITH (fillfactor = 100)
);

CREATE FUNCTION baseline.floor_token_bucket(
    p_name text, p_key text, p_count float8, p_rate float8, p_period_ms float8, p_capacity float8)
RETURNS SETOF float8
LANGUAGE sql AS $$
    INSERT INTO baseline.floor_limits AS l (name, key, value, ts)
    VALUES (p_name, p_key, p_capacity - p_count, clock_timestamp())
    ON CONFLICT (name, key) DO UPDATE
        SET value = least(l.value + greatest(0, extract(epoch FROM clock_timestamp() - l.ts) * 1000)
                                    * p_rate / p_period_ms, p_capacity) - p_count,
            ts = greatest(l.ts, clock_timestamp())
        WHERE least(l.value + greatest(0, extract(epoch FROM clock_timestamp() - l.ts) * 1000)
                              * p_rate / p_period_ms, p_capacity) - p_count >= 0
    RETURNING value
$$;
