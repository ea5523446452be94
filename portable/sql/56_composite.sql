-- The portable edition (docs/composites.md): calls of a composite's name
-- (define_all(), in sql/functions.sql, shared with the native extension),
-- as src/api/composite.rs makes them. A call looks here only when its
-- name has no definition and no inline config was given.

-- The composites' table (sql/schema.sql) for an install updated from a
-- portable build before it: every run of the portable edition's functions
-- (install and update) makes sure it is there (the revoke from PUBLIC of
-- every table follows in the same run).
-- (A DO block, not IF NOT EXISTS: no NOTICE when it is there.)
DO $composites$
BEGIN
    IF pg_catalog.to_regclass('rate_limiter.composites') IS NULL THEN
        CREATE TABLE rate_limiter.composites (
            name    text PRIMARY KEY,
            members text[] NOT NULL,
            enforce boolean NOT NULL DEFAULT true
        );
    END IF;
END
$composites$;

-- Whether name is a composite's (and no definition's: a definition of
-- the same name, which only a race between define() and define_all()
-- can leave, is the one a call uses, as natively).
CREATE FUNCTION rate_limiter._composite_of(name text)
RETURNS boolean
LANGUAGE sql STABLE
AS $composite_of$
    SELECT EXISTS (SELECT FROM rate_limiter.composites AS c
                   WHERE c.name = _composite_of.name
                     AND NOT EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = c.name))
$composite_of$;

-- A call of the composite name for key and count (rate_limiter_algorithm::
-- composite::combine): consume: one rate_limit_all() of the members, all
-- or nothing; else each member's rate_check. ok when every member admits
-- (enforce false: always, a refusal answered as admitted); remaining the
-- least of the members' (refused: of the refusing members', now);
-- retry_after (microseconds) of a refusal the
-- greatest of the refusing members', of an admitted call the greatest
-- reservation's; member the member that refused longest (the first of
-- those alike), else NULL.
CREATE FUNCTION rate_limiter._composite(name text, key text, count float8, reserve boolean, consume boolean,
                                        OUT ok boolean, OUT retry_after bigint, OUT remaining float8,
                                        OUT member text)
LANGUAGE plpgsql VOLATILE
AS $composite$
DECLARE
    found rate_limiter.composites;
    most int;
    checked record;
    answers record;
    probe record;
    oks boolean[] := '{}';
    retry_afters bigint[] := '{}';
    remainings float8[] := '{}';
    longest int;
