-- rate_limiter 0.2.0 -> 0.3.0 (ALTER EXTENSION rate_limiter UPDATE).
--
-- 0.3.0 closes what a security review found (issue "a role that uses limits
-- cannot change them"); no type, table or function signature changes, so
-- every definition and state row keeps its meaning. In the library: an
-- inline config for a defined limit needs the right to call define()
-- (42501); rate_limiter.max_requests and rate_limiter.max_inline_shards
-- bound the work of one call (54000); rate_limit_all holds no placeholder
-- rows for shards it cannot use; the definition cache is bounded; the
-- owner's statements run with search_path pg_catalog, pg_temp. In SQL
-- (below): guard() keys are canonical (values that compare equal are one
-- key; a key column whose equal values may differ in text is 22023; a NULL
-- key is 22004); rate_wait() looks before it tries, so refused tries take
-- no transaction id; the definitions trigger's search path no longer
-- includes the extension's schema; the comments name the new errors; and
-- privileges that ALTER DEFAULT PRIVILEGES handed out are revoked.

CREATE OR REPLACE FUNCTION rate_limiter.guard()
RETURNS trigger
LANGUAGE plpgsql
-- The key's text form must be one per value: timestamptz keys are written
-- in UTC, floats with the shortest exact digits, whatever the session says.
SET search_path = pg_catalog, pg_temp
SET timezone = 'UTC'
SET extra_float_digits = 1
AS $guard$
DECLARE
    limit_key text;
    limit_count float8 := 1;
    new_row jsonb;
    key_type oid;
    key_collation oid;
    base_type oid;
BEGIN
    IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE') THEN
        RAISE EXCEPTION USING ERRCODE = '39P01',
            MESSAGE = 'rate_limiter.guard() must be a BEFORE INSERT OR UPDATE ... FOR EACH ROW trigger';
    END IF;
    IF TG_NARGS NOT BETWEEN 1 AND 3 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'rate_limiter.guard() takes the limit name, then optionally the key column and the count column';
    END IF;
    -- The row as jsonb: its columns by name, without dynamic SQL.
    new_row := pg_catalog.to_jsonb(NEW);
    IF TG_NARGS >= 2 THEN
        SELECT a.atttypid, a.attcollation INTO key_type, key_collation
        FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = TG_RELID AND a.attname = TG_ARGV[1] AND a.attnum > 0 AND NOT a.attisdropped;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '42703',
                MESSAGE = pg_catalog.format('rate_limiter.guard(): %s has no column %s', TG_TABLE_NAME, TG_ARGV[1]);
        END IF;
        -- A domain's values compare as its base type's.
        LOOP
            SELECT t.typbasetype INTO base_type FROM pg_catalog.pg_type AS t
            WHERE t.oid = key_type AND t.typtype = 'd';
            EXIT WHEN NOT FOUND;
            key_type := base_type;
        END LOOP;
        -- Values that compare equal must be one key: refuse a column whose
        -- equality is not that of its text form.
        IF key_collation <> 0 AND NOT (SELECT c.collisdeterministic FROM pg_catalog.pg_collation AS c
                                       WHERE c.oid = key_collation) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = pg_catalog.format('rate_limiter.guard(): key column %s of %s has a nondeterministic collation: values it calls equal would be different keys', TG_ARGV[1], TG_TABLE_NAME),
                HINT = 'Key on a column holding one text per value, e.g. ALTER TABLE ... ADD COLUMN limit_key text GENERATED ALWAYS AS (lower(column)) STORED.';
        END IF;
        IF key_type <> ALL (ARRAY['pg_catalog.text', 'pg_catalog.varchar', 'pg_catalog.bpchar', 'pg_catalog.name',
                                  'pg_catalog.int2', 'pg_catalog.int4', 'pg_catalog.int8', 'pg_catalog.oid',
                                  'pg_catalog.numeric', 'pg_catalog.float4', 'pg_catalog.float8', 'pg_catalog.bool',
                                  'pg_catalog.uuid', 'pg_catalog.date', 'pg_catalog.timestamp', 'pg_catalog.timestamptz',
                                  'pg_catalog.inet', 'pg_catalog.cidr', 'pg_catalog.macaddr', 'pg_catalog.macaddr8']::pg_catalog.regtype[]::pg_catalog.oid[]) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = pg_catalog.format('rate_limiter.guard(): key column %s of %s has type %s, whose equal values can have different text forms', TG_ARGV[1], TG_TABLE_NAME, key_type::pg_catalog.regtype),
                HINT = 'Key on a column holding one text per value, e.g. ALTER TABLE ... ADD COLUMN limit_key text GENERATED ALWAYS AS (lower(column::text)) STORED.';
        END IF;
        limit_key := new_row ->> TG_ARGV[1];
        IF limit_key IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004',
                MESSAGE = pg_catalog.format('rate_limiter.guard(): key column %s of %s is NULL (a NULL key is never the global limit)', TG_ARGV[1], TG_TABLE_NAME);
        END IF;
        -- One text per value: 42.0 and 42 are the key '42'; -0 is '0'.
        IF key_type = 'pg_catalog.numeric'::pg_catalog.regtype THEN
            limit_key := pg_catalog.trim_scale(limit_key::pg_catalog.numeric)::pg_catalog.text;
        ELSIF key_type IN ('pg_catalog.float4'::pg_catalog.regtype, 'pg_catalog.float8'::pg_catalog.regtype) THEN
            limit_key := CASE WHEN limit_key::pg_catalog.float8 = 0 THEN '0'
                              ELSE limit_key::pg_catalog.float8::pg_catalog.text END;
        END IF;
    END IF;
    IF TG_NARGS = 3 THEN
        IF NOT new_row ? TG_ARGV[2] THEN
            RAISE EXCEPTION USING ERRCODE = '42703',
                MESSAGE = pg_catalog.format('rate_limiter.guard(): %s has no column %s', TG_TABLE_NAME, TG_ARGV[2]);
        END IF;
        limit_count := (new_row ->> TG_ARGV[2])::float8;
    END IF;
    PERFORM * FROM rate_limiter.rate_limit(TG_ARGV[0], limit_key, limit_count, throws => true);
    RETURN NEW;
END
$guard$;

CREATE OR REPLACE FUNCTION rate_limiter.rate_wait(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    timeout interval            DEFAULT '30 seconds',
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE plpgsql VOLATILE ROWS 1
SET search_path = pg_catalog, pg_temp
AS $rate_wait$
DECLARE
    deadline timestamptz;
    probe record;
    attempt record;
BEGIN
    IF timeout IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'timeout must not be NULL';
    END IF;
    IF timeout < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'timeout must not be negative';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION USING ERRCODE = '25006', MESSAGE = 'cannot execute rate_wait() in a read-only transaction';
    END IF;
    deadline := pg_catalog.clock_timestamp() + timeout;
    LOOP
        -- Look first (no lock, no transaction id); try to consume only when
        -- the limit would admit, so a long wait does not use up a
        -- subtransaction and a transaction id per refused try.
        SELECT * INTO probe FROM rate_limiter.rate_check(name, key, count, config => config);
        IF probe.ok THEN
            BEGIN
                SELECT * INTO attempt FROM rate_limiter.rate_limit(name, key, count, config => config);
                IF NOT attempt.ok THEN
                    -- Roll the refused try back: that releases its row lock,
                    -- so others can use the limit while this call sleeps.
                    RAISE EXCEPTION USING ERRCODE = 'RLW00';
                END IF;
            EXCEPTION WHEN SQLSTATE 'RLW00' THEN
                NULL;
            END;
            IF attempt.ok THEN
                RETURN QUERY SELECT attempt.ok, attempt.retry_after, attempt.remaining;
                RETURN;
            END IF;
            -- Another transaction took the tokens between the look and the
            -- try: wait as the try says, at least a millisecond.
            probe := attempt;
            probe.retry_after := greatest(attempt.retry_after, interval '1 millisecond');
        END IF;
        IF pg_catalog.clock_timestamp() + probe.retry_after > deadline THEN
            RETURN QUERY SELECT false, probe.retry_after, probe.remaining;
            RETURN;
        END IF;
        PERFORM pg_catalog.pg_sleep(EXTRACT(epoch FROM probe.retry_after)::float8);
    END LOOP;
END
$rate_wait$;

CREATE OR REPLACE FUNCTION rate_limiter._definitions_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rate_limiter._invalidate_definitions(TG_RELID);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config) IS
'Consumes count tokens of limit (name, key) inside the current transaction, locking its row. '
'Returns one row: ok, retry_after (interval, rounded up to the microsecond; NULL when admitted without debt), remaining (tokens). '
'key NULL = the global limit; config inline is for names without a definition (for a defined name only a role that may call define may pass one). '
'A sharded limit consumes from one or two of its shards, passing over shards other transactions hold; remaining is then an estimate for the whole limit. '
'Errors: 22004 NULL name/count/reserve/throws; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 invalid count or config; '
'the rate_limiter.sqlstate SQLSTATE (default RL429, JSON DETAIL) when refused with throws => true.';

COMMENT ON FUNCTION rate_limiter.rate_credit(text, text, float8, rate_limiter.config) IS
'Gives count tokens back to the limit (name, key), e.g. the unused part of a reservation: refills to now, adds count, never above capacity '
'(a sharded limit fills its emptiest shards first, each up to its capacity); a limit without state is full and nothing is written. '
'Locks the rows like rate_limit. Returns the value afterwards (tokens, summed over shards). '
'Errors: 22004 NULL name/count; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 invalid count or config; 25006 in a read-only transaction.';

COMMENT ON FUNCTION rate_limiter.guard() IS
'Trigger function: CREATE TRIGGER ... BEFORE INSERT OR UPDATE ON t FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard(limit_name [, key_column [, count_column]]). '
'Each row consumes count_column (default 1) tokens of the limit, keyed by key_column (none = the global limit) in a canonical text form: values that compare equal are one key (numeric 42.0 is 42, timestamptz in UTC); '
'a refusal raises the rate_limiter.sqlstate error (default RL429) and the statement is rolled back. The role writing the rows needs USAGE on the schema and EXECUTE on rate_limit. '
'Errors: 39P01 not a BEFORE ... FOR EACH ROW trigger; 22023 wrong number of arguments, or a key column whose equal values may have different text forms (a nondeterministic collation, citext, jsonb, ...); '
'22004 a NULL key value; 42703 unknown column; and those of rate_limit.';

COMMENT ON FUNCTION rate_limiter.status(text, text, rate_limiter.config) IS
'Where the limit (name, key) stands now, without consuming or locking: value (tokens available now, summed over shards; negative in debt), '
'capacity (all shards together), full_at (when it is full again if nothing consumes; now when full), shards. '
'Errors: 22004 NULL name; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 invalid config.';

COMMENT ON FUNCTION rate_limiter.http_headers(text, text, boolean, interval, float8, rate_limiter.config) IS
'HTTP response fields for a call of (name, key), per draft-ietf-httpapi-ratelimit-headers-10: '
'a jsonb object with RateLimit-Policy ("<name>";q=<rate>;w=<period seconds>), RateLimit ("<name>";r=<whole tokens left>;t=<seconds until full, or until retry_after when refused>) '
'and, only when ok is false, Retry-After (<seconds>). Seconds are whole, rounded up. ok, retry_after, remaining are a rate_limit result; NULL remaining means the current value. '
'The name is sent as given; keys never are. Errors: 22004 NULL name, or NULL retry_after with ok false; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 a name that is not printable ASCII, a negative retry_after.';

COMMENT ON FUNCTION rate_limiter.rate_limit_all(rate_limiter.request[], boolean, boolean) IS
'Consumes every request (name, key, count, config) or none: the rows of all the limits are locked in one fixed order (name, key, shard; no deadlock whatever the order of the requests), '
'the clock is read once, and the requests are evaluated in the order given (a limit named twice is charged twice). '
'Returns one row per request, in order: name, key, ok, retry_after, remaining (as rate_limit). If any row is not ok, nothing is consumed. '
'A NULL count means 1; a NULL config means the definition. '
'Errors: 22004 NULL requests/element/name/reserve/throws; 42704 a name without config or definition; 22023 invalid count or config, or one limit named with two configs; '
'54000 more than rate_limiter.max_requests requests, or an inline config with more than rate_limiter.max_inline_shards shards; 42501 an inline config for a defined limit from a role that may not call define; '
'25006 in a read-only transaction; the rate_limiter.sqlstate SQLSTATE (default RL429) for the first refused request with throws => true.';

COMMENT ON FUNCTION rate_limiter.rate_wait(text, text, float8, interval, rate_limiter.config) IS
'As rate_limit, but a refused call sleeps until retry_after and tries again, until it is admitted or the next try would come after timeout '
'(then it returns ok = false at once, with retry_after, and consumes nothing). While it sleeps it holds no row lock (the refused try is rolled back). '
'Each try first looks (rate_check: no lock, no transaction id) and consumes only when the limit would admit, so waiting uses no subtransaction per refusal. '
'Sleeps on the real clock; can be cancelled (57014); statement_timeout applies. '
'Errors: as rate_limit (22004, 42704, 42501, 54000, 22023, 25006 in a read-only transaction); 22004 NULL timeout; 22023 negative timeout.';

-- Privileges that ALTER DEFAULT PRIVILEGES handed out when earlier
-- versions' scripts created objects (the owner's default ACLs, for every
-- schema or for this one): revoked, so that after the update, as after
-- CREATE EXTENSION, only the README's GRANTs give anyone access. (Role
-- names come from the catalog, quoted with %I.)
DO $revoke$
DECLARE
    entry record;
    type_name text;
