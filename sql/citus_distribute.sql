-- Citus (docs/guarantees.md, "Citus"): rate_limiter.distribute() and
-- undistribute(), run by an administrator on the coordinator
-- (prepare_node() is in citus_prepare_node.sql). The internal functions a
-- node calls on another are in citus_internal_functions.sql.
-- docs/citus-design.md says why each step is as it is.

CREATE FUNCTION rate_limiter.distribute(colocate_with regclass DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $distribute$
DECLARE
    state_table constant regclass := 'rate_limiter.rate_limits';
    definitions_table constant regclass := 'rate_limiter.definitions';
    overrides_table constant regclass := 'rate_limiter.overrides';
    blocks_table constant regclass := 'rate_limiter.blocks';
    composites_table constant regclass := 'rate_limiter.composites';
    leases_table constant regclass := 'rate_limiter.leases';
    state_owner oid;
    state_method "char";
    state_column text;
    definitions_method "char";
    colocated_column record;
    -- dkey's type: text, or bigint, integer or uuid to colocate with a
    -- column of that type.
    bigint_dkey boolean := false;
    integer_dkey boolean := false;
    uuid_dkey boolean := false;
    bad_key text;
    worker record;
    -- Shapes a worker's own rate_limiter.blocks as its rate_limits is
    -- shaped (below): the distribution column's type (%s) and the mark. It
    -- must be empty (a block made there before would be lost).
    blocks_shape constant text := $shape$
        DO $do$ BEGIN
            IF EXISTS (SELECT FROM ONLY rate_limiter.blocks) THEN
                RAISE EXCEPTION 'this node has rows in its own rate_limiter.blocks (blocks made on it before distribute()): unblock them there first';
            END IF;
        END $do$;
        ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey TYPE %s USING NULL;
        DO $do$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint
                           WHERE conrelid = 'rate_limiter.blocks'::pg_catalog.regclass
                             AND conname = 'blocks_distributed') THEN
                ALTER TABLE ONLY rate_limiter.blocks
                    ADD CONSTRAINT blocks_distributed CHECK (false) NOT VALID;
            END IF;
        END $do$$shape$;
