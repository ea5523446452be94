-- The portable edition (docs/guarantees.md, "Portable edition"):
-- rate_limit_all, several limits at once, all or nothing
-- (src/all_or_nothing.rs and src/storage/all_or_nothing.rs). Every state row
-- of every limit named is held in one order, (name, key, shard) bytewise with
-- the global limit first, before the next is looked at: an existing row is
-- locked (SELECT ... FOR UPDATE); a missing one that the call may consume
-- from (the first 2 m missing shards of a limit named m times) is held by
-- inserting a placeholder row, withdrawn again when nothing is written to it.
-- So overlapping calls never wait for each other in a cycle, whatever the
-- order of their requests. A limit's rows are read and written under the
-- regime of what applies to its key (47_state_rows.sql).

-- The request in force for each element of requests, checked in the
-- native order: 54000 more than rate_limiter.max_requests; per element
-- 22004 NULL element or name, 22004/22023 its inline config; then per
-- element 42704/42501/54000 resolving its config.
CREATE FUNCTION rate_limiter._requests(requests rate_limiter.request[],
                                       OUT names text[], OUT keys text[], OUT counts float8[],
                                       OUT inline rate_limiter.config[], OUT given boolean[])
LANGUAGE plpgsql STABLE
AS $requests$
DECLARE
    flat rate_limiter.request[] := ARRAY(SELECT pg_catalog.unnest(requests));
    n int := coalesce(pg_catalog.cardinality(flat), 0);
    most int := rate_limiter._bound('rate_limiter.max_requests', 1000);
BEGIN
    IF n > most THEN
        RAISE EXCEPTION 'rate_limit_all() takes at most % requests (rate_limiter.max_requests), not %', most, n
            USING ERRCODE = '54000';
    END IF;
    names := ARRAY[]::text[]; keys := ARRAY[]::text[]; counts := ARRAY[]::float8[];
    inline := ARRAY[]::rate_limiter.config[]; given := ARRAY[]::boolean[];
    FOR i IN 1..n LOOP
        IF pg_catalog.num_nulls(flat[i]) = 1 THEN
            RAISE EXCEPTION 'requests[%] must not be NULL', i USING ERRCODE = '22004';
        END IF;
        IF (flat[i]).name IS NULL THEN
            RAISE EXCEPTION 'requests[%].name must not be NULL', i USING ERRCODE = '22004';
        END IF;
        IF pg_catalog.num_nulls((flat[i]).config) = 0 THEN
            PERFORM rate_limiter._config((flat[i]).config);
        END IF;
        names := names || (flat[i]).name;
        keys := keys || (flat[i]).key;
        counts := counts || coalesce((flat[i]).count, 1);
        inline := inline || (flat[i]).config;
        given := given || (pg_catalog.num_nulls((flat[i]).config) = 0);
    END LOOP;
END
$requests$;

-- One all-or-nothing try (storage::consume_all_or_nothing): the answers
-- in request order, or restart when a definition changed under the call
-- (or a placeholder lost a race).
CREATE FUNCTION rate_limiter._consume_all(names text[], keys text[], counts float8[],
                                          inline rate_limiter.config[], given boolean[], reserve boolean,
                                          OUT oks boolean[], OUT retry_afters bigint[], OUT remainings float8[],
                                          OUT restart boolean)
LANGUAGE plpgsql VOLATILE
AS $consume_all$
DECLARE
    n int := pg_catalog.cardinality(names);
    resolved record;
    -- Per request: its config, enforcement, regime, period, start, limit.
    configs rate_limiter.config[] := ARRAY[]::rate_limiter.config[];
    enforces boolean[] := ARRAY[]::boolean[];
    regimes bigint[] := ARRAY[]::bigint[];
    periods bigint[] := ARRAY[]::bigint[];
    starts bigint[] := ARRAY[]::bigint[];
    blocked_untils bigint[] := ARRAY[]::bigint[];
    -- Per request: whether it was admitted and used its limit up.
    used_up boolean[];
    limit_of int[] := ARRAY[]::int[];
    -- Per limit: its first request, shards, held missing rows, first row.
    first_request int[] := ARRAY[]::int[];
    shard_counts int[] := ARRAY[]::int[];
    missing_held int[] := ARRAY[]::int[];
    first_row int[] := ARRAY[]::int[];
    -- Per row (in lock order): how it is held, its state.
    row_limit int[];
    row_shard int[];
    held text[] := ARRAY[]::text[];
    stored_values float8[] := ARRAY[]::float8[];
    stored_tss bigint[] := ARRAY[]::bigint[];
    stored_prevs float8[] := ARRAY[]::float8[];
    current_values float8[];
    current_tss bigint[];
    current_prevs float8[];
    changed boolean[];
    placeholders int := 0;
    looked record;
    l int;
    c rate_limiter.config;
    now_ bigint;
    decision record;
    answered record;
    all_ok boolean := true;
    base int;
    capacity float8;
