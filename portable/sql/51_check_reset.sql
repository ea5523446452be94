-- The portable edition (docs/guarantees.md, "Portable edition"):
-- rate_check (the answer rate_limit would give, no lock, no write) and
-- rate_reset (forget a limit's state), as src/api/rate_limit.rs.

CREATE FUNCTION rate_limiter.rate_check(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    reserve boolean             DEFAULT false,
    throws  boolean             DEFAULT false,
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql VOLATILE ROWS 1 SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $rate_check$
DECLARE
    given boolean := pg_catalog.num_nulls(config) = 0;
    answer record;
BEGIN
    PERFORM rate_limiter._required(name, count, reserve, throws);
    -- A composite's name (56_composite.sql).
    IF NOT given AND rate_limiter._composite_of(name) THEN
        RETURN QUERY SELECT * FROM rate_limiter._composite_answer(name, key, count, reserve, throws, false);
        RETURN;
    END IF;
    IF given THEN
        PERFORM rate_limiter._config(config);
    END IF;
    answer := rate_limiter._check(name, key, count, reserve, config, given);
    IF NOT answer.ok AND throws THEN
        PERFORM rate_limiter._refuse(name, key, coalesce(answer.retry_after, 0), answer.remaining,
                                     answer.blocked, answer.block_reason);
    END IF;
    ok := answer.ok;
    retry_after := rate_limiter._interval(answer.retry_after);
    remaining := rate_limiter._shown(answer.remaining);
    RETURN NEXT;
END
$rate_check$;

CREATE FUNCTION rate_limiter.rate_reset(name text, key text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $rate_reset$
DECLARE
    names text[];
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A concurrency limit's slots are not tokens: forgetting them would
    -- free slots that timed leases hold (docs/concurrency.md).
    IF EXISTS (SELECT FROM rate_limiter.definitions AS d
               WHERE d.name = rate_reset.name AND d.kind::text = 'concurrency') THEN
        PERFORM rate_limiter._not_a_rate_limit();
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute rate_reset() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- A composite's name (56_composite.sql): every member's state.
    names := CASE WHEN rate_limiter._composite_of(name)
                  THEN (SELECT c.members FROM rate_limiter.composites AS c WHERE c.name = rate_reset.name)
                  ELSE ARRAY[name] END;
    IF key IS NULL THEN
        DELETE FROM rate_limiter.rate_limits AS r WHERE r.name = ANY (names) AND r.key IS NULL;
    ELSE
        DELETE FROM rate_limiter.rate_limits AS r WHERE r.name = ANY (names) AND r.key = rate_reset.key;
    END IF;
END
$rate_reset$;