BEGIN
    -- Who and where.
    IF pg_catalog.current_setting('citus.version', true) IS NULL
       OR NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'rate_limiter.distribute() needs Citus'
            USING ERRCODE = '55000',
                  HINT = 'Add citus (first) to shared_preload_libraries, CREATE EXTENSION citus and add the worker nodes.';
    END IF;
    SELECT c.relowner INTO state_owner FROM pg_catalog.pg_class AS c WHERE c.oid = state_table;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user)
       AND NOT pg_catalog.pg_has_role(current_user, state_owner, 'MEMBER') THEN
        RAISE EXCEPTION 'only a superuser or the owner of rate_limiter''s tables may distribute them'
            USING ERRCODE = '42501';
    END IF;
    IF (SELECT groupid FROM pg_catalog.pg_dist_local_group) <> 0 THEN
        RAISE EXCEPTION 'rate_limiter.distribute() runs on the coordinator'
            USING ERRCODE = '55000',
                  HINT = 'Connect to the coordinator and call it there.';
    END IF;
    -- run_command_on_workers (below) asks the workers over connections of
    -- its own, which would wait forever for locks this transaction holds
    -- (an undistribute() before it, say).
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'rate_limiter.distribute() must run in a transaction that has written nothing yet'
            USING ERRCODE = '25001',
                  HINT = 'Call it in a transaction of its own (after undistribute(), COMMIT first).';
    END IF;
    IF pg_catalog.current_setting('max_prepared_transactions')::int = 0 THEN
        RAISE EXCEPTION 'max_prepared_transactions is 0 on the coordinator: a transaction that consumed on several nodes could not commit with two-phase commit'
            USING ERRCODE = '55000',
                  HINT = 'Set max_prepared_transactions (to max_connections, say) on every node and restart them.';
    END IF;
    FOR worker IN SELECT * FROM run_command_on_workers('SHOW max_prepared_transactions') LOOP
        IF NOT worker.success OR worker.result = '0' THEN
            RAISE EXCEPTION 'max_prepared_transactions is 0 on worker %:% (or it did not answer: %)',
                worker.nodename, worker.nodeport, worker.result
                USING ERRCODE = '55000',
                      HINT = 'Set max_prepared_transactions (to max_connections, say) on every node and restart them.';
        END IF;
    END LOOP;
    -- Each node's library, loaded at server start, keeps a NULL
    -- distribution argument from Citus's function delegation, which would
    -- crash the server (src/citus/null_distribution_argument.rs): a
    -- session's first statement may be such a call.
    FOR worker IN
        SELECT 'the coordinator' AS node, true AS success,
               pg_catalog.current_setting('shared_preload_libraries') AS result
        UNION ALL
        SELECT pg_catalog.format('worker %s:%s', w.nodename, w.nodeport), w.success, w.result
        FROM run_command_on_workers('SHOW shared_preload_libraries') AS w
    LOOP
        IF NOT worker.success OR NOT EXISTS (
               SELECT FROM pg_catalog.unnest(pg_catalog.string_to_array(worker.result, ',')) AS library
               WHERE pg_catalog.regexp_replace(pg_catalog.btrim(library, ' "'), '^.*/|[.]so$', '', 'g') = 'rate_limiter') THEN
            RAISE EXCEPTION 'rate_limiter is not in shared_preload_libraries on % (it says: %)', worker.node, worker.result
                USING ERRCODE = '55000',
                      HINT = 'Set shared_preload_libraries = ''citus,rate_limiter'' on every node and restart them.';
        END IF;
    END LOOP;

    state_method := (SELECT p.partmethod FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = state_table);
    state_column := (SELECT pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)
                     FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = state_table);
    definitions_method := (SELECT p.partmethod FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = definitions_table);
    <<state>>
    BEGIN
    IF state_method = 'h' AND state_column = 'dkey' AND definitions_method = 'n' THEN
        -- Distributed already. An install distributed before 0.6.0 and
        -- updated since has its overrides and blocks in local tables: the
        -- overrides made a reference table here, the blocks distributed
        -- below, as a fresh distribute() does.
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = blocks_table) THEN
            SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO state_column
            FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = state_table AND a.attname = 'dkey';
            bigint_dkey := state_column = 'bigint';
            integer_dkey := state_column = 'integer';
            uuid_dkey := state_column = 'uuid';
            FOR worker IN SELECT * FROM run_command_on_workers(pg_catalog.format(blocks_shape,
                    CASE WHEN bigint_dkey THEN 'bigint' WHEN integer_dkey THEN 'integer' WHEN uuid_dkey THEN 'uuid' ELSE 'text COLLATE "C"' END)) LOOP
                IF NOT worker.success THEN
                    RAISE EXCEPTION 'could not shape rate_limiter.blocks on worker %:%: %', worker.nodename, worker.nodeport, worker.result
                        USING ERRCODE = '55000',
                              HINT = 'Check that every node runs the same version of rate_limiter, then call distribute() again.';
                END IF;
            END LOOP;
        END IF;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = overrides_table) THEN
            LOCK TABLE rate_limiter.overrides IN EXCLUSIVE MODE;
            PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
            PERFORM create_reference_table(overrides_table);
            PERFORM truncate_local_data_after_distributing_table(overrides_table);
        END IF;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = composites_table) THEN
            LOCK TABLE rate_limiter.composites IN EXCLUSIVE MODE;
            PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
            PERFORM create_reference_table(composites_table);
            PERFORM truncate_local_data_after_distributing_table(composites_table);
        END IF;
        -- (The concurrency limits' slot locks, delegated to the node of
        -- their distribution value: new in 0.6.0.)
        SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO state_column
        FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = state_table AND a.attname = 'dkey';
        FOR worker IN SELECT f::regprocedure AS function
                      FROM pg_catalog.unnest(ARRAY[
                          pg_catalog.format('rate_limiter._slot_lock_on(%s, bigint)', pg_catalog.split_part(state_column, ' ', 1)),
                          pg_catalog.format('rate_limiter._slot_locks_held_on(%s, bigint[])', pg_catalog.split_part(state_column, ' ', 1))]) AS f LOOP
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_object AS o
                           WHERE o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = worker.function
                             AND o.distribution_argument_index IS NOT NULL) THEN
                PERFORM create_distributed_function(worker.function, 'dkey',
                    colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
            END IF;
        END LOOP;
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = leases_table) THEN
            LOCK TABLE rate_limiter.leases IN EXCLUSIVE MODE;
            PERFORM create_reference_table(leases_table);
            PERFORM truncate_local_data_after_distributing_table(leases_table);
        END IF;
        EXIT state;
    END IF;
    IF state_method IS NOT NULL OR definitions_method IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid IN (overrides_table, blocks_table, composites_table, leases_table)) THEN
        RAISE EXCEPTION 'rate_limiter''s tables are distributed, but not by rate_limiter.distribute()'
            USING ERRCODE = '55000',
                  HINT = 'Call SELECT rate_limiter.undistribute(); then SELECT rate_limiter.distribute();';
    END IF;
    IF colocate_with IS NOT NULL THEN
        SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attcollation
        INTO colocated_column
        FROM pg_catalog.pg_dist_partition AS p
        JOIN pg_catalog.pg_attribute AS a
            ON a.attrelid = p.logicalrelid
           AND a.attname = pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)
        WHERE p.logicalrelid = colocate_with AND p.partmethod = 'h';
        IF NOT FOUND AND EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                 WHERE p.logicalrelid = colocate_with AND p.partmethod = 'n' AND p.repmodel = 's') THEN
            -- A single-shard table: a table of a distributed schema
            -- (schema-based sharding), or one distributed without a column.
            RAISE EXCEPTION '% is a single-shard distributed table (schema-based sharding, or distributed without a distribution column): the limiter''s state cannot be colocated with it', colocate_with
                USING ERRCODE = '0A000',
                      HINT = 'Call rate_limiter.distribute() without colocate_with: every tenant''s limit then lives on some node, and a transaction on a tenant''s schema that calls rate_limit may span two nodes (two-phase commit). To keep them on one node, distribute the tenant tables by a tenant column (create_distributed_table) and colocate with one of them.';
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION '% is not a hash-distributed table', colocate_with
                USING ERRCODE = '22023';
        END IF;
        bigint_dkey := colocated_column.type = 'bigint';
        integer_dkey := colocated_column.type = 'integer';
        uuid_dkey := colocated_column.type = 'uuid';
        IF NOT bigint_dkey AND NOT integer_dkey AND NOT uuid_dkey
           AND (colocated_column.type <> 'text' OR colocated_column.attcollation <> 'pg_catalog."C"'::regcollation) THEN
            RAISE EXCEPTION 'rate_limiter can colocate only with a table distributed by a bigint, integer or uuid column or a text column with COLLATE "C"; %''s distribution column is % (collation %)',
                colocate_with, colocated_column.type, colocated_column.attcollation::regcollation
                USING ERRCODE = '0A000',
                      HINT = 'A smallint or numeric tenant column: distribute the table by a bigint or integer one. A table of a distributed schema (schema-based sharding) has a single shard: colocate with a hash-distributed table instead, or call distribute() without colocate_with.';
        END IF;
    END IF;
    -- A worker's own table (not a shard) with rows would be state nobody reads.
    FOR worker IN SELECT * FROM run_command_on_workers('SELECT count(*) FROM ONLY rate_limiter.rate_limits') LOOP
        IF NOT worker.success OR worker.result <> '0' THEN
            RAISE EXCEPTION 'worker %:% has % rows in its own rate_limiter.rate_limits', worker.nodename, worker.nodeport, worker.result
                USING ERRCODE = '55000',
                      HINT = 'Those calls were made on the worker before the tables were distributed; delete them there (DELETE FROM rate_limiter.rate_limits) and call distribute() again.';
        END IF;
    END LOOP;

    -- Citus checks colocation against each worker's own table too (the
    -- extension's, which becomes the distributed table's shell there):
    -- its dkey gets the type the coordinator's gets (the tables are empty,
    -- checked above). And it is marked: a worker that later loses Citus's
    -- metadata for it (stop_metadata_sync_to_node) then fails closed
    -- (55000) instead of writing its own table (src/catalog.rs,
    -- DISTRIBUTED_MARKER; no direct write checks the constraint, and
    -- shards are made from the coordinator's table, which has none).
    -- Over connections of their own, before this transaction locks
    -- anything on the workers.
    FOR worker IN SELECT * FROM run_command_on_workers(pg_catalog.format(
            'ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey TYPE %s USING NULL; %s',
            CASE WHEN bigint_dkey THEN 'bigint' WHEN integer_dkey THEN 'integer' WHEN uuid_dkey THEN 'uuid' ELSE 'text COLLATE "C"' END,
            $mark$DO $do$ BEGIN
                IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint
                               WHERE conrelid = 'rate_limiter.rate_limits'::pg_catalog.regclass
                                 AND conname = 'rate_limits_distributed') THEN
                    ALTER TABLE ONLY rate_limiter.rate_limits
                        ADD CONSTRAINT rate_limits_distributed CHECK (false) NOT VALID;
                END IF;
            END $do$$mark$)) LOOP
        IF NOT worker.success THEN
            RAISE EXCEPTION 'could not change the type of rate_limiter.rate_limits.dkey on worker %:%: %', worker.nodename, worker.nodeport, worker.result
                USING ERRCODE = '55000',
                      HINT = 'Check that every node runs the same version of rate_limiter, then call distribute() again.';
        END IF;
    END LOOP;
    FOR worker IN SELECT * FROM run_command_on_workers(pg_catalog.format(blocks_shape,
            CASE WHEN bigint_dkey THEN 'bigint' WHEN integer_dkey THEN 'integer' WHEN uuid_dkey THEN 'uuid' ELSE 'text COLLATE "C"' END)) LOOP
        IF NOT worker.success THEN
            RAISE EXCEPTION 'could not shape rate_limiter.blocks on worker %:%: %', worker.nodename, worker.nodeport, worker.result
                USING ERRCODE = '55000',
                      HINT = 'Check that every node runs the same version of rate_limiter, then call distribute() again.';
        END IF;
    END LOOP;

    LOCK TABLE rate_limiter.rate_limits, rate_limiter.definitions, rate_limiter.overrides,
        rate_limiter.blocks, rate_limiter.composites, rate_limiter.leases IN EXCLUSIVE MODE;
    -- The distribution column: the key, or name/shard for a global limit;
    -- as a bigint, the key as a decimal integer (the tenant id; the
    -- limiter reads it the same way) or the hash of name/shard; as a uuid,
    -- the key as a uuid or md5(name/shard).
    IF uuid_dkey THEN
        -- What uuid_in takes (the limiter reads keys the same way).
        SELECT key INTO bad_key
        FROM (SELECT key FROM rate_limiter.rate_limits UNION ALL SELECT key FROM rate_limiter.blocks) AS keys
        WHERE key IS NOT NULL
          AND key !~ '^([0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}|\{[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\})$'
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'key % of rate_limiter.rate_limits or rate_limiter.blocks is not a uuid, and % is distributed by a uuid column', pg_catalog.quote_literal(bad_key), colocate_with
                USING ERRCODE = '22P02',
                      HINT = 'Every key of a keyed limit must be a uuid (a tenant id) to colocate with it: rate_reset() or delete the others first.';
        END IF;
        ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey TYPE uuid
            USING CASE WHEN key IS NULL THEN pg_catalog.md5(name || '/' || shard)::uuid
                       ELSE key::uuid END;
    ELSIF bigint_dkey OR integer_dkey THEN
        SELECT key INTO bad_key
        FROM (SELECT key FROM rate_limiter.rate_limits UNION ALL SELECT key FROM rate_limiter.blocks) AS keys
        WHERE key IS NOT NULL AND CASE WHEN key ~ '^[[:space:]]*[+-]?[0-9]+[[:space:]]*$'
                   THEN NOT key::numeric BETWEEN CASE WHEN integer_dkey THEN -2147483648 ELSE -9223372036854775808 END
                                            AND CASE WHEN integer_dkey THEN 2147483647 ELSE 9223372036854775807 END
                   ELSE true END
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'key % of rate_limiter.rate_limits or rate_limiter.blocks is not % and % is distributed by % column', pg_catalog.quote_literal(bad_key),
                CASE WHEN integer_dkey THEN 'an integer,' ELSE 'a bigint,' END, colocate_with,
                CASE WHEN integer_dkey THEN 'an integer' ELSE 'a bigint' END
                USING ERRCODE = '22P02',
                      HINT = 'Every key of a keyed limit must be a decimal integer (a tenant id) to colocate with it: rate_reset() or delete the others first.';
        END IF;
        IF integer_dkey THEN
            ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey TYPE integer
                USING CASE WHEN key IS NULL THEN pg_catalog.hashtext(name || '/' || shard)
                           ELSE key::integer END;
        ELSE
            ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey TYPE bigint
                USING CASE WHEN key IS NULL THEN pg_catalog.hashtextextended(name || '/' || shard, 0)
                           ELSE key::bigint END;
        END IF;
    ELSE
        UPDATE rate_limiter.rate_limits SET dkey = coalesce(key, name || '/' || shard);
    END IF;
    ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey SET NOT NULL;
    -- Citus needs the distribution column in every unique constraint; dkey
    -- is a function of (name, key, shard), so uniqueness is unchanged.
    ALTER TABLE rate_limiter.rate_limits
        DROP CONSTRAINT rate_limits_name_key_shard_key,
        ADD CONSTRAINT rate_limits_name_key_shard_dkey_key UNIQUE NULLS NOT DISTINCT (name, key, shard, dkey)
            WITH (fillfactor = 100);
    -- Shard moves need a replica identity; key is nullable, so the full row.
    ALTER TABLE rate_limiter.rate_limits REPLICA IDENTITY FULL;

    -- Their trigger tells each node's backends that a definition or an
    -- override changed.
    PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    PERFORM create_reference_table(definitions_table);
    PERFORM truncate_local_data_after_distributing_table(definitions_table);
    PERFORM create_reference_table(overrides_table);
    PERFORM truncate_local_data_after_distributing_table(overrides_table);
    PERFORM create_reference_table(composites_table);
    PERFORM truncate_local_data_after_distributing_table(composites_table);
    -- The timed leases of concurrency limits: found by id from any node
    -- (release(), renew()); the slot a lease holds is a state row.
    PERFORM create_reference_table(leases_table);
    PERFORM truncate_local_data_after_distributing_table(leases_table);
    PERFORM create_distributed_table(state_table, 'dkey',
        colocate_with => coalesce(colocate_with::text, 'none'));
    PERFORM truncate_local_data_after_distributing_table(state_table);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey
             THEN 'rate_limiter._rate_limit_at(bigint, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean)'
             WHEN integer_dkey
             THEN 'rate_limiter._rate_limit_at(integer, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean)'
             WHEN uuid_dkey
             THEN 'rate_limiter._rate_limit_at(uuid, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean)'
             ELSE 'rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean)' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey
             THEN 'rate_limiter._rate_state_at(bigint, text, text, int2)'
             WHEN integer_dkey
             THEN 'rate_limiter._rate_state_at(integer, text, text, int2)'
             WHEN uuid_dkey
             THEN 'rate_limiter._rate_state_at(uuid, text, text, int2)'
             ELSE 'rate_limiter._rate_state_at(text, text, text, int2)' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey
             THEN 'rate_limiter._rate_credit_at(bigint, text, text, float8, rate_limiter.config, timestamptz)'
             WHEN integer_dkey
             THEN 'rate_limiter._rate_credit_at(integer, text, text, float8, rate_limiter.config, timestamptz)'
             WHEN uuid_dkey
             THEN 'rate_limiter._rate_credit_at(uuid, text, text, float8, rate_limiter.config, timestamptz)'
             ELSE 'rate_limiter._rate_credit_at(text, text, text, float8, rate_limiter.config, timestamptz)' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey
             THEN 'rate_limiter._rate_limit_all_at(bigint, rate_limiter.request[], boolean, timestamptz)'
             WHEN integer_dkey
             THEN 'rate_limiter._rate_limit_all_at(integer, rate_limiter.request[], boolean, timestamptz)'
             WHEN uuid_dkey
             THEN 'rate_limiter._rate_limit_all_at(uuid, rate_limiter.request[], boolean, timestamptz)'
             ELSE 'rate_limiter._rate_limit_all_at(text, rate_limiter.request[], boolean, timestamptz)' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey THEN 'rate_limiter._slot_lock_on(bigint, bigint)'
             WHEN integer_dkey THEN 'rate_limiter._slot_lock_on(integer, bigint)'
             WHEN uuid_dkey THEN 'rate_limiter._slot_lock_on(uuid, bigint)'
             ELSE 'rate_limiter._slot_lock_on(text, bigint)' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey THEN 'rate_limiter._slot_locks_held_on(bigint, bigint[])'
             WHEN integer_dkey THEN 'rate_limiter._slot_locks_held_on(integer, bigint[])'
             WHEN uuid_dkey THEN 'rate_limiter._slot_locks_held_on(uuid, bigint[])'
             ELSE 'rate_limiter._slot_locks_held_on(text, bigint[])' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    PERFORM create_distributed_function(
        CASE WHEN bigint_dkey
             THEN 'rate_limiter._prune_at(bigint, interval, timestamptz)'
             WHEN integer_dkey
             THEN 'rate_limiter._prune_at(integer, interval, timestamptz)'
             WHEN uuid_dkey
             THEN 'rate_limiter._prune_at(uuid, interval, timestamptz)'
             ELSE 'rate_limiter._prune_at(text, interval, timestamptz)' END::regprocedure,
        'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    END state;

    -- Blocks (docs/blocks.md, "Citus"): distributed by dkey as the state
    -- is, and colocated with it, so that a key's block lives beside its
    -- state rows (a global limit's beside its shard 0). The workers' own
    -- tables were shaped above; the keys checked with the state's.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = blocks_table) THEN
        LOCK TABLE rate_limiter.blocks IN EXCLUSIVE MODE;
        IF uuid_dkey THEN
            ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey TYPE uuid
                USING CASE WHEN key IS NULL THEN pg_catalog.md5(name || '/0')::uuid ELSE key::uuid END;
        ELSIF integer_dkey THEN
            ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey TYPE integer
                USING CASE WHEN key IS NULL THEN pg_catalog.hashtext(name || '/0') ELSE key::integer END;
        ELSIF bigint_dkey THEN
            ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey TYPE bigint
                USING CASE WHEN key IS NULL THEN pg_catalog.hashtextextended(name || '/0', 0) ELSE key::bigint END;
        ELSE
            UPDATE rate_limiter.blocks SET dkey = coalesce(key, name || '/0');
        END IF;
        ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey SET NOT NULL;
        -- (dkey is a function of (name, key): uniqueness is unchanged.)
        ALTER TABLE rate_limiter.blocks
            DROP CONSTRAINT blocks_name_key,
            ADD CONSTRAINT blocks_name_key_dkey_key UNIQUE NULLS NOT DISTINCT (name, key, dkey);
        ALTER TABLE rate_limiter.blocks REPLICA IDENTITY FULL;
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
        PERFORM create_distributed_table(blocks_table, 'dkey', colocate_with => 'rate_limiter.rate_limits');
        PERFORM truncate_local_data_after_distributing_table(blocks_table);
        PERFORM create_distributed_function(
            CASE WHEN uuid_dkey THEN 'rate_limiter._rate_block_at(uuid, text, text)'
                 WHEN integer_dkey THEN 'rate_limiter._rate_block_at(integer, text, text)'
                 WHEN bigint_dkey THEN 'rate_limiter._rate_block_at(bigint, text, text)'
                 ELSE 'rate_limiter._rate_block_at(text, text, text)' END::regprocedure,
            'dkey', colocate_with => 'rate_limiter.rate_limits', force_delegation => true);
    END IF;
END
$distribute$;

COMMENT ON FUNCTION rate_limiter.distribute(regclass) IS
'Citus: makes rate_limiter.rate_limits a distributed table (by the column dkey: the key, or name/shard for a global limit), rate_limiter.blocks one colocated with it (a key''s block beside its state), and rate_limiter.definitions, rate_limiter.overrides, rate_limiter.composites and rate_limiter.leases reference tables, keeping every row. '
'colocate_with: a table distributed by a bigint, integer or uuid column or a text COLLATE "C" column, whose rows for value K live beside the state of key K (with bigint or integer, every key must be a decimal integer in its range; with uuid, a uuid). Run on the coordinator; idempotent. '
'Errors: 25001 in a transaction that has written already; 55000 without Citus, on a worker, max_prepared_transactions = 0 on a node, rate_limiter not in shared_preload_libraries on a node, a worker with rows in its own rate_limits or blocks table, tables distributed otherwise; 42501 neither superuser nor owner; '
'22023 colocate_with not hash-distributed; 0A000 its distribution column is neither bigint, integer, uuid nor text COLLATE "C", or it has a single shard (schema-based sharding); 22P02 with bigint, integer or uuid, a stored key that is not a decimal integer in range or a uuid.';

CREATE FUNCTION rate_limiter.undistribute()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $undistribute$
DECLARE
    state_table constant regclass := 'rate_limiter.rate_limits';
    definitions_table constant regclass := 'rate_limiter.definitions';
    overrides_table constant regclass := 'rate_limiter.overrides';
    blocks_table constant regclass := 'rate_limiter.blocks';
    composites_table constant regclass := 'rate_limiter.composites';
    leases_table constant regclass := 'rate_limiter.leases';
    state_owner oid;
    distributed_table regclass;
    citus_trigger record;
    worker record;
    -- Removes distribute()'s mark from a worker's own table.
    unmark constant text := $unmark$
        SET citus.enable_ddl_propagation TO off;
        ALTER TABLE ONLY rate_limiter.rate_limits DROP CONSTRAINT IF EXISTS rate_limits_distributed;
        ALTER TABLE ONLY rate_limiter.blocks DROP CONSTRAINT IF EXISTS blocks_distributed$unmark$;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN; -- no Citus: nothing is distributed
    END IF;
    SELECT c.relowner INTO state_owner FROM pg_catalog.pg_class AS c WHERE c.oid = state_table;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user)
       AND NOT pg_catalog.pg_has_role(current_user, state_owner, 'MEMBER') THEN
        RAISE EXCEPTION 'only a superuser or the owner of rate_limiter''s tables may undistribute them'
            USING ERRCODE = '42501';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition
                   WHERE logicalrelid IN (state_table, definitions_table, overrides_table, blocks_table, composites_table, leases_table)) THEN
        -- Not distributed: nothing to do but to clear the marks a
        -- distribute() that failed may have left on the workers' tables.
        IF (SELECT groupid FROM pg_catalog.pg_dist_local_group) = 0 THEN
            PERFORM run_command_on_workers(unmark);
        END IF;
        RETURN;
    END IF;
    IF (SELECT groupid FROM pg_catalog.pg_dist_local_group) <> 0 THEN
        RAISE EXCEPTION 'rate_limiter.undistribute() runs on the coordinator'
            USING ERRCODE = '55000',
                  HINT = 'Connect to the coordinator and call it there.';
    END IF;
    -- The workers' own tables are theirs again (see distribute()): first,
    -- over connections of their own, before this transaction locks
    -- anything there.
    FOR worker IN SELECT * FROM run_command_on_workers(unmark) LOOP
        IF NOT worker.success THEN
            RAISE EXCEPTION 'could not unmark rate_limiter.rate_limits on worker %:%: %', worker.nodename, worker.nodeport, worker.result
                USING ERRCODE = '55000',
                      HINT = 'Check that every node runs the same version of rate_limiter, then call undistribute() again.';
        END IF;
    END LOOP;
    LOCK TABLE rate_limiter.rate_limits, rate_limiter.definitions, rate_limiter.overrides,
        rate_limiter.blocks, rate_limiter.composites, rate_limiter.leases IN EXCLUSIVE MODE;
    CREATE TEMPORARY TABLE rate_limiter_state ON COMMIT DROP AS
        SELECT name, key, shard, value, ts, regime, prev FROM rate_limiter.rate_limits;
    CREATE TEMPORARY TABLE rate_limiter_definitions ON COMMIT DROP AS
        SELECT * FROM rate_limiter.definitions;
    CREATE TEMPORARY TABLE rate_limiter_overrides ON COMMIT DROP AS
        SELECT * FROM rate_limiter.overrides;
    CREATE TEMPORARY TABLE rate_limiter_composites ON COMMIT DROP AS
        SELECT * FROM rate_limiter.composites;
    CREATE TEMPORARY TABLE rate_limiter_leases ON COMMIT DROP AS
        SELECT * FROM rate_limiter.leases;
    CREATE TEMPORARY TABLE rate_limiter_blocks ON COMMIT DROP AS
        SELECT name, key, until, strikes, reason, forget_at FROM rate_limiter.blocks;
    -- Citus's undistribute_table refuses a table an extension owns (and
    -- would give it a new OID); what its DROP TABLE trigger calls removes
    -- the shards and the metadata and keeps the table.
    FOR distributed_table IN
        SELECT logicalrelid FROM pg_catalog.pg_dist_partition
        WHERE logicalrelid IN (state_table, definitions_table, overrides_table, blocks_table, composites_table, leases_table)
    LOOP
        PERFORM master_remove_distributed_table_metadata_from_workers(distributed_table, 'rate_limiter',
            (SELECT relname FROM pg_catalog.pg_class WHERE oid = distributed_table));
        PERFORM citus_drop_all_shards(distributed_table, 'rate_limiter',
            (SELECT relname FROM pg_catalog.pg_class WHERE oid = distributed_table), false);
        PERFORM master_remove_partition_metadata(distributed_table, 'rate_limiter',
            (SELECT relname FROM pg_catalog.pg_class WHERE oid = distributed_table));
    END LOOP;
    -- Citus's TRUNCATE trigger on each (truncate_trigger_<oid>).
    FOR citus_trigger IN
        SELECT t.tgname, t.tgrelid::regclass AS relation FROM pg_catalog.pg_trigger AS t
        WHERE t.tgrelid IN (state_table, definitions_table, overrides_table, blocks_table, composites_table, leases_table)
          AND t.tgfoid = 'pg_catalog.citus_truncate_trigger()'::regprocedure
    LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', citus_trigger.tgname, citus_trigger.relation);
    END LOOP;
    DELETE FROM rate_limiter.rate_limits;
    DELETE FROM rate_limiter.definitions;
    DELETE FROM rate_limiter.overrides;
    DELETE FROM rate_limiter.blocks;
    DELETE FROM rate_limiter.composites;
    DELETE FROM rate_limiter.leases;
    IF EXISTS (SELECT FROM pg_catalog.pg_constraint
               WHERE conrelid = state_table AND conname = 'rate_limits_name_key_shard_dkey_key') THEN
        ALTER TABLE rate_limiter.rate_limits
            DROP CONSTRAINT rate_limits_name_key_shard_dkey_key,
            ADD CONSTRAINT rate_limits_name_key_shard_key UNIQUE NULLS NOT DISTINCT (name, key, shard)
                WITH (fillfactor = 100);
    END IF;
    ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey DROP NOT NULL, REPLICA IDENTITY DEFAULT;
    IF (SELECT a.atttypid FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = state_table AND a.attname = 'dkey') <> 'pg_catalog.text'::regtype THEN
        -- (The table is empty here.)
        ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey TYPE text COLLATE "C" USING NULL;
    END IF;
    INSERT INTO rate_limiter.definitions SELECT * FROM rate_limiter_definitions;
    INSERT INTO rate_limiter.overrides SELECT * FROM rate_limiter_overrides;
    INSERT INTO rate_limiter.composites SELECT * FROM rate_limiter_composites;
    INSERT INTO rate_limiter.leases SELECT * FROM rate_limiter_leases;
    IF EXISTS (SELECT FROM pg_catalog.pg_constraint
               WHERE conrelid = blocks_table AND conname = 'blocks_name_key_dkey_key') THEN
        ALTER TABLE rate_limiter.blocks
            DROP CONSTRAINT blocks_name_key_dkey_key,
            ADD CONSTRAINT blocks_name_key UNIQUE NULLS NOT DISTINCT (name, key);
    END IF;
    ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey DROP NOT NULL, REPLICA IDENTITY DEFAULT;
    IF (SELECT a.atttypid FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = blocks_table AND a.attname = 'dkey') <> 'pg_catalog.text'::regtype THEN
        ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey TYPE text COLLATE "C" USING NULL;
    END IF;
    INSERT INTO rate_limiter.blocks (name, key, until, strikes, reason, forget_at)
        SELECT name, key, until, strikes, reason, forget_at FROM rate_limiter_blocks;
    INSERT INTO rate_limiter.rate_limits (name, key, shard, value, ts, regime, prev)
        SELECT name, key, shard, value, ts, regime, prev FROM rate_limiter_state;
END
$undistribute$;

COMMENT ON FUNCTION rate_limiter.undistribute() IS
'Citus: makes rate_limiter.rate_limits, rate_limiter.blocks, rate_limiter.definitions, rate_limiter.overrides, rate_limiter.composites and rate_limiter.leases local tables of the coordinator again (however they were distributed), keeping every row. '
'Run on the coordinator; idempotent, and nothing to do without Citus. Errors: 42501 neither superuser nor owner; 55000 on a worker.';
