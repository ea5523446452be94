-- The portable edition (docs/guarantees.md, "Portable edition"): the
-- state rows of a call, read, locked and written with ordinary statements
-- (storage/rows.rs), for rate_limit, rate_check, rate_limit_all,
-- rate_credit, status and http_headers. Each row records the regime it
-- was written under (the column regime; docs/overrides.md, "The key's
-- state"; 42_overrides.sql): a row of another regime than the call's
-- reads as missing (a full limit), and the call's write overwrites it
-- (UPDATE, since it exists) with the call's regime.

-- The stored state of (name, key, shard) under regime, locked (FOR
-- UPDATE) when lock: (value, ts in microseconds), or NULLs when there is
-- no row or it is of another regime; present: there is a row (of any
-- regime: a write updates it).
CREATE FUNCTION rate_limiter._row(name text, key text, shard int2, lock boolean, regime bigint,
                                  OUT value float8, OUT ts bigint, OUT present boolean, OUT prev float8)
LANGUAGE plpgsql VOLATILE
AS $row$
DECLARE
    stored_regime bigint;
BEGIN
    IF NOT lock AND key IS NULL THEN
        SELECT r.value, rate_limiter._micros(r.ts), r.regime, r.prev INTO value, ts, stored_regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _row.name AND r.key IS NULL AND r.shard = _row.shard;
        present := FOUND;
    ELSIF NOT lock THEN
        SELECT r.value, rate_limiter._micros(r.ts), r.regime, r.prev INTO value, ts, stored_regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _row.name AND r.key = _row.key AND r.shard = _row.shard;
        present := FOUND;
    ELSIF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        SELECT locked.value, locked.ts, locked.regime, locked.present, locked.prev
        INTO value, ts, stored_regime, present, prev
        FROM rate_limiter._locked_row(name, key, shard) AS locked;
    ELSE
        -- Under REPEATABLE READ or SERIALIZABLE a row that another
        -- transaction changed or deleted after the snapshot cannot be
        -- locked (40001). Deleted (a rate_reset, a prune), it is no row:
        -- the call starts a new one, as the native extension does.
        -- Changed, the insert of that new row fails with 40001 itself
        -- (ON CONFLICT meets a row the snapshot cannot see), so the call
        -- never decides on a state it did not read.
        BEGIN
            SELECT locked.value, locked.ts, locked.regime, locked.present, locked.prev
        INTO value, ts, stored_regime, present, prev
            FROM rate_limiter._locked_row(name, key, shard) AS locked;
        EXCEPTION WHEN serialization_failure THEN
            value := NULL;
            ts := NULL;
            prev := NULL;
            present := false;
        END;
    END IF;
    IF present AND stored_regime IS DISTINCT FROM regime THEN
        value := NULL;
        ts := NULL;
        prev := NULL;
    END IF;
END
$row$;

-- The stored states of the shards of (name, key) under regime: values[i],
-- tss[i], prevs[i] for shard i - 1 (NULL: no row, or one of another regime),
-- without a lock.
CREATE FUNCTION rate_limiter._states(name text, key text, shards int, regime bigint,
                                     OUT stored_values float8[], OUT stored_tss bigint[], OUT stored_prevs float8[])
LANGUAGE plpgsql STABLE
AS $states$
DECLARE
    found_row record;
BEGIN
    stored_values := pg_catalog.array_fill(NULL::float8, ARRAY[shards]);
    stored_tss := pg_catalog.array_fill(NULL::bigint, ARRAY[shards]);
    stored_prevs := pg_catalog.array_fill(NULL::float8, ARRAY[shards]);
    IF key IS NULL THEN
        FOR found_row IN SELECT r.shard, r.value, r.ts, r.prev FROM rate_limiter.rate_limits AS r
                         WHERE r.name = _states.name AND r.key IS NULL AND r.shard < shards
                           AND r.regime IS NOT DISTINCT FROM _states.regime LOOP
            stored_values[found_row.shard + 1] := found_row.value;
            stored_tss[found_row.shard + 1] := rate_limiter._micros(found_row.ts);
            stored_prevs[found_row.shard + 1] := found_row.prev;
        END LOOP;
    ELSE
        FOR found_row IN SELECT r.shard, r.value, r.ts, r.prev FROM rate_limiter.rate_limits AS r
                         WHERE r.name = _states.name AND r.key = _states.key AND r.shard < shards
                           AND r.regime IS NOT DISTINCT FROM _states.regime LOOP
            stored_values[found_row.shard + 1] := found_row.value;
            stored_tss[found_row.shard + 1] := rate_limiter._micros(found_row.ts);
            stored_prevs[found_row.shard + 1] := found_row.prev;
        END LOOP;
    END IF;
END
$states$;

-- The row of (name, key, shard), locked FOR UPDATE (waiting for a
-- holder): its state and regime, and present; NULLs and false when there
-- is no row.
CREATE FUNCTION rate_limiter._locked_row(name text, key text, shard int2,
                                         OUT value float8, OUT ts bigint, OUT regime bigint, OUT present boolean,
                                         OUT prev float8)
LANGUAGE plpgsql VOLATILE
AS $locked_row$
BEGIN
    IF key IS NULL THEN
        SELECT r.value, rate_limiter._micros(r.ts), r.regime, r.prev INTO value, ts, regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _locked_row.name AND r.key IS NULL AND r.shard = _locked_row.shard FOR UPDATE;
    ELSE
        SELECT r.value, rate_limiter._micros(r.ts), r.regime, r.prev INTO value, ts, regime, prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.name = _locked_row.name AND r.key = _locked_row.key AND r.shard = _locked_row.shard FOR UPDATE;
    END IF;
    present := FOUND;
END
$locked_row$;

-- Writes the state of (name, key, shard) under regime: updates the row
-- (which the call holds) when it exists, whatever regime it had, else
-- inserts it; false when another transaction inserted it first (the call
-- then starts again).
CREATE FUNCTION rate_limiter._write(name text, key text, shard int2, existed boolean, value float8, ts bigint,
                                    regime bigint, prev float8)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $write$
DECLARE
    at timestamptz := rate_limiter._timestamp(ts);
    -- prev is stored NULL when 0 (the native storage::layout does the same).
    stored_prev float8 := CASE WHEN prev = 0 THEN NULL ELSE prev END;
BEGIN
    IF existed THEN
        IF key IS NULL THEN
            UPDATE rate_limiter.rate_limits AS r SET value = _write.value, ts = at, regime = _write.regime, prev = stored_prev
            WHERE r.name = _write.name AND r.key IS NULL AND r.shard = _write.shard;
        ELSE
            UPDATE rate_limiter.rate_limits AS r SET value = _write.value, ts = at, regime = _write.regime, prev = stored_prev
            WHERE r.name = _write.name AND r.key = _write.key AND r.shard = _write.shard;
        END IF;
        RETURN true;
    END IF;
    INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts, regime, prev)
    VALUES (_write.name, _write.key, _write.shard, _write.value, at, _write.regime, stored_prev)
    ON CONFLICT ON CONSTRAINT rate_limits_name_key_shard_key DO NOTHING;
    RETURN FOUND;
END
$write$;