BEGIN
    FOR entry IN
        SELECT DISTINCT d.defaclobjtype AS kind, r.rolname
        FROM pg_catalog.pg_default_acl AS d
        CROSS JOIN LATERAL pg_catalog.aclexplode(d.defaclacl) AS a
        JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee
        WHERE d.defaclrole = (SELECT c.relowner FROM pg_catalog.pg_class AS c
                              WHERE c.oid = 'rate_limiter.rate_limits'::pg_catalog.regclass)
          AND d.defaclnamespace IN (0, 'rate_limiter'::pg_catalog.regnamespace)
          AND a.grantee <> d.defaclrole
    LOOP
      BEGIN
        CASE entry.kind
            WHEN 'f' THEN
                EXECUTE pg_catalog.format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rate_limiter FROM %I', entry.rolname);
            WHEN 'r' THEN
                EXECUTE pg_catalog.format('REVOKE ALL ON ALL TABLES IN SCHEMA rate_limiter FROM %I', entry.rolname);
            WHEN 'S' THEN
                EXECUTE pg_catalog.format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA rate_limiter FROM %I', entry.rolname);
            WHEN 'n' THEN
                EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA rate_limiter FROM %I', entry.rolname);
            WHEN 'T' THEN
                FOR type_name IN
                    SELECT t.oid::pg_catalog.regtype::pg_catalog.text FROM pg_catalog.pg_type AS t
                    WHERE t.typnamespace = 'rate_limiter'::pg_catalog.regnamespace AND t.typtype IN ('c', 'e', 'd')
                      AND (t.typtype <> 'c' OR (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid = t.typrelid) = 'c')
                LOOP
                    EXECUTE pg_catalog.format('REVOKE ALL ON TYPE %s FROM %I', type_name, entry.rolname);
                END LOOP;
            ELSE
                NULL;
        END CASE;
      EXCEPTION WHEN SQLSTATE '2BP01' THEN
        -- The role granted its privilege on to others (the README's
        -- GRANTs): it keeps it; REVOKE ... CASCADE would take theirs too.
        RAISE WARNING 'rate_limiter: % keeps privileges it granted on to other roles', entry.rolname;
      END;
    END LOOP;
END
$revoke$;
-- The installing role keeps what CREATE EXTENSION gave it.
