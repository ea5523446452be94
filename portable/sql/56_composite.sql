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

-- One member of a composite as its fast path reads it in one statement
-- (_composite_fast): its definition (version, kind, rate, capacity,
-- shards, start, period, block_for) and the key's row (version and the
-- transaction that wrote it, value, ts, prev, regime; all NULL: no
-- row). Internal, and only the portable edition's: the native extension
-- does this in C. (A DO block, not CREATE TYPE: every run of the portable
-- edition's functions, install and update, makes sure it is there; a
-- release that changes its fields must ALTER it here too.)
DO $fast_member$
BEGIN
    IF pg_catalog.to_regtype('rate_limiter._fast_member') IS NULL THEN
        CREATE TYPE rate_limiter._fast_member AS (
            name            text,
            definition_ctid tid,
            kind            rate_limiter.kind,
            rate            float8,
            capacity        float8,
            shards          int,
            start           timestamptz,
            period          interval,
            block_for       interval,
            row_ctid        tid,
            row_xmin        xid,
            value           float8,
            ts              timestamptz,
            prev            float8,
            regime          bigint
        );
    END IF;
END
$fast_member$;

-- An install of this version built before _composite_fast returned a
-- number (it had OUT parameters) has the function with another result
-- type, which CREATE OR REPLACE cannot change.
DO $composite_fast_result$
BEGIN
    IF (SELECT p.prorettype FROM pg_catalog.pg_proc AS p
        WHERE p.oid = pg_catalog.to_regprocedure('rate_limiter._composite_fast(text, text, float8)'))
       = 'pg_catalog.record'::pg_catalog.regtype THEN
        DROP FUNCTION rate_limiter._composite_fast(text, text, float8);
    END IF;
END
$composite_fast_result$;

