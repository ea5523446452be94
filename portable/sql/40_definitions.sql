-- The portable edition (docs/guarantees.md, "Portable edition"): named
-- limits. define() and undefine() write rate_limiter.definitions with the
-- native extension's statements (src/definitions.rs), and a call resolves
-- its config as the native one does: the inline config, else the key's
-- override (42_overrides.sql), else the definition, else 42704.

-- Whether the definition of name that this transaction's snapshot sees
-- was replaced or deleted by a transaction that has committed since: its
-- row's xmax (as a full transaction id, in the epoch of the snapshot's
-- xmax or the one before) is a committed transaction. (A row lock also
-- sets xmax; define() locks the row only to change it, so a committed
-- locker that changed nothing, which makes this answer true in vain,
-- costs a retry, never a wrong decision.)
CREATE FUNCTION rate_limiter._replaced_after_snapshot(name text)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $replaced$
DECLARE
    replaced_by xid;
    top numeric;
    full_id numeric;
BEGIN
    SELECT d.xmax INTO replaced_by FROM rate_limiter.definitions AS d WHERE d.name = _replaced_after_snapshot.name;
    IF NOT FOUND OR replaced_by::text = '0' THEN
        RETURN false;
    END IF;
    top := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::numeric;
    full_id := pg_catalog.floor(top / 4294967296) * 4294967296 + replaced_by::text::numeric;
    IF full_id > top + 2147483648 THEN
        full_id := full_id - 4294967296;
    END IF;
    RETURN pg_catalog.pg_xact_status(full_id::text::xid8) = 'committed';
END
$replaced$;

