-- Citus (docs/guarantees.md, "Citus"): rate_limiter.prepare_node(), run by
-- an administrator on the coordinator before citus_add_node() adds a node
-- to a cluster whose limits distribute() (citus_distribute.sql)
-- distributed. docs/citus-design.md says why each step is as it is.

CREATE FUNCTION rate_limiter.prepare_node(nodename text, nodeport integer DEFAULT 5432)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $prepare_node$
DECLARE
    state_table constant regclass := 'rate_limiter.rate_limits';
    state_owner oid;
    dkey_type text;
    version text;
    answer record;
    step record;
BEGIN
    IF nodename IS NULL OR nodeport IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN nodename IS NULL THEN 'nodename' ELSE 'nodeport' END
            USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.current_setting('citus.version', true) IS NULL
       OR NOT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'rate_limiter.prepare_node() needs Citus'
            USING ERRCODE = '55000',
                  HINT = 'Add citus (first) to shared_preload_libraries and CREATE EXTENSION citus.';
    END IF;
    SELECT c.relowner INTO state_owner FROM pg_catalog.pg_class AS c WHERE c.oid = state_table;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user)
       AND NOT pg_catalog.pg_has_role(current_user, state_owner, 'MEMBER') THEN
        RAISE EXCEPTION 'only a superuser or the owner of rate_limiter''s tables may prepare a node'
            USING ERRCODE = '42501';
    END IF;
    IF (SELECT groupid FROM pg_catalog.pg_dist_local_group) <> 0 THEN
        RAISE EXCEPTION 'rate_limiter.prepare_node() runs on the coordinator'
            USING ERRCODE = '55000',
                  HINT = 'Connect to the coordinator and call it there.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = state_table) THEN
        RETURN; -- not distributed: distribute() prepares the nodes there are when it runs
    END IF;
    SELECT CASE WHEN a.atttypid = 'pg_catalog.text'::pg_catalog.regtype THEN 'text COLLATE "C"'
                ELSE pg_catalog.format_type(a.atttypid, a.atttypmod) END
    INTO dkey_type
    FROM pg_catalog.pg_attribute AS a WHERE a.attrelid = state_table AND a.attname = 'dkey';
    SELECT e.extversion INTO version FROM pg_catalog.pg_extension AS e WHERE e.extname = 'rate_limiter';
    -- On the node, over a connection of its own (Citus's
    -- master_run_on_worker: the node need not be in the cluster yet), in
    -- order; each step must succeed.
    FOR step IN
        SELECT * FROM (VALUES
            (1, 'SHOW shared_preload_libraries', 'reading its shared_preload_libraries'),
            (2, 'SHOW max_prepared_transactions', 'reading its max_prepared_transactions'),
            (3, pg_catalog.format('CREATE EXTENSION IF NOT EXISTS rate_limiter VERSION %L', version),
                pg_catalog.format('creating rate_limiter %s (the library must be installed on the node)', version)),
            (4, 'SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = ''rate_limiter''',
                'reading the version of rate_limiter'),
            (5, 'SELECT (SELECT count(*) FROM ONLY rate_limiter.rate_limits) + (SELECT count(*) FROM ONLY rate_limiter.blocks)',
                'counting the rows of its own rate_limiter.rate_limits and rate_limiter.blocks'),
            (6, pg_catalog.format(
                    'ALTER TABLE rate_limiter.rate_limits ALTER COLUMN dkey TYPE %s USING NULL; %s', dkey_type,
                    $mark$DO $do$ BEGIN
                        IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint
                                       WHERE conrelid = 'rate_limiter.rate_limits'::pg_catalog.regclass
                                         AND conname = 'rate_limits_distributed') THEN
                            ALTER TABLE ONLY rate_limiter.rate_limits
                                ADD CONSTRAINT rate_limits_distributed CHECK (false) NOT VALID;
                        END IF;
                    END $do$$mark$),
                'shaping and marking its own rate_limiter.rate_limits as distribute() does on a worker'),
            (7, pg_catalog.format(
                    'ALTER TABLE rate_limiter.blocks ALTER COLUMN dkey TYPE %s USING NULL; %s', dkey_type,
                    $mark$DO $do$ BEGIN
                        IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint
                                       WHERE conrelid = 'rate_limiter.blocks'::pg_catalog.regclass
                                         AND conname = 'blocks_distributed') THEN
                            ALTER TABLE ONLY rate_limiter.blocks
                                ADD CONSTRAINT blocks_distributed CHECK (false) NOT VALID;
                        END IF;
                    END $do$$mark$),
                'shaping and marking its own rate_limiter.blocks as distribute() does on a worker')
        ) AS steps(number, command, what)
        ORDER BY number
    LOOP
        SELECT w.success, w.result INTO answer
        FROM master_run_on_worker(ARRAY[nodename], ARRAY[nodeport], ARRAY[step.command], false) AS w;
        IF NOT answer.success THEN
            RAISE EXCEPTION 'rate_limiter.prepare_node(): % on %:% failed: %', step.what, nodename, nodeport, answer.result
                USING ERRCODE = '55000',
                      HINT = 'The node must accept connections from this one, have citus and rate_limiter installed, and not be in the cluster yet.';
        END IF;
        IF step.number = 1 AND NOT EXISTS (
               SELECT FROM pg_catalog.unnest(pg_catalog.string_to_array(answer.result, ',')) AS library
               WHERE pg_catalog.regexp_replace(pg_catalog.btrim(library, ' "'), '^.*/|[.]so$', '', 'g') = 'rate_limiter') THEN
            RAISE EXCEPTION 'rate_limiter is not in shared_preload_libraries on %:% (it says: %)', nodename, nodeport, answer.result
                USING ERRCODE = '55000',
                      HINT = 'Set shared_preload_libraries = ''citus,rate_limiter'' on the node and restart it.';
        ELSIF step.number = 2 AND answer.result = '0' THEN
            RAISE EXCEPTION 'max_prepared_transactions is 0 on %:%: a transaction that consumed on several nodes could not commit with two-phase commit', nodename, nodeport
                USING ERRCODE = '55000',
                      HINT = 'Set max_prepared_transactions (to max_connections, say) on the node and restart it.';
        ELSIF step.number = 4 AND answer.result IS DISTINCT FROM version THEN
            RAISE EXCEPTION 'rate_limiter is at version % on %:%, and at % here', answer.result, nodename, nodeport, version
                USING ERRCODE = '55000',
                      HINT = 'Install the same version of rate_limiter on every node (ALTER EXTENSION rate_limiter UPDATE there).';
        ELSIF step.number = 5 AND answer.result <> '0' THEN
            RAISE EXCEPTION 'the node %:% has % rows in its own rate_limiter.rate_limits and rate_limiter.blocks', nodename, nodeport, answer.result
                USING ERRCODE = '55000',
                      HINT = 'Delete them there (DELETE FROM rate_limiter.rate_limits; DELETE FROM rate_limiter.blocks), then prepare the node again.';
        END IF;
    END LOOP;
END
$prepare_node$;

COMMENT ON FUNCTION rate_limiter.prepare_node(text, integer) IS
'Citus: prepares a node before citus_add_node() adds it to a cluster whose limits distribute() distributed: checks that it preloads rate_limiter and allows prepared transactions, '
'creates the extension there at this version, and gives its own rate_limiter.rate_limits and rate_limiter.blocks the distribution column''s type (bigint, integer or uuid when colocated with such a table) and the mark of a worker''s table. '
'Run on the coordinator, before SELECT citus_add_node(nodename, nodeport); nothing to do before distribute(). '
'Errors: 22004 NULL argument; 42501 neither superuser nor owner; 55000 without Citus, on a worker, or when a check fails on the node (the message says which).';