BEGIN
    restart := false;
    FOR i IN 1..n LOOP
        resolved := rate_limiter._resolve(names[i], keys[i], inline[i], given[i]);
        configs := configs || resolved.config;
        enforces := enforces || resolved.enforce;
        regimes := regimes || resolved.regime;
        periods := periods || resolved.period;
        starts := starts || resolved.start;
        blocked_untils := blocked_untils || resolved.blocked_until;
    END LOOP;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute rate_limit_all() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- The limits, each once (same name and key: same config and regime,
    -- else 22023).
    FOR i IN 1..n LOOP
        PERFORM rate_limiter._validate_count(configs[i], counts[i], reserve);
        l := NULL;
        FOR j IN 1..coalesce(pg_catalog.cardinality(first_request), 0) LOOP
            IF names[first_request[j]] = names[i] AND keys[first_request[j]] IS NOT DISTINCT FROM keys[i] THEN
                l := j;
                EXIT;
            END IF;
        END LOOP;
        IF l IS NOT NULL THEN
            IF ((configs[i]).kind, (configs[i]).rate, periods[i], (configs[i]).capacity, (configs[i]).max_reserved,
                (configs[i]).shards, starts[i], enforces[i], regimes[i])
               IS DISTINCT FROM
               ((configs[first_request[l]]).kind, (configs[first_request[l]]).rate, periods[first_request[l]],
                (configs[first_request[l]]).capacity, (configs[first_request[l]]).max_reserved,
                (configs[first_request[l]]).shards, starts[first_request[l]], enforces[first_request[l]],
                regimes[first_request[l]]) THEN
                RAISE EXCEPTION 'requests[%] names the same limit as an earlier request with a different config', i
                    USING ERRCODE = '22023';
            END IF;
            missing_held[l] := least(missing_held[l] + 2, shard_counts[l]);
        ELSE
            first_request := first_request || i;
            shard_counts := shard_counts || greatest((configs[i]).shards, 1);
            missing_held := missing_held || least(2, greatest((configs[i]).shards, 1));
            l := pg_catalog.cardinality(first_request);
        END IF;
        limit_of := limit_of || l;
    END LOOP;
    -- Every row, in lock order.
    SELECT pg_catalog.array_agg(o.l ORDER BY o.name COLLATE "C", o.key COLLATE "C" NULLS FIRST, o.shard),
           pg_catalog.array_agg(o.shard ORDER BY o.name COLLATE "C", o.key COLLATE "C" NULLS FIRST, o.shard)
      INTO row_limit, row_shard
      FROM (SELECT j AS l, names[first_request[j]] AS name, keys[first_request[j]] AS key, s AS shard
              FROM pg_catalog.generate_series(1, coalesce(pg_catalog.cardinality(first_request), 0)) AS j,
                   pg_catalog.generate_series(0, shard_counts[j] - 1) AS s) AS o;
    -- Refusals never wait (docs/guarantees.md, "Concurrency and exactness"):
    -- with lock_free_refusals (the default), a first pass decides on every
    -- row as committed, without a lock, and a refusal there is the answer,
    -- nothing held or written. Otherwise the second pass holds every row in
    -- order and decides again.
    FOR pass IN CASE WHEN rate_limiter._lock_free() THEN 1 ELSE 2 END..2 LOOP
        held := ARRAY[]::text[];
        stored_values := ARRAY[]::float8[];
        stored_tss := ARRAY[]::bigint[];
        stored_prevs := ARRAY[]::float8[];
        all_ok := true;
        placeholders := 0;
        first_row := pg_catalog.array_fill(0, ARRAY[coalesce(pg_catalog.cardinality(first_request), 0)]);
        FOR r IN 1..coalesce(pg_catalog.cardinality(row_limit), 0) LOOP
            l := row_limit[r];
            IF row_shard[r] = 0 THEN
                first_row[l] := r;
                placeholders := 0;
            END IF;
            IF pass = 1 THEN
                -- As committed, without a lock (a plain SELECT).
                looked := rate_limiter._row(names[first_request[l]], keys[first_request[l]], row_shard[r]::int2, false,
                                            regimes[first_request[l]]);
                held := held || 'read'::text;
            END IF;
            WHILE pass = 2 LOOP
                looked := rate_limiter._row(names[first_request[l]], keys[first_request[l]], row_shard[r]::int2, true,
                                            regimes[first_request[l]]);
                IF looked.present THEN
                    held := held || 'locked'::text;
                    EXIT;
                END IF;
                IF placeholders >= missing_held[l] THEN
                    held := held || 'skipped'::text;
                    EXIT;
                END IF;
                -- Hold the missing row with a placeholder (never seen by others
                -- as it is: updated or deleted before this transaction ends).
                INSERT INTO rate_limiter.rate_limits AS t (name, key, shard, value, ts, regime)
                VALUES (names[first_request[l]], keys[first_request[l]], row_shard[r]::int2, 0, '2000-01-01 00:00:00+00',
                        regimes[first_request[l]])
                ON CONFLICT ON CONSTRAINT rate_limits_name_key_shard_key DO NOTHING;
                IF FOUND THEN
                    held := held || 'placeholder'::text;
                    placeholders := placeholders + 1;
                    EXIT;
                END IF;
                -- Another transaction inserted it first: look again (waiting).
            END LOOP;
            stored_values := stored_values || looked.value;
            stored_tss := stored_tss || looked.ts;
            stored_prevs := stored_prevs || looked.prev;
        END LOOP;
        -- Every definition used is still the one in force.
        FOR i IN 1..n LOOP
            IF pass = 2 AND NOT given[i]
               AND NOT rate_limiter._still_applies(names[i], keys[i], configs[i], enforces[i], regimes[i], blocked_untils[i]) THEN
                PERFORM rate_limiter._delete_rows(names, keys, first_request, row_limit, row_shard, held, 'placeholder');
                restart := true;
                RETURN;
            END IF;
        END LOOP;
        -- The math (evaluate_all_or_nothing): the requests in order, at one
        -- instant, each on the state the requests before it left.
        now_ := rate_limiter._now();
        current_values := stored_values;
        current_tss := stored_tss;
        current_prevs := stored_prevs;
        changed := pg_catalog.array_fill(false, ARRAY[coalesce(pg_catalog.cardinality(held), 0)]);
        oks := ARRAY[]::boolean[]; retry_afters := ARRAY[]::bigint[]; remainings := ARRAY[]::float8[];
        used_up := ARRAY[]::boolean[];
        FOR i IN 1..n LOOP
            l := limit_of[i];
            c := configs[i];
            base := first_row[l];
            capacity := coalesce(c.capacity, c.rate);
            IF blocked_untils[i] > now_ THEN
                -- A blocked key (43_blocks.sql): refused whatever its tokens.
                SELECT false AS ok, greatest(blocked_untils[i] - now_, 1) AS retry_after, 0::float8 AS remaining
                INTO decision;
            ELSIF c.shards > 1 THEN
                decision := rate_limiter._evaluate_fullest(c.kind, c.rate, periods[i], capacity, c.max_reserved, c.shards,
                    starts[i], names[i], keys[i], current_values[base:base + c.shards - 1], current_tss[base:base + c.shards - 1],
                    current_prevs[base:base + c.shards - 1], now_, counts[i], reserve);
                IF decision.ok THEN
                    IF decision.new_value0 IS NOT NULL THEN
                        current_values[base + decision.best0] := decision.new_value0;
                        current_tss[base + decision.best0] := decision.new_ts0;
                        current_prevs[base + decision.best0] := decision.new_prev0;
                        changed[base + decision.best0] := true;
                    END IF;
                    IF decision.new_value1 IS NOT NULL THEN
                        current_values[base + decision.best1] := decision.new_value1;
                        current_tss[base + decision.best1] := decision.new_ts1;
                        current_prevs[base + decision.best1] := decision.new_prev1;
                        changed[base + decision.best1] := true;
                    END IF;
                END IF;
            ELSE
                decision := rate_limiter._evaluate(c.kind, c.rate, periods[i], capacity, c.max_reserved, starts[i],
                    names[i], keys[i], current_values[base], current_tss[base], current_prevs[base], now_, counts[i],
                    reserve, coalesce(c.time_zone, ''));
                IF decision.ok AND decision.new_value IS NOT NULL THEN
                    current_values[base] := decision.new_value;
                    current_tss[base] := decision.new_ts;
                    current_prevs[base] := decision.new_prev;
                    changed[base] := true;
                END IF;
            END IF;
            answered := rate_limiter._shadow(decision.ok, decision.retry_after, enforces[i]);
            all_ok := all_ok AND answered.ok;
            used_up := used_up || (decision.ok AND c.block_for IS NOT NULL AND decision.remaining < 1);
            oks := oks || answered.ok;
            retry_afters := retry_afters || answered.retry_after;
            remainings := remainings || decision.remaining;
        END LOOP;
    IF NOT all_ok THEN
            IF pass = 2 THEN
                PERFORM rate_limiter._delete_rows(names, keys, first_request, row_limit, row_shard, held, 'placeholder');
            END IF;
            RETURN;
        END IF;
    END LOOP;
    FOR r IN 1..coalesce(pg_catalog.cardinality(held), 0) LOOP
        IF changed[r] AND held[r] = 'skipped' THEN
            RAISE EXCEPTION 'rate_limiter: rate_limit_all() would write a shard it does not hold' USING ERRCODE = 'XX000';
        END IF;
        IF NOT changed[r] AND held[r] = 'placeholder' THEN
            held[r] := 'withdrawn';
        END IF;
    END LOOP;
    PERFORM rate_limiter._delete_rows(names, keys, first_request, row_limit, row_shard, held, 'withdrawn');
    FOR r IN 1..coalesce(pg_catalog.cardinality(held), 0) LOOP
        IF changed[r] AND (held[r] = 'placeholder'
                           OR (current_values[r], current_tss[r], coalesce(current_prevs[r], 0))
                              IS DISTINCT FROM (stored_values[r], stored_tss[r], coalesce(stored_prevs[r], 0))) THEN
            PERFORM rate_limiter._write(names[first_request[row_limit[r]]], keys[first_request[row_limit[r]]],
                                        row_shard[r]::int2, true, current_values[r], current_tss[r],
                                        regimes[first_request[row_limit[r]]], coalesce(current_prevs[r], 0));
        END IF;
    END LOOP;
    -- Each limit with automatic blocks that its last request used up
    -- starts its block (local::all_or_nothing::strike_used_up).
    FOR i IN 1..n LOOP
        CONTINUE WHEN NOT used_up[i] OR limit_of[i] = ANY (limit_of[i + 1:n]);
        PERFORM rate_limiter._strike(names[i], keys[i], configs[i], now_);
    END LOOP;
