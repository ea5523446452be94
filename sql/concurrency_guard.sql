-- Concurrency limits (docs/concurrency.md, "Guarding a table"): the
-- trigger function that takes a slot for the writing transaction.
-- PL/pgSQL in both editions: scripts/portable.sh takes this whole file.

-- guard_slot(): a trigger that holds a slot of a concurrency limit for the
-- transaction that writes the table (docs/concurrency.md, "Guarding a
-- table"). Invoker's rights, as guard(): the writing role needs EXECUTE on
-- acquire. The slots this transaction holds are read from its own
-- setting (no table access), so a transaction takes one slot per key
-- however many rows it writes.
CREATE FUNCTION rate_limiter.guard_slot()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $guard_slot$
DECLARE
    limit_key text;
    taken record;
BEGIN
    IF TG_WHEN <> 'BEFORE' THEN
        RAISE EXCEPTION USING ERRCODE = '39P01',
            MESSAGE = 'rate_limiter.guard_slot() must be a BEFORE trigger';
    END IF;
    IF TG_NARGS NOT BETWEEN 1 AND 2 OR (TG_NARGS = 2 AND TG_LEVEL <> 'ROW') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'rate_limiter.guard_slot() takes the limit name, then optionally the key column (a FOR EACH ROW trigger)';
    END IF;
    IF TG_NARGS = 2 THEN
        IF NOT pg_catalog.to_jsonb(CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END) ? TG_ARGV[1] THEN
            RAISE EXCEPTION USING ERRCODE = '42703',
                MESSAGE = pg_catalog.format('rate_limiter.guard_slot(): %s has no column %s', TG_TABLE_NAME, TG_ARGV[1]);
        END IF;
        limit_key := pg_catalog.to_jsonb(CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END) ->> TG_ARGV[1];
        IF limit_key IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004',
                MESSAGE = pg_catalog.format('rate_limiter.guard_slot(): key column %s of %s is NULL (a NULL key is never the global limit)', TG_ARGV[1], TG_TABLE_NAME);
        END IF;
    END IF;
    IF NOT EXISTS (
        SELECT FROM pg_catalog.jsonb_to_recordset(
                 coalesce(nullif(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), ''), '[]')::jsonb)
             AS held(n text, k text, slot int4)
        WHERE held.n = TG_ARGV[0] AND held.k IS NOT DISTINCT FROM limit_key) THEN
        SELECT * INTO taken FROM rate_limiter.acquire(TG_ARGV[0], limit_key, throws => true);
        IF taken.lease_id IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = pg_catalog.format('rate_limiter.guard_slot(): concurrency limit "%s" takes timed leases (its definition has a lease)', TG_ARGV[0]),
                HINT = 'A trigger holds a slot for its transaction: define the limit without a lease.';
        END IF;
    END IF;
    RETURN CASE WHEN TG_LEVEL = 'STATEMENT' THEN NULL WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$guard_slot$;

COMMENT ON FUNCTION rate_limiter.guard_slot() IS
'Trigger function: CREATE TRIGGER ... BEFORE INSERT OR UPDATE OR DELETE ON t [FOR EACH ROW] EXECUTE FUNCTION rate_limiter.guard_slot(limit_name [, key_column]). '
'The writing transaction takes a slot of the concurrency limit (a transaction lease, one per key however many rows it writes), keyed by key_column''s text (none = the global limit); '
'when every slot is held the rate_limiter.sqlstate error (default RL429) is raised and the statement is rolled back. The role writing the rows needs USAGE on the schema and EXECUTE on acquire. '
'Errors: 39P01 not a BEFORE trigger; 22023 wrong arguments, a key column on a statement trigger, a limit with a default lease; 22004 a NULL key value; 42703 unknown column; and those of acquire.';