-- The fast path of a consuming call of a composite (rate_limit's, in
-- 50_limit.sql, for several rows; as rate_limit_all does it natively,
-- src/storage/all_or_nothing.rs): a composite of at most 8 (and at most
-- rate_limiter.max_requests) distinct members, each a defined, unsharded
-- token bucket or fixed or sliding window with a start, without automatic
-- blocks, none with an override or a block for the key or a row of
-- another regime, called with a key under READ COMMITTED (rate_limit has
-- checked the call itself) and admitted by every member without a debt.
-- One statement reads the members' definitions and rows as committed (no
-- lock: a refusal takes the general path, which answers it without a
-- lock); they are put in the lock order (name bytewise: rate_limit_all's,
-- 55_all.sql), the clock is read and every member decides
-- (48_fast_path.sql's arithmetic).
-- * Every member has a row: each row is updated in that order only if the
--   version read is still the committed one (a TID scan: it waits for a
--   holder, then finds the version it committed is another), so every
--   decision was made on the rows as they were when the clock was read
--   and still are once held. A version changed or deleted meanwhile: the
--   rows updated before it get their states back (held, as the rows
--   before it), and the general path decides again. Writes that took a
--   millisecond or more and four times as long as the read before them
--   (they waited for a holder that left a row as it was) decide and
--   write again at the clock read then: a call that waited is charged
--   when it proceeds, as when the clock is read after the locks.
-- * Else the existing rows, which must all come before the new ones in
--   that order, are locked one by one at the versions read (a version
--   changed or deleted meanwhile is not found, or is the latest version
--   on a minor release whose TID scan rechecks no TID after a wait, then
--   decided on), the clock is read again
--   and they decide again; the new rows are inserted in order (each while
--   the version of its definition read is still the committed one), then
--   the existing rows updated. A new row that another transaction
--   inserted first (or whose definition changed) deletes the rows this
--   call inserted before it takes the general path (they stay held, as
--   the rows before the one it lost, until the transaction ends).
-- Anything else answers NULL and the call takes the general path, which
-- then holds what this held: always the rows before some point of the
-- lock order (so calls never wait for each other in a cycle), with the
-- states they had. Admitted: what the call leaves, the least of the
-- members'. (A number, not a record: a function with OUT parameters
-- builds its result's row type on every call.)
CREATE FUNCTION rate_limiter._composite_fast(name text, key text, count float8)
RETURNS float8
LANGUAGE plpgsql VOLATILE
-- The members' read is a nested loop of their definitions and the key's
-- rows. On a definitions table never analyzed (it is small, so autovacuum
-- seldom analyzes it) the planner puts a Memoize node over the rows' index
-- scan, which sets up a hash table on every call and saves nothing: each
-- member's row is looked up once (bench/report/shapes.md).
SET enable_memoize = off
AS $composite_fast$
DECLARE
    -- The composite's members as named, and as read, in lock order.
    names text[];
    members rate_limiter._fast_member[];
    member_count int;
    overridden boolean;
    -- One member, as read.
    m rate_limiter._fast_member;
    j int;
    period_us numeric;
    -- Per member: the period in microseconds, the state to store (the
    -- row as read, then as locked: members[i]).
    periods bigint[];
    new_values float8[];
    new_tss timestamptz[];
    new_prevs float8[];
    -- The first member without a row (the new rows: it and those after),
    -- the last with one, and whether the existing rows are locked.
    first_new int;
    last_existing int;
    locked boolean := false;
    -- Whether every row was written (then the least left as written).
    written boolean := false;
    least_written float8;
    override text;
    -- The clock when the call began, and when its writes were done.
    started_us bigint;
    finished_us bigint;
    now_ts timestamptz;
    now_us bigint;
    row_value float8;
    row_ts timestamptz;
    row_prev float8;
    row_ctid tid;
    row_ts_us bigint;
    member text;
    definition_ctid tid;
    left_after float8;
    least_left float8;
BEGIN
    override := pg_catalog.current_setting('rate_limiter.now_override', true);
    started_us := rate_limiter._micros(rate_limiter._fast_now(override));
    -- The members with their definitions and rows, and whether any has an
    -- override or a block for the key. (A member named twice, or not
    -- defined, makes fewer definitions than names.)
    SELECT c.members,
           EXISTS (SELECT FROM rate_limiter.overrides AS o WHERE o.name = ANY (c.members) AND o.key = _composite_fast.key)
           OR EXISTS (SELECT FROM rate_limiter.blocks AS b WHERE b.name = ANY (c.members) AND b.key = _composite_fast.key),
           ARRAY(SELECT ROW(d.name, d.ctid, d.kind, d.rate, coalesce(d.capacity, d.rate), d.shards, d.start, d.period,
                            d.block_for, r.ctid, r.xmin, r.value, r.ts, r.prev, r.regime)::rate_limiter._fast_member
                 FROM rate_limiter.definitions AS d
                 LEFT JOIN rate_limiter.rate_limits AS r
                        ON r.name = d.name AND r.key = _composite_fast.key AND r.shard = 0
                 WHERE d.name = ANY (c.members))
    INTO names, overridden, members
    FROM rate_limiter.composites AS c WHERE c.name = _composite_fast.name;
    member_count := coalesce(pg_catalog.cardinality(names), 0);
    -- (More members than rate_limiter.max_requests: the general path's
    -- 54000.)
    IF member_count = 0 OR member_count > 8 OR overridden OR pg_catalog.cardinality(members) <> member_count
       OR member_count > rate_limiter._bound('rate_limiter.max_requests', 1000) THEN
        RETURN NULL;
    END IF;
    -- In the lock order (bytewise; an insertion sort of at most 8).
    FOR i IN 2..member_count LOOP
        IF members[i - 1].name COLLATE "C" > members[i].name COLLATE "C" THEN
            m := members[i];
            j := i - 1;
            WHILE j >= 1 AND members[j].name COLLATE "C" > m.name COLLATE "C" LOOP
                members[j + 1] := members[j];
                j := j - 1;
            END LOOP;
            members[j + 1] := m;
        END IF;
    END LOOP;
    -- Each member takes this path; the existing rows come first.
    FOR i IN 1..member_count LOOP
        m := members[i];
        period_us := EXTRACT(epoch FROM m.period) * 1000000;
        IF m.shards <> 1 OR m.regime IS NOT NULL OR m.kind = 'calendar window'
           OR NOT rate_limiter._fast_limit(m.kind, m.rate, m.capacity, m.start, period_us, m.block_for, count) THEN
            RETURN NULL;
        END IF;
        periods[i] := period_us::bigint;
        IF m.row_ctid IS NULL THEN
            first_new := coalesce(first_new, i);
        ELSIF first_new IS NOT NULL OR NOT rate_limiter._fast_state(m.value, m.prev) THEN
            RETURN NULL;
        END IF;
    END LOOP;
    last_existing := coalesce(first_new - 1, member_count);
    -- The existing rows decide on the rows as read (refusals never wait);
    -- with new rows, again once locked.
    LOOP
        now_ts := rate_limiter._fast_now(override);
        now_us := rate_limiter._micros(now_ts);
        least_left := NULL;
        FOR i IN 1..last_existing LOOP
            m := members[i];
            row_ts_us := rate_limiter._micros(m.ts);
            left_after := rate_limiter._fast_left(m.kind, m.rate, periods[i], m.capacity, NULL, m.value, row_ts_us,
                                                  m.prev, now_us, count);
            IF left_after < 0 THEN
                -- (Written: cannot be, what a row leaves never shrinks as
                -- the clock moves on; the first write stands.)
                RETURN CASE WHEN written THEN least_written END;
            END IF;
            new_values[i] := rate_limiter._fast_value(m.kind, m.rate, periods[i], m.capacity, m.value, row_ts_us,
                                                      m.prev, now_us, count);
            new_tss[i] := rate_limiter._fast_ts(m.kind, periods[i], m.ts, row_ts_us, now_ts, now_us);
            new_prevs[i] := rate_limiter._fast_prev(m.kind, periods[i], m.value, row_ts_us, m.prev, now_us);
            least_left := least(least_left, left_after);
        END LOOP;
        -- (Written, then decided again: written again below.)
        EXIT WHEN written;
        IF first_new IS NULL THEN
            -- Every member has a row: each updated if still as read.
            FOR i IN 1..member_count LOOP
                m := members[i];
                row_value := new_values[i];
                row_ts := new_tss[i];
                row_prev := new_prevs[i];
                -- (The version is the one read when its TID holds a
                -- version its inserter wrote: a TID is reused only once
                -- the version is gone, by a later transaction; and a minor
                -- release whose TID scan rechecks no TID after a wait
                -- would update the latest version, another transaction's.)
                UPDATE rate_limiter.rate_limits AS r SET value = row_value, ts = row_ts, prev = row_prev
                WHERE r.ctid = m.row_ctid AND r.xmin = m.row_xmin;
                IF NOT FOUND THEN
                    -- Changed meanwhile: the rows updated before it as they
                    -- were (this transaction's versions, held).
                    RAISE DEBUG 'rate_limiter: a state row changed since the call read it; looking again';
                    FOR j IN 1..i - 1 LOOP
                        m := members[j];
                        UPDATE rate_limiter.rate_limits AS r SET value = m.value, ts = m.ts, prev = m.prev
                        WHERE r.name = m.name AND r.key = _composite_fast.key AND r.shard = 0;
                    END LOOP;
                    RETURN NULL;
                END IF;
            END LOOP;
            -- A call that waited is charged when it proceeds: writes that
            -- took a millisecond or more and four times as long as the
            -- read before them (they waited for a holder that left a row
            -- as it was) decide again at the clock read now. (Relative,
            -- so that a backend slower throughout, e.g. under valgrind,
            -- does not.)
            finished_us := rate_limiter._micros(rate_limiter._fast_now(override));
            EXIT WHEN finished_us - now_us < greatest(1000, 4 * (now_us - started_us));
            written := true;
            least_written := least_left;
            CONTINUE;
        END IF;
        EXIT WHEN last_existing = 0 OR locked;
        -- The existing rows, locked in order, each at the version read.
        FOR i IN 1..last_existing LOOP
            row_ctid := members[i].row_ctid;
            member := members[i].name;
            SELECT r.value, r.ts, r.prev INTO row_value, row_ts, row_prev
            FROM rate_limiter.rate_limits AS r
            WHERE r.ctid = row_ctid AND r.name = member AND r.key = _composite_fast.key AND r.shard = 0
              AND r.regime IS NULL
            FOR UPDATE;
            IF NOT FOUND OR NOT rate_limiter._fast_state(row_value, row_prev) THEN
                RETURN NULL;
            END IF;
            m := members[i];
            m.value := row_value;
            m.ts := row_ts;
            m.prev := row_prev;
            members[i] := m;
        END LOOP;
        locked := true;
    END LOOP;
    IF first_new IS NOT NULL THEN
        -- The new rows, in order, each while the version of its
        -- definition read is still the committed one.
        FOR i IN first_new..member_count LOOP
            m := members[i];
            least_left := least(least_left, m.capacity - count);
            row_value := rate_limiter._fast_new_value(m.kind, m.capacity, count);
            row_ts := rate_limiter._fast_new_ts(m.kind, periods[i], rate_limiter._micros(m.start), now_ts, now_us,
                                                NULL);
            member := m.name;
            definition_ctid := m.definition_ctid;
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
                WHERE r.name = ANY (ARRAY(SELECT n.name FROM pg_catalog.unnest(members[first_new:i - 1]) AS n))
                  AND r.key = _composite_fast.key AND r.shard = 0;
                RETURN NULL;
            END IF;
        END LOOP;
    END IF;
    -- The existing rows held (locked, or written and decided again after
    -- a wait) get the last decision's states: this transaction holds
    -- them, so each is the version its key finds.
    IF first_new IS NOT NULL OR written THEN
        FOR i IN 1..last_existing LOOP
            member := members[i].name;
            row_value := new_values[i];
            row_ts := new_tss[i];
            row_prev := new_prevs[i];
            UPDATE rate_limiter.rate_limits AS r SET value = row_value, ts = row_ts, prev = row_prev
            WHERE r.name = member AND r.key = _composite_fast.key AND r.shard = 0;
        END LOOP;
    END IF;
    RETURN least_left;
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