BEGIN
    SELECT * INTO found FROM rate_limiter.composites AS c WHERE c.name = _composite.name;
    IF consume THEN
        most := rate_limiter._bound('rate_limiter.max_requests', 1000);
        IF pg_catalog.cardinality(found.members) > most THEN
            RAISE EXCEPTION 'a call of a composite is a rate_limit_all() of its % members, more than rate_limiter.max_requests (%)',
                pg_catalog.cardinality(found.members), most
                USING ERRCODE = '54000';
        END IF;
        checked := rate_limiter._requests(ARRAY(
            SELECT ROW(m.member, _composite.key, _composite.count, NULL)::rate_limiter.request
            FROM pg_catalog.unnest(found.members) WITH ORDINALITY AS m(member, position)
            ORDER BY m.position));
        IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
            RAISE EXCEPTION 'cannot execute rate_limit() in a read-only transaction' USING ERRCODE = '25006';
        END IF;
        answers := rate_limiter._consume_all_settled(checked.names, checked.keys, checked.counts, checked.inline,
                                                     checked.given, reserve);
        oks := answers.oks;
        retry_afters := answers.retry_afters;
        remainings := answers.remainings;
    ELSE
        FOR i IN 1..pg_catalog.cardinality(found.members) LOOP
            probe := rate_limiter._check(found.members[i], key, count, reserve, NULL, false);
            oks[i] := probe.ok;
            retry_afters[i] := probe.retry_after;
            remainings[i] := probe.remaining;
        END LOOP;
    END IF;
    FOR i IN 1..pg_catalog.cardinality(oks) LOOP
        -- (Refused: the least of the refusing members', now.)
        IF NOT oks[i] OR true = ALL (oks) THEN
            remaining := least(remaining, remainings[i]);
        END IF;
        IF NOT oks[i] AND (longest IS NULL OR coalesce(retry_afters[i], -1) > coalesce(retry_afters[longest], -1)) THEN
            longest := i;
        END IF;
    END LOOP;
    IF longest IS NOT NULL THEN
        member := found.members[longest];
        ok := NOT found.enforce;
        retry_after := CASE WHEN found.enforce THEN retry_afters[longest] END;
    ELSE
        ok := true;
        retry_after := (SELECT pg_catalog.max(r) FROM pg_catalog.unnest(retry_afters) AS r);
    END IF;
END
$composite$;

-- The fast path of a consuming call of a composite (rate_limit's, in
-- 50_limit.sql, for several rows; as rate_limit_all does it natively,
-- src/storage/all_or_nothing.rs): a composite of at most 8 (and at most
-- rate_limiter.max_requests) distinct members, each a defined, unsharded
-- token bucket or fixed or sliding window with a start, without automatic
-- blocks, none with an override or a block for the key or a row of
-- another regime, called with a key under READ COMMITTED (rate_limit has
-- checked the call itself) and admitted by every member without a debt.
-- A statement per member reads its definition and row as committed (no
-- lock: a refusal takes the general path, which answers it without a
-- lock); then the existing rows are locked one by one in the lock order
-- (name bytewise: rate_limit_all's, 55_all.sql), each at the version read
-- (a version changed or deleted meanwhile is not found), the clock is read
-- and every member decides again (48_fast_path.sql's arithmetic); the new
-- rows, which must all come after the existing ones in that order, are
-- inserted once decided (while the version of their definition read is
-- still the committed one), then the existing rows updated. Anything else
-- answers ok NULL and the call takes the general path, which then holds
-- what this held: always the rows before some point of the lock order (so
-- calls never wait for each other in a cycle). A new row that another
-- transaction inserted first (or whose definition changed) deletes the
-- rows this call inserted before it takes the general path (they stay
-- held, as the rows before the one it lost, until the transaction ends).
-- ok true: admitted, remaining the least of the members'.
CREATE FUNCTION rate_limiter._composite_fast(name text, key text, count float8,
                                             OUT ok boolean, OUT remaining float8)
LANGUAGE plpgsql VOLATILE
AS $composite_fast$
DECLARE
    -- Per member, in lock order: its definition (version, kind, rate,
    -- capacity, period and start in microseconds) and its row (version,
    -- state as committed, then as locked), then the state to store.
    names text[];
    definition_ctids tid[];
    kinds rate_limiter.kind[];
    rates float8[];
    capacities float8[];
    periods bigint[];
    starts bigint[];
    row_ctids tid[];
    row_values float8[];
    row_tss timestamptz[];
    row_prevs float8[];
    new_values float8[];
    new_prevs float8[];
    member_count int;
    overridden boolean;
    -- The first member without a row (the new rows: it and those after).
    first_new int;
    -- One member's, as read.
    member text;
    definition_ctid tid;
    kind rate_limiter.kind;
    rate float8;
    capacity float8;
    shards int;
    start timestamptz;
    period interval;
    block_for interval;
    row_ctid tid;
    row_value float8;
    row_ts timestamptz;
    row_prev float8;
    row_regime bigint;
    period_us numeric;
    j int;
    override text;
    now_ts timestamptz;
    now_us bigint;
    row_ts_us bigint;
    left_after float8;
    least_left float8;
BEGIN
    -- The members, and whether any has an override or a block for the key.
    SELECT c.members,
           EXISTS (SELECT FROM rate_limiter.overrides AS o WHERE o.name = ANY (c.members) AND o.key = _composite_fast.key)
           OR EXISTS (SELECT FROM rate_limiter.blocks AS b WHERE b.name = ANY (c.members) AND b.key = _composite_fast.key)
    INTO names, overridden
    FROM rate_limiter.composites AS c WHERE c.name = _composite_fast.name;
    member_count := coalesce(pg_catalog.cardinality(names), 0);
    -- (More members than rate_limiter.max_requests: the general path's
    -- 54000.)
    IF member_count = 0 OR member_count > 8 OR overridden
       OR member_count > rate_limiter._bound('rate_limiter.max_requests', 1000) THEN
        RETURN;
    END IF;
    -- In the lock order (bytewise; an insertion sort of at most 8).
    FOR i IN 2..member_count LOOP
        member := names[i];
        j := i - 1;
        WHILE j >= 1 AND names[j] COLLATE "C" > member COLLATE "C" LOOP
            names[j + 1] := names[j];
            j := j - 1;
        END LOOP;
        names[j + 1] := member;
    END LOOP;
    -- Each member's definition and row, as committed.
    FOR i IN 1..member_count LOOP
        SELECT d.ctid, d.kind, d.rate, coalesce(d.capacity, d.rate), d.shards, d.start, d.period, d.block_for,
               r.ctid, r.value, r.ts, r.prev, r.regime
        INTO definition_ctid, kind, rate, capacity, shards, start, period, block_for,
             row_ctid, row_value, row_ts, row_prev, row_regime
        FROM rate_limiter.definitions AS d
        LEFT JOIN rate_limiter.rate_limits AS r ON r.name = d.name AND r.key = _composite_fast.key AND r.shard = 0
        WHERE d.name = names[i];
        period_us := EXTRACT(epoch FROM period) * 1000000;
        -- (A member named twice: the same name twice in a row.)
        IF NOT FOUND OR (i > 1 AND names[i - 1] = names[i])
           OR shards <> 1 OR row_regime IS NOT NULL OR kind = 'calendar window'
           OR NOT rate_limiter._fast_limit(kind, rate, capacity, start, period_us, block_for, count)
           OR NOT (row_ctid IS NULL OR rate_limiter._fast_state(row_value, row_prev)) THEN
            RETURN;
        END IF;
        definition_ctids[i] := definition_ctid;
        kinds[i] := kind;
        rates[i] := rate;
        capacities[i] := capacity;
        periods[i] := period_us::bigint;
        starts[i] := rate_limiter._micros(start);
        row_ctids[i] := row_ctid;
        row_values[i] := row_value;
        row_tss[i] := row_ts;
        row_prevs[i] := row_prev;
    END LOOP;
    override := pg_catalog.current_setting('rate_limiter.now_override', true);
    now_us := rate_limiter._micros(rate_limiter._fast_now(override));
    -- As committed: every member admits (refusals never wait).
    FOR i IN 1..member_count LOOP
        IF row_ctids[i] IS NULL THEN
            first_new := coalesce(first_new, i);
        ELSIF first_new IS NOT NULL
              OR rate_limiter._fast_left(kinds[i], rates[i], periods[i], capacities[i], NULL, row_values[i],
                                         rate_limiter._micros(row_tss[i]), row_prevs[i], now_us, count) < 0 THEN
            RETURN;
        END IF;
    END LOOP;
    -- The existing rows, locked in order, each at the version read.
    FOR i IN 1..coalesce(first_new - 1, member_count) LOOP
        SELECT r.value, r.ts, r.prev INTO row_value, row_ts, row_prev
        FROM rate_limiter.rate_limits AS r
        WHERE r.ctid = row_ctids[i] AND r.name = names[i] AND r.key = _composite_fast.key AND r.shard = 0
        FOR UPDATE;
        IF NOT FOUND OR NOT rate_limiter._fast_state(row_value, row_prev) THEN
            RETURN;
        END IF;
        row_values[i] := row_value;
        row_tss[i] := row_ts;
        row_prevs[i] := row_prev;
    END LOOP;
    -- The clock, read once the rows are held; every member decides again.
    now_ts := rate_limiter._fast_now(override);
    now_us := rate_limiter._micros(now_ts);
    FOR i IN 1..member_count LOOP
        IF i >= first_new THEN
            left_after := capacities[i] - count;
            new_values[i] := rate_limiter._fast_new_value(kinds[i], capacities[i], count);
        ELSE
            row_ts_us := rate_limiter._micros(row_tss[i]);
            left_after := rate_limiter._fast_left(kinds[i], rates[i], periods[i], capacities[i], NULL, row_values[i],
                                                  row_ts_us, row_prevs[i], now_us, count);
            IF left_after < 0 THEN
                RETURN;
            END IF;
            new_values[i] := rate_limiter._fast_value(kinds[i], rates[i], periods[i], capacities[i], row_values[i],
                                                      row_ts_us, row_prevs[i], now_us, count);
            new_prevs[i] := rate_limiter._fast_prev(kinds[i], periods[i], row_values[i], row_ts_us, row_prevs[i],
                                                    now_us);
        END IF;
        least_left := least(least_left, left_after);
    END LOOP;
    -- The new rows, in order, each while the version of its definition
    -- read is still the committed one.
    FOR i IN coalesce(first_new, member_count + 1)..member_count LOOP
        row_ts := rate_limiter._fast_new_ts(kinds[i], periods[i], starts[i], now_ts, now_us, NULL);
        row_value := new_values[i];
        member := names[i];
        definition_ctid := definition_ctids[i];
        INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts)
        SELECT member, _composite_fast.key, 0, row_value, row_ts
        FROM rate_limiter.definitions AS d
        WHERE d.ctid = definition_ctid AND d.name = member
        ON CONFLICT ON CONSTRAINT rate_limits_name_key_shard_key DO NOTHING;
        IF NOT FOUND THEN
            -- Inserted first by another transaction (or the definition
            -- changed): withdraw what this call inserted.
            RAISE DEBUG 'rate_limiter: another transaction inserted the same state row; looking again';
            DELETE FROM rate_limiter.rate_limits AS r
            WHERE r.name = ANY (names[first_new:i - 1]) AND r.key = _composite_fast.key AND r.shard = 0;
            RETURN;
        END IF;
    END LOOP;
    -- The existing rows, each at the version locked (a TID scan).
    FOR i IN 1..coalesce(first_new - 1, member_count) LOOP
        row_ts := rate_limiter._fast_ts(kinds[i], periods[i], row_tss[i], rate_limiter._micros(row_tss[i]), now_ts,
                                        now_us);
        row_value := new_values[i];
        row_prev := new_prevs[i];
        row_ctid := row_ctids[i];
        UPDATE rate_limiter.rate_limits AS r SET value = row_value, ts = row_ts, prev = row_prev
        WHERE r.ctid = row_ctid;
    END LOOP;
    ok := true;
    remaining := least_left;
END
$composite_fast$;

-- rate_limit (consume) or rate_check of the composite name, as they
-- answer: its row, or with throws a refusal raised naming the member that
-- refused longest (its block's reason, if it is blocked).
CREATE FUNCTION rate_limiter._composite_answer(name text, key text, count float8, reserve boolean,
                                               throws boolean, consume boolean)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql VOLATILE
AS $composite_answer$
DECLARE
    answer record := rate_limiter._composite(name, key, count, reserve, consume);
    block record;
BEGIN
    IF NOT answer.ok AND throws THEN
        block := rate_limiter._block_of(answer.member, key, rate_limiter._now());
        PERFORM rate_limiter._refuse(answer.member, key, coalesce(answer.retry_after, 0), answer.remaining,
                                     block.until IS NOT NULL, block.reason);
    END IF;
    ok := answer.ok;
    retry_after := rate_limiter._interval(answer.retry_after);
    remaining := rate_limiter._shown(answer.remaining);
    RETURN NEXT;
END
$composite_answer$;