END
$consume_all$;

-- Deletes the rows held as `how` (placeholders this call inserted).
CREATE FUNCTION rate_limiter._delete_rows(names text[], keys text[], first_request int[], row_limit int[],
                                          row_shard int[], held text[], how text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $delete_rows$
DECLARE
    name_ text;
    key_ text;
BEGIN
    FOR r IN 1..coalesce(pg_catalog.cardinality(held), 0) LOOP
        CONTINUE WHEN held[r] <> how;
        name_ := names[first_request[row_limit[r]]];
        key_ := keys[first_request[row_limit[r]]];
        IF key_ IS NULL THEN
            DELETE FROM rate_limiter.rate_limits AS t WHERE t.name = name_ AND t.key IS NULL AND t.shard = row_shard[r];
        ELSE
            DELETE FROM rate_limiter.rate_limits AS t WHERE t.name = name_ AND t.key = key_ AND t.shard = row_shard[r];
        END IF;
    END LOOP;
END
$delete_rows$;

-- _consume_all, tried again while a definition changed under it, at
-- most 17 times (definitions::MAX_RESTARTS + 1), then 40001.
CREATE FUNCTION rate_limiter._consume_all_settled(names text[], keys text[], counts float8[],
                                                  inline rate_limiter.config[], given boolean[], reserve boolean,
                                                  OUT oks boolean[], OUT retry_afters bigint[],
                                                  OUT remainings float8[])
LANGUAGE plpgsql VOLATILE
AS $consume_all_settled$
DECLARE
    answers record;
BEGIN
    FOR attempt IN 1..17 LOOP
        answers := rate_limiter._consume_all(names, keys, counts, inline, given, reserve);
        EXIT WHEN NOT answers.restart;
        IF attempt = 17 THEN
            PERFORM rate_limiter._kept_changing(names[1]);
        END IF;
    END LOOP;
    oks := answers.oks;
    retry_afters := answers.retry_afters;
    remainings := answers.remainings;
END
$consume_all_settled$;

CREATE FUNCTION rate_limiter.rate_limit_all(
    requests rate_limiter.request[],
    reserve  boolean DEFAULT false,
    throws   boolean DEFAULT false)
RETURNS TABLE (name text, key text, ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $rate_limit_all$
DECLARE
    checked record;
    answers record;
    block record;
BEGIN
    IF requests IS NULL THEN
        RAISE EXCEPTION 'requests must not be NULL' USING ERRCODE = '22004';
    ELSIF reserve IS NULL THEN
        RAISE EXCEPTION 'reserve must not be NULL' USING ERRCODE = '22004';
    ELSIF throws IS NULL THEN
        RAISE EXCEPTION 'throws must not be NULL' USING ERRCODE = '22004';
    END IF;
    checked := rate_limiter._requests(requests);
    -- A request names one defined limit: a composite's name (56_composite.sql)
    -- is 22023, where its 42704 would have come.
    FOR i IN 1..coalesce(pg_catalog.cardinality(checked.names), 0) LOOP
        CONTINUE WHEN checked.given[i] OR NOT rate_limiter._composite_of(checked.names[i]);
        -- (An earlier request of an undefined name is its 42704 first.)
        EXIT WHEN EXISTS (SELECT FROM ROWS FROM (pg_catalog.unnest(checked.names[1:i - 1]),
                                                    pg_catalog.unnest(checked.given[1:i - 1])) AS e(name, given)
                          WHERE NOT e.given
                            AND NOT EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = e.name));
        RAISE EXCEPTION '"%" is a composite: a request of rate_limit_all() names one defined limit (name the composite''s members, or call rate_limit() of the composite)',
            rate_limiter._for_message(checked.names[i])
            USING ERRCODE = '22023';
    END LOOP;
    answers := rate_limiter._consume_all_settled(checked.names, checked.keys, checked.counts, checked.inline,
                                                 checked.given, reserve);
    IF throws THEN
        FOR i IN 1..coalesce(pg_catalog.cardinality(answers.oks), 0) LOOP
            IF NOT answers.oks[i] THEN
                -- (A block's reason read again, as the native call does.)
                block := rate_limiter._block_of(checked.names[i], checked.keys[i], rate_limiter._now());
                PERFORM rate_limiter._refuse(checked.names[i], checked.keys[i], coalesce(answers.retry_afters[i], 0),
                                             answers.remainings[i], block.until IS NOT NULL, block.reason);
            END IF;
        END LOOP;
    END IF;
    FOR i IN 1..coalesce(pg_catalog.cardinality(answers.oks), 0) LOOP
        name := checked.names[i];
        key := checked.keys[i];
        ok := answers.oks[i];
        retry_after := rate_limiter._interval(answers.retry_afters[i]);
        remaining := rate_limiter._shown(answers.remainings[i]);
        RETURN NEXT;
    END LOOP;
END
$rate_limit_all$;
