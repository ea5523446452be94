-- BASELINE (a): a token bucket as hand-written PL/pgSQL, as blog posts on
-- rate limiting in PostgreSQL write it, without this extension:
-- SELECT ... FOR UPDATE, then UPDATE or INSERT. Same math as
-- rate_limiter's token bucket (rate per period_ms, capacity).
-- Their plain INSERT fails with a unique violation when two sessions
-- create the same key at once (pgbench hits it within seconds), so the
-- INSERT here is ON CONFLICT DO NOTHING and the loser loops to lock the
-- winner's row: the race-free version a careful author ends up with.
CREATE SCHEMA IF NOT EXISTS baseline;

CREATE TABLE baseline.plpgsql_limits (
    name  text NOT NULL,
    key   text NOT NULL,
    value float8 NOT NULL,
    ts    timestamptz NOT NULL,
    PRIMARY KEY (name, key)
);

CREATE FUNCTION baseline.plpgsql_token_bucket(
    p_name text, p_key text, p_count float8, p_rate float8, p_period_ms float8, p_capacity float8)
RETURNS TABLE (ok boolean, retry_after_ms float8, remaining float8)
LANGUAGE plpgsql AS $$
DECLARE
    now_ts  timestamptz := clock_timestamp();
    current record;
    v       float8;
BEGIN
    LOOP
        SELECT l.value, l.ts INTO current
        FROM baseline.plpgsql_limits l WHERE l.name = p_name AND l.key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        v := p_capacity - p_count;
        IF v < 0 THEN
            RETURN QUERY SELECT false, -v * p_period_ms / p_rate, p_capacity;
            RETURN;
        END IF;
        INSERT INTO baseline.plpgsql_limits (name, key, value, ts) VALUES (p_name, p_key, v, now_ts)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN QUERY SELECT true, NULL::float8, v;
            RETURN;
        END IF;
    END LOOP;
    v := least(current.value + greatest(0, extract(epoch FROM now_ts - current.ts) * 1000) * p_rate / p_period_ms,
               p_capacity) - p_count;
    IF v < 0 THEN
        RETURN QUERY SELECT false, -v * p_period_ms / p_rate, v + p_count;
        RETURN;
    END IF;
    UPDATE baseline.plpgsql_limits SET value = v, ts = greatest(current.ts, now_ts)
    WHERE name = p_name AND key = p_key;
    RETURN QUERY SELECT true, NULL::float8, v;
END
$$;
