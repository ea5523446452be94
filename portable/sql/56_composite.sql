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