-- Whether a definition of name that this transaction's snapshot does not
-- see has committed since (REPEATABLE READ, SERIALIZABLE): an insert of
-- the name, in a subtransaction that is always rolled back, meets the
-- committed row in the primary key's index, which PostgreSQL reports
-- as a serialization failure when the row is not visible to the
-- snapshot (ON CONFLICT DO NOTHING). A read-only transaction cannot
-- insert: there the answer is false (the call is 42704, as before).
CREATE FUNCTION rate_limiter._defined_after_snapshot(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $defined_after$
BEGIN
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RETURN false;
    END IF;
    BEGIN
        INSERT INTO rate_limiter.definitions AS d (name, kind, rate, period)
        VALUES (_defined_after_snapshot.name, 'token bucket', 1, '1 second')
        ON CONFLICT ON CONSTRAINT definitions_pkey DO NOTHING;
        -- Never kept: the error rolls the insert back.
        RAISE EXCEPTION USING ERRCODE = 'P0002';
    EXCEPTION
        WHEN serialization_failure THEN
            RETURN true;
        WHEN no_data_found THEN
            RETURN false;
    END;
END
$defined_after$;

-- The config a call of (name, key) uses, and whether it enforces (false:
-- shadow mode), in the order of docs/overrides.md, "Precedence": inline
-- when given (enforcing; for a defined name only a role that may call
-- define may pass one, and only in a call made from no other function
-- (rate_limiter._called_directly): 42501; at most
-- rate_limiter.max_inline_shards shards: 54000), else the key's override
-- while it is in force (_overridden), else the definition, else 42704
-- naming the limit. The config is checked (22004, 22023). regime: what
-- the state rows of the call are written under (NULL: the definition's
-- kind, period and shards; _regime). blocked_until, block_reason: the end
-- (microseconds) and reason of the key's block while it is blocked
-- (43_blocks.sql), else NULL.
CREATE FUNCTION rate_limiter._resolve(name text, key text, inline rate_limiter.config, inline_given boolean,
                                      OUT config rate_limiter.config, OUT enforce boolean,
                                      OUT period bigint, OUT start bigint, OUT regime bigint,
                                      OUT blocked_until bigint, OUT block_reason text)
LANGUAGE plpgsql STABLE
AS $resolve$
DECLARE
    checked record;
    most int;
    defined rate_limiter.definitions;
    applied record;
BEGIN
    IF inline_given THEN
        checked := rate_limiter._config(inline);
        most := rate_limiter._bound('rate_limiter.max_inline_shards', 64);
        IF inline.shards > most THEN
            RAISE EXCEPTION 'an inline config may have at most % shards (rate_limiter.max_inline_shards), not %', most, inline.shards
                USING ERRCODE = '54000';
        END IF;
        -- (The role checked is the session's: a SECURITY DEFINER caller's
        -- role cannot be seen from here, so a call made from inside any
        -- function but rate_limiter's own is refused too.)
        IF EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = _resolve.name)
           AND (NOT pg_catalog.has_function_privilege(rate_limiter._invoker(),
                    'rate_limiter.define(text, rate_limiter.config, boolean)', 'EXECUTE')
                OR NOT rate_limiter._called_directly()) THEN
            RAISE EXCEPTION 'permission denied to override the definition of rate limit "%" with an inline config',
                rate_limiter._for_message(_resolve.name)
                USING ERRCODE = '42501',
                      HINT = 'The limit is defined: call it without config => ..., or ask a role that may call rate_limiter.define() to change the definition.';
        END IF;
        config := inline;
        enforce := true;
    ELSE
        SELECT * INTO defined FROM rate_limiter.definitions AS d WHERE d.name = _resolve.name;
        -- Under REPEATABLE READ and SERIALIZABLE the row read is the one
        -- the transaction's snapshot sees. A define or undefine that has
        -- committed since the snapshot was taken replaced it, or added one
        -- the snapshot does not see: deciding without it would decide
        -- under a definition that is gone, so the call fails as PostgreSQL
        -- fails a write whose row changed after the snapshot (40001).
        IF pg_catalog.current_setting('transaction_isolation') <> 'read committed'
           AND (CASE WHEN FOUND THEN rate_limiter._replaced_after_snapshot(_resolve.name)
                     ELSE rate_limiter._defined_after_snapshot(_resolve.name) END) THEN
            RAISE EXCEPTION 'could not serialize access: the definition of rate limit "%" changed after this transaction''s snapshot',
                rate_limiter._for_message(_resolve.name)
                USING ERRCODE = '40001',
                      HINT = 'Retry the transaction: it will use the new definition.';
        END IF;
        IF defined.name IS NULL THEN
            RAISE EXCEPTION 'rate limit "%" is not defined', rate_limiter._for_message(_resolve.name)
                USING ERRCODE = '42704',
                      HINT = 'Define it with rate_limiter.define(), or pass config => rate_limiter.token_bucket(...) or rate_limiter.fixed_window(...).';
        END IF;
        config := ROW(defined.kind, defined.rate, defined.period, defined.capacity, defined.max_reserved,
                      defined.shards, defined.start, defined.block_for, defined.max_block,
                      defined.forget_after, defined.time_zone)::rate_limiter.config;
        checked := rate_limiter._config(config);
        enforce := defined.enforce;
        -- (A change of the key's override since the snapshot rewrote the
        -- definition's row: 40001 above; 42_overrides.sql.)
        IF key IS NOT NULL THEN
            applied := rate_limiter._overridden(name, key, config, checked.period, enforce);
            IF applied.period IS NOT NULL THEN
                config := applied.config;
                enforce := applied.enforce;
                period := applied.period;
                start := applied.start;
                regime := applied.regime;
            END IF;
        END IF;
    END IF;
    IF period IS NULL THEN
        period := checked.period;
        start := checked.start;
    END IF;
    -- A blocked key (43_blocks.sql): the end of its block and its reason.
    -- (An inline config of an undefined name has blocks only when it has
    -- automatic blocks.)
    IF NOT inline_given OR config.block_for IS NOT NULL
       OR EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = _resolve.name) THEN
        SELECT b.until, b.reason INTO blocked_until, block_reason
        FROM rate_limiter._block_of(name, key, rate_limiter._now()) AS b;
    END IF;
END
$resolve$;

-- A name or key in an error message (names::for_message): in a UTF8
-- database the text as it is, in any other ASCII with every other byte
-- written \xNN; at most 64 characters, then "...".
CREATE FUNCTION rate_limiter._for_message(value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $for_message$
DECLARE
    shown text := '';
    pieces int := 0;
    bytes bytea;
    b int;
BEGIN
    IF pg_catalog.getdatabaseencoding() = 'UTF8' THEN
        IF pg_catalog.length(value) <= 64 THEN
            RETURN value;
        END IF;
        RETURN pg_catalog.left(value, 64) || '...';
    END IF;
    bytes := pg_catalog.convert_to(value, pg_catalog.getdatabaseencoding());
    FOR i IN 0..pg_catalog.length(bytes) - 1 LOOP
        pieces := pieces + 1;
        IF pieces > 64 THEN
            RETURN shown || '...';
        END IF;
        b := pg_catalog.get_byte(bytes, i);
        IF b BETWEEN 32 AND 126 THEN
            shown := shown || pg_catalog.chr(b);
        ELSE
            shown := shown || '\x' || pg_catalog.lpad(pg_catalog.to_hex(b), 2, '0');
        END IF;
    END LOOP;
    RETURN shown;
END
$for_message$;

CREATE FUNCTION rate_limiter.define(name text, config rate_limiter.config, enforce boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define$
DECLARE
    per_shard float8;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF pg_catalog.num_nulls(config) = 1 THEN
        RAISE EXCEPTION 'config must not be NULL' USING ERRCODE = '22004';
    END IF;
    -- A concurrency limit (docs/concurrency.md): sql/concurrency.sql, as
    -- the native define sends it there.
    IF config.kind::text = 'concurrency' THEN
        PERFORM rate_limiter._define_concurrency(name, config, enforce);
        RETURN;
    END IF;
    -- As the native define: the config's NULL fields, then enforce, then
    -- the config's values.
    PERFORM rate_limiter._config_nulls(config);
    IF enforce IS NULL THEN
        RAISE EXCEPTION 'enforce must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM rate_limiter._config(config);
    -- The sizing rule (as the native define): 5 tokens a shard at least.
    IF config.shards > 1 THEN
        per_shard := rate_limiter._div(coalesce(config.capacity, config.rate), config.shards::float8);
        IF per_shard < 5 THEN
            RAISE WARNING 'each of the % shards of rate limit "%" holds only % tokens',
                config.shards, rate_limiter._for_message(name), rate_limiter._show(per_shard)
                USING HINT = 'Give each shard at least 5 tokens (10 or more is better): fewer shards, or a larger capacity (scale rate and period together to keep the same rate).';
        END IF;
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute define() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- One namespace (docs/composites.md).
    IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE c.name = define.name) THEN
        RAISE EXCEPTION '"%" is a composite (define_all): a limit needs a name of its own', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'Choose another name, or undefine() the composite first.';
    END IF;
    -- Lock the definition, then the state rows to discard, in the order
    -- every consuming call locks rows; then write (a new snapshot sees
    -- what those rows' holders committed).
    PERFORM count(*) FROM (
        SELECT 1
        FROM rate_limiter.rate_limits AS r,
             (SELECT d.kind, d.period, d.shards FROM rate_limiter.definitions AS d
              WHERE d.name = define.name FOR UPDATE) AS p
        WHERE r.name = define.name
          AND (p.kind::text, p.period, p.shards) IS DISTINCT FROM (config.kind::text, config.period, config.shards)
        ORDER BY r.key NULLS FIRST, r.shard
        FOR UPDATE OF r
    ) AS locked;
    WITH previous AS (
        SELECT d.kind, d.period, d.shards FROM rate_limiter.definitions AS d WHERE d.name = define.name FOR UPDATE
    ), upsert AS (
        INSERT INTO rate_limiter.definitions AS d
            (name, kind, rate, period, capacity, max_reserved, shards, start, enforce,
             block_for, max_block, forget_after, time_zone)
        VALUES (define.name, config.kind, config.rate, config.period, config.capacity, config.max_reserved,
                config.shards, config.start, define.enforce, config.block_for, config.max_block,
                config.forget_after, config.time_zone)
        ON CONFLICT ON CONSTRAINT definitions_pkey DO UPDATE SET
            kind = excluded.kind, rate = excluded.rate, period = excluded.period,
            capacity = excluded.capacity, max_reserved = excluded.max_reserved,
            shards = excluded.shards, start = excluded.start, enforce = excluded.enforce,
            block_for = excluded.block_for, max_block = excluded.max_block,
            forget_after = excluded.forget_after, time_zone = excluded.time_zone
        RETURNING 1
    )
    DELETE FROM rate_limiter.rate_limits AS r
    USING previous AS p
    WHERE r.name = define.name
      AND (p.kind::text, p.period, p.shards) IS DISTINCT FROM (config.kind::text, config.period, config.shards);
END
$define$;

CREATE FUNCTION rate_limiter.undefine(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $undefine$
DECLARE
    deleted boolean;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute undefine() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- As define_all() (sql/composites.sql): neither misses what the other
    -- committed.
    LOCK TABLE rate_limiter.composites IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM rate_limiter.definitions AS d WHERE d.name = undefine.name;
    deleted := FOUND;
    -- In a statement of its own, which sees what an override() that held
    -- the row committed: a limit that is some other limit's key's plan
    -- stays (2BP01, and the deletion above is undone); else its own
    -- overrides go with it (docs/overrides.md).
    IF EXISTS (SELECT FROM rate_limiter.overrides AS o
               WHERE o.plan = undefine.name AND o.name <> undefine.name) THEN
        RAISE EXCEPTION 'rate limit "%" is the plan of overrides', rate_limiter._for_message(name)
            USING ERRCODE = '2BP01',
                  HINT = 'Remove those overrides first (rate_limiter.remove_override(), or override() with another plan); SELECT name, key FROM rate_limiter.overrides WHERE plan = ... lists them.';
    END IF;
    -- As for plans: a limit a composite names stays (2BP01), and a
    -- composite's name deletes the composite (docs/composites.md).
    IF EXISTS (SELECT FROM rate_limiter.composites AS c
               WHERE undefine.name = ANY (c.members) AND c.name <> undefine.name) THEN
        RAISE EXCEPTION 'rate limit "%" is a member of a composite', rate_limiter._for_message(name)
            USING ERRCODE = '2BP01',
                  HINT = 'Undefine the composite first, or define_all() it without this member; SELECT name FROM rate_limiter.composites WHERE ... = ANY (members) lists them.';
    END IF;
    DELETE FROM rate_limiter.composites AS c WHERE c.name = undefine.name;
    deleted := deleted OR FOUND;
    DELETE FROM rate_limiter.overrides AS o WHERE o.name = undefine.name;
    DELETE FROM rate_limiter.blocks AS b WHERE b.name = undefine.name;
    RETURN deleted;
END
$undefine$;
