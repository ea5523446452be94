-- rate_limiter 0.5.0 -> 0.6.0 (ALTER EXTENSION rate_limiter UPDATE).
--
-- Statistics that no caller can empty: the view
-- rate_limiter.stats_info (names evicted, decisions not counted), names
-- shown distinct and readable in every encoding, stats_reset() taking a
-- name as the view shows it. Per-key overrides and plans: the table
-- rate_limiter.overrides, the state table's column regime, override()
-- and remove_override(). Blocks. Limit shapes: the kind 'sliding window'
-- and the state table's column prev. Concurrency limits: the kind
-- 'concurrency', the table rate_limiter.leases, concurrency(), acquire(),
-- release() and renew(). No existing signature changes; every
-- definition and state row keeps its meaning; the new objects are
-- granted to nobody but the installing role, as after CREATE EXTENSION.

COMMENT ON VIEW rate_limiter.stats IS
'One row per limit name of this database that was called since the server started: counters summed over every backend since stats_reset. '
'calls = admitted + refused + shadow_refused; reserved = admitted with retry_after > 0; tokens = counts admitted; credited = tokens given back; '
'near_limit = admitted calls that left less than 20% of capacity; contended = sharded calls that passed over or waited for a locked shard. '
'A rate_limit_all refused as a whole counts only its refused requests. '
'name is distinct per row and always converts to UTF-8: in a database that is not UTF8, characters without a UTF-8 equivalent show as \xNN and \ as \\; '
'a name longer than 256 bytes shows cut, followed by ...[<length> bytes #<hash>]. '
'Not transactional (a decision is counted when made). Needs shared_preload_libraries = ''rate_limiter'' (55000 otherwise); '
'at most rate_limiter.stats_max names of all databases (see rate_limiter.stats_info).';

CREATE FUNCTION rate_limiter._stats_info()
RETURNS TABLE (evicted bigint, uncounted bigint, since timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'stats_info_wrapper';

COMMENT ON FUNCTION rate_limiter._stats_info() IS
'The row of the view rate_limiter.stats_info. Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

CREATE VIEW rate_limiter.stats_info AS SELECT * FROM rate_limiter._stats_info();

COMMENT ON VIEW rate_limiter.stats_info IS
'One row about rate_limiter.stats for the whole server (as pg_stat_statements_info): evicted = names whose counters were evicted to make room '
'for another name (past rate_limiter.stats_max: names without a definition first, least used first, and no database beyond its share of the room); '
'uncounted = consuming decisions not counted because their name found no room (a name without a definition never evicts a defined one); '
'since = when these started (server start). Needs shared_preload_libraries = ''rate_limiter'' (55000 otherwise).';

COMMENT ON FUNCTION rate_limiter.stats_reset(text) IS
'Zeroes the counters of one row of rate_limiter.stats and sets its stats_reset to now: the row whose name is name as the view shows it, '
'else the row of the limit named name (NULL: every row of this database). '
'Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

-- The new objects: nobody but their owner holds a privilege on them,
-- whatever ALTER DEFAULT PRIVILEGES handed out when they were created.
DO $revoke$
DECLARE
    grantee_name name;
BEGIN
    REVOKE ALL ON FUNCTION rate_limiter._stats_info() FROM PUBLIC;
    REVOKE ALL ON rate_limiter.stats_info FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN ('rate_limiter._stats_info()'::pg_catalog.regprocedure)
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c
            WHERE c.oid IN ('rate_limiter.stats_info'::pg_catalog.regclass)
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter._stats_info() FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.stats_info FROM %I', grantee_name);
    END LOOP;
END
$revoke$;

GRANT EXECUTE ON FUNCTION rate_limiter._stats_info() TO @extowner@ WITH GRANT OPTION;
GRANT SELECT ON rate_limiter.stats_info TO @extowner@ WITH GRANT OPTION;

-- Per-key overrides and plans (docs/overrides.md): the state table's
-- column regime (NULL in every existing row: written under the limit's
-- definition, which is what they are), the table rate_limiter.overrides,
-- override() and remove_override(), the overrides' invalidation trigger.
-- undefine() also deletes a limit's overrides; prune() also deletes
-- expired overrides. (IF NOT EXISTS: on an install Citus distributes,
-- Citus also sends this ALTER TABLE to every worker, whose own update
-- adds the column too.)
ALTER TABLE rate_limiter.rate_limits ADD COLUMN IF NOT EXISTS regime int8;

-- Per-key overrides (docs/overrides.md): the configuration of one key of a
-- defined limit, given inline (the config's columns) or by naming another
-- definition, its plan; until expires_at (NULL: no end). enforce NULL
-- takes the plan's (for a plan) or the limit's (for a config) setting.
-- Written by rate_limiter.override() and rate_limiter.remove_override();
-- read by every call of a name that has overrides (src/overrides.rs).
CREATE TABLE rate_limiter.overrides (
    name         text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    plan         text,
    kind         rate_limiter.kind,
    rate         float8,
    period       interval,
    capacity     float8,
    max_reserved float8,
    shards       int4,
    start        timestamptz,
    enforce      boolean,
    expires_at   timestamptz,
    block_for    interval,
    max_block    interval,
    forget_after interval,
    time_zone    text,
    CONSTRAINT overrides_pkey PRIMARY KEY (name, key),
    CONSTRAINT overrides_config_or_plan CHECK ((plan IS NULL) = (kind IS NOT NULL))
);
-- A call probes this index (src/overrides.rs): a hash probe costs the same
-- however many overrides there are.
CREATE INDEX overrides_key ON rate_limiter.overrides USING hash (key);
COMMENT ON TABLE rate_limiter.overrides IS
    'Per-key overrides of named limits: a config (kind ... start) or a plan (another definition) for (name, key) until expires_at; write it with rate_limiter.override() and rate_limiter.remove_override()';

SELECT pg_catalog.pg_extension_config_dump('rate_limiter.overrides', '');

-- Per-key overrides and plans (docs/overrides.md) -------------------------

CREATE FUNCTION rate_limiter.override(
    name       text,
    key        text,
    config     rate_limiter.config DEFAULT NULL,
    plan       text                DEFAULT NULL,
    expires_at timestamptz         DEFAULT NULL,
    enforce    boolean             DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'override_key_wrapper';

COMMENT ON FUNCTION rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean) IS
'Gives one key of a defined limit its own configuration: config, or plan (another plain definition, whose config and enforce apply; redefining it changes every key on it), '
'until expires_at (NULL = no end; from expires_at on the definition applies again). Replaces the key''s previous override. enforce NULL = the plan''s, or the limit''s for a config. '
'Precedence: an inline config argument of a call > the key''s unexpired override > the definition. '
'The key''s state continues when kind, period and shards stay the same (capped at the new capacity); otherwise the key starts full. '
'Only roles that may call define. Errors: 22004 NULL name/key; 42704 undefined name or plan; 22023 both or neither of config and plan, a plan naming the limit itself, an invalid config; 42501 a role that may not call define.';

CREATE FUNCTION rate_limiter.remove_override(name text, key text)
RETURNS boolean
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'remove_override_wrapper';

COMMENT ON FUNCTION rate_limiter.remove_override(text, text) IS
'Deletes the override of (name, key); true if there was one. The definition applies to the key again (its state continues when kind, period and shards are the same). '
'Only roles that may call define. Errors: 22004 NULL name/key; 42704 undefined name; 42501 a role that may not call define.';

CREATE TRIGGER overrides_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.overrides
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();

COMMENT ON FUNCTION rate_limiter.undefine(text) IS
'Deletes the named limit and its overrides; true if it existed. Its state rows are left alone. Errors: 22004 NULL name; 2BP01 the limit is the plan of an override (remove those overrides first).';

COMMENT ON FUNCTION rate_limiter.prune(interval) IS
'Deletes state rows that change no later answer: rows of a defined limit that are full again and that a missing row would answer for exactly (under the key''s override, if any), rows written under a configuration the key no longer has; '
'and expired overrides and ended blocks whose strikes are forgotten (a NOTICE says how many of each); '
'and, when older_than is given, rows of names without a definition (inline configs) whose ts is older than now - older_than. '
'Rows another transaction holds are skipped. Returns how many rows were deleted (state rows, overrides and blocks). Schedule it with pg_cron. '
'Errors: 22023 negative older_than; 25006 in a read-only transaction.';

-- The overrides' objects: nobody but their owner holds a privilege on
-- them, whatever ALTER DEFAULT PRIVILEGES handed out.
DO $revoke$
DECLARE
    grantee_name name;
BEGIN
    REVOKE ALL ON FUNCTION rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean) FROM PUBLIC;
    REVOKE ALL ON FUNCTION rate_limiter.remove_override(text, text) FROM PUBLIC;
    REVOKE ALL ON rate_limiter.overrides FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN ('rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean)'::pg_catalog.regprocedure,
                            'rate_limiter.remove_override(text, text)'::pg_catalog.regprocedure)
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c
            WHERE c.oid IN ('rate_limiter.overrides'::pg_catalog.regclass)
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.remove_override(text, text) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.overrides FROM %I', grantee_name);
    END LOOP;
END
$revoke$;

GRANT EXECUTE ON FUNCTION rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION rate_limiter.remove_override(text, text) TO @extowner@ WITH GRANT OPTION;

-- Blocks (docs/blocks.md): automatic blocks in the config type (three
-- attributes at its end: a config built before reads them as NULL, no
-- blocks) and in the definitions (three columns, NULL in every existing
-- row; IF NOT EXISTS: on an install Citus distributes, Citus also sends
-- this ALTER TABLE to every worker, whose own update adds them too),
-- with_block(); the table rate_limiter.blocks, block(),
-- unblock(), blocked(), the blocks' invalidation trigger; undefine() also
-- deletes a limit's blocks, prune() also deletes ended blocks; the
-- statistics' new column blocked (last in _stats(), so that the library
-- reads an older row type until this update; the view is made again with
-- it, and every privilege on the old view and function is given again on
-- the new ones, granted by the role running the update).
-- Blocks (docs/blocks.md): a key of a defined limit refused until `until`,
-- whatever its tokens; key NULL is the global limit (NULLS NOT DISTINCT
-- makes it one row). strikes counts the blocks the key has had since they
-- were last forgotten, at forget_at (NULL: when the block ends); reason is
-- what block() was told, for the refusal's DETAIL. Written by
-- rate_limiter.block() and rate_limiter.unblock(), and by the call that
-- uses up a limit with automatic blocks; read by every call of a name that
-- has blocks or automatic blocks (src/blocks.rs) through the unique index.
CREATE TABLE rate_limiter.blocks (
    name      text COLLATE "C" NOT NULL,
    key       text COLLATE "C",
    until     timestamptz NOT NULL,
    strikes   int4 NOT NULL DEFAULT 0,
    reason    text,
    forget_at timestamptz,
    -- Citus's distribution column, as the state table's (docs/blocks.md,
    -- "Citus"): NULL until rate_limiter.distribute(), then the key's (a
    -- global limit's: its shard 0's), so that a block lives beside the
    -- key's state.
    dkey      text COLLATE "C",
    CONSTRAINT blocks_name_key UNIQUE NULLS NOT DISTINCT (name, key)
);
COMMENT ON TABLE rate_limiter.blocks IS
    'Blocked keys of named limits: refused until until; write it with rate_limiter.block() and rate_limiter.unblock()';

ALTER TYPE rate_limiter.config
    ADD ATTRIBUTE block_for interval,
    ADD ATTRIBUTE max_block interval,
    ADD ATTRIBUTE forget_after interval;
COMMENT ON TYPE rate_limiter.config IS
    'Rate-limit configuration: kind, rate (tokens per period), period, capacity (NULL = rate), max_reserved (NULL = unlimited), shards, start (fixed window anchor, NULL = per-key phase), block_for, max_block, forget_after (automatic blocks, NULL = none)';
-- (One column per statement: Citus sends each to the workers as one
-- command.)
ALTER TABLE rate_limiter.definitions ADD COLUMN IF NOT EXISTS block_for interval;
ALTER TABLE rate_limiter.definitions ADD COLUMN IF NOT EXISTS max_block interval;
ALTER TABLE rate_limiter.definitions ADD COLUMN IF NOT EXISTS forget_after interval;

CREATE FUNCTION rate_limiter.with_block(
    config       rate_limiter.config,
    block_for    interval,
    max_block    interval DEFAULT NULL,
    forget_after interval DEFAULT '1 day')
RETURNS rate_limiter.config
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'with_block_wrapper';

COMMENT ON FUNCTION rate_limiter.with_block(rate_limiter.config, interval, interval, interval) IS
'config with automatic blocks: the admitted call that uses the limit up (after it a call of count 1 would be refused; for a sharded limit the estimate for the whole limit) '
'blocks its key for block_for * 2^strikes, at most max_block (NULL = no bound), and adds a strike, in the caller''s transaction; '
'strikes are forgotten forget_after after the last block ends. Durations count a month as 30 days. '
'Errors: 22004 NULL config/block_for/forget_after; 22023 an invalid config, block_for not greater than zero, max_block below block_for, negative forget_after.';

SELECT pg_catalog.pg_extension_config_dump('rate_limiter.blocks', '');

-- Blocks (docs/blocks.md) ---------------------------------------------------

CREATE FUNCTION rate_limiter.block(name text, key text, duration interval, reason text DEFAULT NULL)
RETURNS timestamptz
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'block_wrapper';

COMMENT ON FUNCTION rate_limiter.block(text, text, interval, text) IS
'Blocks one key of a defined limit (key NULL = its global limit) for duration from now: every consuming and checking call of that name and key is refused until then, '
'consuming nothing (ok false, retry_after until - now, remaining 0; the RL429 DETAIL says "blocked": true and the reason). '
'Extends, never shortens, a block in force; returns its end. A block that starts while the key is not blocked adds a strike and takes reason. Blocks survive rate_reset. '
'Only roles that may call define. Errors: 22004 NULL name/duration; 22023 negative or infinite duration; 42501 a role that may not call define; 42704 undefined name; on Citus 55000 blocks not distributed yet (call distribute() again), 0A000 the global limit of a limit spread over the nodes.';

CREATE FUNCTION rate_limiter.unblock(name text, key text)
RETURNS boolean
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'unblock_wrapper';

COMMENT ON FUNCTION rate_limiter.unblock(text, text) IS
'Lifts the block of (name, key) and forgets its strikes; true if the key was blocked. '
'Only roles that may call define. Errors: 22004 NULL name; 42501 a role that may not call define; 42704 undefined name; on Citus 55000 blocks not distributed yet (call distribute() again), 0A000 the global limit of a limit spread over the nodes.';

CREATE FUNCTION rate_limiter.blocked(name text, key text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'blocked_wrapper';

COMMENT ON FUNCTION rate_limiter.blocked(text, text) IS
'The block of (name, key) while it is in force: until (its end), strikes (blocks the key has had), reason; no row when the key is not blocked. '
'Errors: 22004 NULL name; 42704 undefined name.';

CREATE TRIGGER blocks_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.blocks
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();

COMMENT ON FUNCTION rate_limiter.undefine(text) IS
'Deletes the named limit, its overrides and its blocks; true if it existed. Its state rows are left alone. Errors: 22004 NULL name; 2BP01 the limit is the plan of an override (remove those overrides first).';

DO $stats$
DECLARE
    grants text[];
    command text;
    grantee_name name;
BEGIN
    SELECT coalesce(pg_catalog.array_agg(pg_catalog.format('GRANT %s ON %s TO %s%s', a.privilege_type,
               CASE WHEN o.kind = 'view' THEN 'rate_limiter.stats' ELSE 'FUNCTION rate_limiter._stats()' END,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(r.rolname) END,
               CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)), '{}')
    INTO grants
    FROM (SELECT 'view' AS kind, c.relacl AS acl, c.relowner AS owner FROM pg_catalog.pg_class AS c
          WHERE c.oid = 'rate_limiter.stats'::pg_catalog.regclass
          UNION ALL
          SELECT 'function', p.proacl, p.proowner FROM pg_catalog.pg_proc AS p
          WHERE p.oid = 'rate_limiter._stats()'::pg_catalog.regprocedure) AS o
    CROSS JOIN LATERAL pg_catalog.aclexplode(o.acl) AS a
    LEFT JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee
    WHERE a.grantee <> o.owner;
    DROP VIEW rate_limiter.stats;
    DROP FUNCTION rate_limiter._stats();
    CREATE FUNCTION rate_limiter._stats()
    RETURNS TABLE (name text, calls bigint, admitted bigint, refused bigint, reserved bigint,
                   tokens float8, credited float8, near_limit bigint, shadow_refused bigint,
                   contended bigint, stats_reset timestamptz, blocked bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'stats_wrapper';
    CREATE VIEW rate_limiter.stats AS SELECT * FROM rate_limiter._stats();
    -- Nobody but their owner holds a privilege on the new objects,
    -- whatever ALTER DEFAULT PRIVILEGES handed out; then the old ones'.
    REVOKE ALL ON FUNCTION rate_limiter._stats() FROM PUBLIC;
    REVOKE ALL ON rate_limiter.stats FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid = 'rate_limiter._stats()'::pg_catalog.regprocedure
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c
            WHERE c.oid = 'rate_limiter.stats'::pg_catalog.regclass
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter._stats() FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.stats FROM %I', grantee_name);
    END LOOP;
    FOREACH command IN ARRAY grants LOOP
        EXECUTE command;
    END LOOP;
END
$stats$;

GRANT EXECUTE ON FUNCTION rate_limiter._stats() TO @extowner@ WITH GRANT OPTION;
GRANT SELECT ON rate_limiter.stats TO @extowner@ WITH GRANT OPTION;

COMMENT ON FUNCTION rate_limiter._stats() IS
'The rows of the view rate_limiter.stats. Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

COMMENT ON VIEW rate_limiter.stats IS
'One row per limit name of this database that was called since the server started: counters summed over every backend since stats_reset. '
'calls = admitted + refused + shadow_refused; reserved = admitted with retry_after > 0; tokens = counts admitted; credited = tokens given back; '
'near_limit = admitted calls that left less than 20% of capacity; contended = sharded calls that passed over or waited for a locked shard; '
'blocked = refusals of a blocked key (also counted in refused). '
'A rate_limit_all refused as a whole counts only its refused requests. '
'name is distinct per row and always converts to UTF-8: in a database that is not UTF8, characters without a UTF-8 equivalent show as \xNN and \ as \\; '
'a name longer than 256 bytes shows cut, followed by ...[<length> bytes #<hash>]. '
'Not transactional (a decision is counted when made). Needs shared_preload_libraries = ''rate_limiter'' (55000 otherwise); '
'at most rate_limiter.stats_max names of all databases (see rate_limiter.stats_info).';

-- The blocks' objects: nobody but their owner holds a privilege on them,
-- whatever ALTER DEFAULT PRIVILEGES handed out.
DO $revoke$
DECLARE
    grantee_name name;
BEGIN
    REVOKE ALL ON FUNCTION rate_limiter.block(text, text, interval, text) FROM PUBLIC;
    REVOKE ALL ON FUNCTION rate_limiter.unblock(text, text) FROM PUBLIC;
    REVOKE ALL ON FUNCTION rate_limiter.blocked(text, text) FROM PUBLIC;
    REVOKE ALL ON FUNCTION rate_limiter.with_block(rate_limiter.config, interval, interval, interval) FROM PUBLIC;
    REVOKE ALL ON rate_limiter.blocks FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN ('rate_limiter.block(text, text, interval, text)'::pg_catalog.regprocedure,
                            'rate_limiter.unblock(text, text)'::pg_catalog.regprocedure,
                            'rate_limiter.blocked(text, text)'::pg_catalog.regprocedure,
                            'rate_limiter.with_block(rate_limiter.config, interval, interval, interval)'::pg_catalog.regprocedure)
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c
            WHERE c.oid IN ('rate_limiter.blocks'::pg_catalog.regclass)
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.block(text, text, interval, text) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.unblock(text, text) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.blocked(text, text) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.with_block(rate_limiter.config, interval, interval, interval) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.blocks FROM %I', grantee_name);
    END LOOP;
END
$revoke$;

GRANT EXECUTE ON FUNCTION rate_limiter.block(text, text, interval, text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION rate_limiter.unblock(text, text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION rate_limiter.blocked(text, text) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION rate_limiter.with_block(rate_limiter.config, interval, interval, interval) TO @extowner@ WITH GRANT OPTION;

-- Limit shapes (docs/shapes.md): the kind 'sliding window', its
-- constructor, and the state table's column prev (NULL in every existing
-- row: only a sliding window stores anything there). (IF NOT EXISTS: on an
-- install Citus distributes, Citus also sends this ALTER TABLE to every
-- worker, whose own update adds the column too.)
ALTER TYPE rate_limiter.kind ADD VALUE IF NOT EXISTS 'sliding window';
-- Calendar windows (docs/shapes.md): the kind, the config's and the
-- tables' column time_zone (NULL for every other kind).
ALTER TYPE rate_limiter.kind ADD VALUE IF NOT EXISTS 'calendar window';
COMMENT ON TYPE rate_limiter.kind IS
    'Rate-limit algorithm: ''token bucket'' (continuous refill), ''fixed window'' (rate tokens per window), ''sliding window'' (the weighted two-window counter) or ''calendar window'' (rate tokens per calendar unit in a time zone)';
ALTER TYPE rate_limiter.config ADD ATTRIBUTE time_zone text;
ALTER TABLE rate_limiter.definitions ADD COLUMN IF NOT EXISTS time_zone text;
ALTER TABLE rate_limiter.rate_limits ADD COLUMN IF NOT EXISTS prev float8;
COMMENT ON TABLE rate_limiter.rate_limits IS
    'Rate-limit state: tokens (value) at time ts per (name, key, shard) (a sliding window: value admitted in the window starting at ts, prev in the one before); a missing row is a full limit';
COMMENT ON TYPE rate_limiter.config IS
    'Rate-limit configuration: kind, rate (tokens per period), period, capacity (NULL = rate), max_reserved (NULL = unlimited), shards, start (window anchor, NULL = per-key phase), block_for, max_block, forget_after (automatic blocks, NULL = none), time_zone (a calendar window''s; NULL for the other kinds)';

CREATE FUNCTION rate_limiter.sliding_window(
    rate         float8,
    period       interval,
    max_reserved float8      DEFAULT NULL,
    shards       int4        DEFAULT 1,
    start        timestamptz DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'sliding_window_wrapper';

COMMENT ON FUNCTION rate_limiter.sliding_window(float8, interval, float8, int4, timestamptz) IS
'Sliding-window config (the weighted two-window counter): a call of count is admitted when prev * (1 - f) + cur + count <= rate, '
'where cur and prev are what this window and the one before admitted and f is how far into this window now is; at most 2 * rate in any span of one period. '
'Windows start at start + k * period (NULL start = a per-key phase); capacity is rate; max_reserved bounds how far a reservation may take the estimate past rate (NULL = unlimited). '
'Errors as for token_bucket.';

CREATE FUNCTION rate_limiter.calendar_window(
    rate         float8,
    unit         text,
    time_zone    text   DEFAULT 'UTC',
    capacity     float8 DEFAULT NULL,
    max_reserved float8 DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'calendar_window_wrapper';

COMMENT ON FUNCTION rate_limiter.calendar_window(float8, text, text, float8, float8) IS
'Calendar-window config: rate tokens at the start of each calendar unit (minute, hour, day, week from Monday, month, quarter, year) in time_zone, '
'so a month is a month and a day around a change of daylight saving time has 23 or 25 hours; tokens not used carry over up to capacity (NULL = rate). '
'Its period is the unit, its time_zone the zone; not sharded. '
'Errors: 22004 NULL rate/unit/time_zone; 22023 an unknown unit or time zone (naming it), and as for token_bucket.';

-- The shapes' objects: nobody but their owner holds a privilege on them,
-- whatever ALTER DEFAULT PRIVILEGES handed out.
DO $revoke_shapes$
DECLARE
    grantee_name name;
BEGIN
    REVOKE ALL ON FUNCTION rate_limiter.sliding_window(float8, interval, float8, int4, timestamptz) FROM PUBLIC;
    REVOKE ALL ON FUNCTION rate_limiter.calendar_window(float8, text, text, float8, float8) FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN ('rate_limiter.sliding_window(float8, interval, float8, int4, timestamptz)'::pg_catalog.regprocedure,
                            'rate_limiter.calendar_window(float8, text, text, float8, float8)'::pg_catalog.regprocedure)
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.sliding_window(float8, interval, float8, int4, timestamptz) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.calendar_window(float8, text, text, float8, float8) FROM %I', grantee_name);
    END LOOP;
END
$revoke_shapes$;

GRANT EXECUTE ON FUNCTION rate_limiter.sliding_window(float8, interval, float8, int4, timestamptz) TO @extowner@ WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION rate_limiter.calendar_window(float8, text, text, float8, float8) TO @extowner@ WITH GRANT OPTION;

-- On Citus, _rate_state_at also returns a sliding window's previous-window
-- count (its result type is the released one's).
COMMENT ON FUNCTION rate_limiter._rate_state_at(text, text, text, int2) IS
'Internal (Citus): the stored state rows of (name, key), shards 0 to shards - 1, read without locking on the node that holds them, which Citus delegates the call to (status and http_headers); '
'a sliding window''s row whose previous window admitted something comes with a second row, shard -1 - shard, whose value is that count. '
'Errors: 55000 when the rows are not on this node.';

-- ==== Citus (generated from sql/citus_distribute.sql and sql/citus_internal_functions.sql) ====
-- Citus, day two (docs/guarantees.md, "Citus"): distribute() marks the workers' own
-- tables and colocates with integer columns too, undistribute() unmarks
-- them, prepare_node() prepares a node before citus_add_node(), and the
-- internal functions get an overload for an integer distribution column.
-- (The same text as those two files: an extension script cannot include
-- another.)

CREATE OR REPLACE FUNCTION rate_limiter.distribute(colocate_with regclass DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION rate_limiter.undistribute()
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

CREATE FUNCTION rate_limiter._rate_limit_at(
    dkey    integer,
    name    text,
    key     text,
    count   float8,
    reserve boolean,
    config  rate_limiter.config,
    consume boolean,
    now_override timestamptz,
    own_transaction boolean DEFAULT false)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2,
               reserved boolean, near_limit boolean, contended boolean)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', '_rate_limit_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_at(integer, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) IS
'Internal (Citus): _rate_limit_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._rate_state_at(
    dkey   integer,
    name   text,
    key    text,
    shards int2)
RETURNS TABLE (shard int2, value float8, ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_state_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_state_at(integer, text, text, int2) IS
'Internal (Citus): _rate_state_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._rate_credit_at(
    dkey   integer,
    name   text,
    key    text,
    count  float8,
    config rate_limiter.config,
    now_override timestamptz)
RETURNS float8
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_credit_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_credit_at(integer, text, text, float8, rate_limiter.config, timestamptz) IS
'Internal (Citus): _rate_credit_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._rate_limit_all_at(
    dkey     integer,
    requests rate_limiter.request[],
    reserve  boolean,
    now_override timestamptz)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2, contended boolean)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_limit_all_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_all_at(integer, rate_limiter.request[], boolean, timestamptz) IS
'Internal (Citus): _rate_limit_all_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._prune_at(
    dkey         integer,
    older_than   interval,
    now_override timestamptz)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_prune_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._prune_at(integer, interval, timestamptz) IS
'Internal (Citus): _prune_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s.';

-- Blocks on Citus (docs/blocks.md, "Citus"): a block held by another node,
-- read there.
CREATE FUNCTION rate_limiter._rate_block_at(
    dkey text,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(text, text, text) IS
'Internal (Citus): the block of (name, key), read on the node that holds its rows (beside its state), which Citus delegates the call to (status, http_headers, blocked and the refusal''s DETAIL, as the calling role). No row when the key has none. '
'Errors: 55000 when the rows are not on this node; 22023 a dkey that is not (name, key)''s.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey bigint,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(bigint, text, text) IS
'Internal (Citus): _rate_block_at for a state table colocated with a table distributed by a bigint column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey uuid,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(uuid, text, text) IS
'Internal (Citus): _rate_block_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s; 22P02 a key that is not a uuid.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey integer,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(integer, text, text) IS
'Internal (Citus): _rate_block_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

DO $revoke_citus$
DECLARE
    grantee_name name;
    signatures constant text[] := ARRAY[
        'rate_limiter.prepare_node(text, integer)',
        'rate_limiter._rate_limit_at(integer, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean)',
        'rate_limiter._rate_state_at(integer, text, text, int2)',
        'rate_limiter._rate_credit_at(integer, text, text, float8, rate_limiter.config, timestamptz)',
        'rate_limiter._rate_limit_all_at(integer, rate_limiter.request[], boolean, timestamptz)',
        'rate_limiter._prune_at(integer, interval, timestamptz)',
        'rate_limiter._rate_block_at(text, text, text)',
        'rate_limiter._rate_block_at(bigint, text, text)',
        'rate_limiter._rate_block_at(uuid, text, text)',
        'rate_limiter._rate_block_at(integer, text, text)'
    ];
    signature text;
BEGIN
    FOREACH signature IN ARRAY signatures LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
    END LOOP;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid IN (SELECT pg_catalog.to_regprocedure(s) FROM pg_catalog.unnest(signatures) AS s)
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        FOREACH signature IN ARRAY signatures LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %I', signature, grantee_name);
        END LOOP;
    END LOOP;
END
$revoke_citus$;

GRANT EXECUTE ON FUNCTION
    rate_limiter.prepare_node(text, integer),
    rate_limiter._rate_limit_at(integer, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean),
    rate_limiter._rate_state_at(integer, text, text, int2),
    rate_limiter._rate_credit_at(integer, text, text, float8, rate_limiter.config, timestamptz),
    rate_limiter._rate_limit_all_at(integer, rate_limiter.request[], boolean, timestamptz),
    rate_limiter._prune_at(integer, interval, timestamptz),
    rate_limiter._rate_block_at(text, text, text),
    rate_limiter._rate_block_at(bigint, text, text),
    rate_limiter._rate_block_at(uuid, text, text),
    rate_limiter._rate_block_at(integer, text, text)
    TO @extowner@ WITH GRANT OPTION;

-- Composites (docs/composites.md): the table rate_limiter.composites, its
-- invalidation trigger, define_all(); undefine() also deletes a composite
-- and refuses to delete a member of one; define() refuses a composite's
-- name. (IF NOT EXISTS: on an install Citus distributes, the table may be
-- there already, made a reference table by distribute().)
CREATE TABLE IF NOT EXISTS rate_limiter.composites (
    name    text PRIMARY KEY,
    members text[] NOT NULL,
    -- false: shadow mode (a refusal is answered as admitted, consuming
    -- nothing).
    enforce boolean NOT NULL DEFAULT true
);
COMMENT ON TABLE rate_limiter.composites IS
    'Composite limits: a name whose calls consume from every member (a defined limit) all or nothing; write it with rate_limiter.define_all() and rate_limiter.undefine()';
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.composites', '');

CREATE TRIGGER composites_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.composites
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();
CREATE FUNCTION rate_limiter.define_all(name text, members text[], enforce boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $define_all$
DECLARE
    member text;
    position int := 0;
    most int := coalesce(nullif(pg_catalog.current_setting('rate_limiter.max_requests', true), '')::int, 1000);
    local_only boolean := false;
BEGIN
    IF name IS NULL OR members IS NULL OR enforce IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN name IS NULL THEN 'name' WHEN members IS NULL THEN 'members' ELSE 'enforce' END
            USING ERRCODE = '22004';
    END IF;
    IF pg_catalog.cardinality(members) = 0 OR pg_catalog.array_ndims(members) <> 1 THEN
        RAISE EXCEPTION 'members must be a one-dimensional array of at least one limit name' USING ERRCODE = '22023';
    END IF;
    -- A call of the composite is one rate_limit_all() of its members.
    IF pg_catalog.cardinality(members) > most THEN
        RAISE EXCEPTION 'a composite may have at most % members (rate_limiter.max_requests), not %',
            most, pg_catalog.cardinality(members)
            USING ERRCODE = '54000';
    END IF;
    FOREACH member IN ARRAY members LOOP
        position := position + 1;
        IF member IS NULL THEN
            RAISE EXCEPTION 'members[%] must not be NULL', position USING ERRCODE = '22004';
        ELSIF member = name THEN
            RAISE EXCEPTION 'composite "%" cannot be a member of itself', name USING ERRCODE = '22023';
        ELSIF member = ANY (members[1:position - 1]) THEN
            RAISE EXCEPTION 'members[%] names "%" a second time', position, member USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute define_all() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    -- On a Citus cluster every node must read the composites: an install
    -- distributed before they existed has them in a local table until
    -- distribute() runs again (docs/citus.md).
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        -- (A statement of its own: without Citus the catalog is not there.)
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                WHERE p.logicalrelid = ''rate_limiter.rate_limits''::pg_catalog.regclass)
                    AND NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                                    WHERE p.logicalrelid = ''rate_limiter.composites''::pg_catalog.regclass
                                      AND p.partmethod = ''n'')'
            INTO local_only;
    END IF;
    IF local_only THEN
        RAISE EXCEPTION 'rate_limiter.composites is not a reference table of this cluster: a composite written now would reach only this node''s calls'
            USING ERRCODE = '55000',
                  HINT = 'Call SELECT rate_limiter.distribute(); on the coordinator once more (after ALTER EXTENSION rate_limiter UPDATE it makes the composites a reference table), then retry.';
    END IF;
    -- define_all() and undefine() take this lock first, so that neither
    -- misses what the other committed: an undefine() of a member waits,
    -- then sees the composite (2BP01); a define_all() after an undefine()
    -- of a member sees it gone (42704). (No lock on the members' rows: a
    -- row lock would leave its locker in the row, which the portable
    -- edition's snapshot check would read as a change.) Calls are not
    -- blocked: they only read the table.
    LOCK TABLE rate_limiter.composites IN SHARE ROW EXCLUSIVE MODE;
    -- One namespace: a name is a definition or a composite.
    IF EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = define_all.name) THEN
        RAISE EXCEPTION 'rate limit "%" is defined: a composite needs a name of its own', name
            USING ERRCODE = '22023',
                  HINT = 'Choose another name, or undefine() the limit first.';
    END IF;
    FOREACH member IN ARRAY members LOOP
        IF NOT EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = member) THEN
            IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE c.name = member) THEN
                RAISE EXCEPTION 'member "%" is a composite: a composite is made of defined limits', member
                    USING ERRCODE = '22023',
                          HINT = 'Name that composite''s members instead.';
            END IF;
            RAISE EXCEPTION 'rate limit "%" is not defined', member
                USING ERRCODE = '42704',
                      HINT = 'Define every member with rate_limiter.define() first.';
        END IF;
        -- (A concurrency limit counts what is in flight, not tokens:
        -- docs/concurrency.md.)
        IF EXISTS (SELECT FROM rate_limiter.definitions AS d WHERE d.name = member AND d.kind::text = 'concurrency') THEN
            RAISE EXCEPTION 'member "%" is a concurrency limit: a composite is made of rate limits', member
                USING ERRCODE = '22023',
                      HINT = 'Call rate_limiter.acquire() for the concurrency limit in the same transaction.';
        END IF;
    END LOOP;
    INSERT INTO rate_limiter.composites AS c (name, members, enforce)
    VALUES (define_all.name, define_all.members, define_all.enforce)
    ON CONFLICT ON CONSTRAINT composites_pkey DO UPDATE SET members = excluded.members, enforce = excluded.enforce;
END
$define_all$;

COMMENT ON FUNCTION rate_limiter.define_all(text, text[], boolean) IS
'Creates or replaces the composite limit name, made of the defined limits members: a call of name (rate_limit, rate_check, rate_wait, guard, postgrest_limit) consumes the same key and count from every member, all or nothing; '
'remaining is the least of the members'', retry_after the greatest of the refusing members''; status answers for the member that is tightest, http_headers one policy per member, rate_credit and rate_reset act on every member. '
'enforce => false is shadow mode: a refusal is answered as admitted and consumes nothing. '
'Errors: 22004 NULL name/members/enforce/member; 22023 no members, a member named twice, the name itself, a member that is a composite or a concurrency limit, a name that is a definition; 42704 a member that is not defined; 54000 more members than rate_limiter.max_requests; 25006 in a read-only transaction.';

COMMENT ON FUNCTION rate_limiter.undefine(text) IS
'Deletes the named limit, its overrides and its blocks, or the composite of that name; true if it existed. Its state rows are left alone. Errors: 22004 NULL name; 2BP01 the limit is the plan of an override (remove those overrides first) or a member of a composite (undefine the composite first).';

COMMENT ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) IS
'Creates or replaces the named limit. Changing kind, period or shards discards its state; other changes keep it (capped at the new capacity), switching enforce too. '
'enforce => false is shadow mode: calls decide and write state as an enforcing limit does, but answer ok = true, never raise, and count the refusal in rate_limiter.stats.shadow_refused. '
'WARNING when each shard of a sharded limit would hold fewer than 5 tokens. '
'Errors: 22004 NULL name/config/enforce or required field; 22023 invalid config, or a name that is a composite (define_all).';

COMMENT ON FUNCTION rate_limiter.rate_limit_all(rate_limiter.request[], boolean, boolean) IS
'Consumes every request (name, key, count, config) or none: the rows of all the limits are locked in one fixed order (name, key, shard; no deadlock whatever the order of the requests), '
'the clock is read once, and the requests are evaluated in the order given (a limit named twice is charged twice). '
'Returns one row per request, in order: name, key, ok, retry_after, remaining (as rate_limit). If any row is not ok, nothing is consumed. '
'A NULL count means 1; a NULL config means the definition. '
'Errors: 22004 NULL requests/element/name/reserve/throws; 42704 a name without config or definition; 22023 invalid count or config, one limit named with two configs, or a composite''s name; '
'54000 more than rate_limiter.max_requests requests, or an inline config with more than rate_limiter.max_inline_shards shards; 42501 an inline config for a defined limit from a role that may not call define; '
'25006 in a read-only transaction; the rate_limiter.sqlstate SQLSTATE (default RL429) for the first refused request with throws => true.';

-- The composites' objects: nobody but their owner holds a privilege on
-- them, whatever ALTER DEFAULT PRIVILEGES handed out.
DO $revoke_composites$
DECLARE
    grantee_name name;
BEGIN
    REVOKE ALL ON FUNCTION rate_limiter.define_all(text, text[], boolean) FROM PUBLIC;
    REVOKE ALL ON rate_limiter.composites FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM (
            SELECT (pg_catalog.aclexplode(p.proacl)).grantee, p.proowner AS owner
            FROM pg_catalog.pg_proc AS p
            WHERE p.oid = 'rate_limiter.define_all(text, text[], boolean)'::pg_catalog.regprocedure
            UNION ALL
            SELECT (pg_catalog.aclexplode(c.relacl)).grantee, c.relowner
            FROM pg_catalog.pg_class AS c WHERE c.oid = 'rate_limiter.composites'::pg_catalog.regclass
        ) AS granted
        JOIN pg_catalog.pg_roles AS r ON r.oid = granted.grantee
        WHERE granted.grantee <> granted.owner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION rate_limiter.define_all(text, text[], boolean) FROM %I', grantee_name);
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.composites FROM %I', grantee_name);
    END LOOP;
END
$revoke_composites$;

GRANT EXECUTE ON FUNCTION rate_limiter.define_all(text, text[], boolean) TO @extowner@ WITH GRANT OPTION;

-- Concurrency limits (docs/concurrency.md): the kind 'concurrency', the
-- table rate_limiter.leases and the functions of sql/concurrency.sql.
-- (The new enum value is not used by any statement of this script: a
-- value added in a transaction cannot be used before it commits.)
ALTER TYPE rate_limiter.kind ADD VALUE IF NOT EXISTS 'concurrency';
COMMENT ON TYPE rate_limiter.kind IS
    'Rate-limit algorithm: ''token bucket'' (continuous refill), ''fixed window'' (rate tokens per window), ''sliding window'' (the weighted two-window counter), ''calendar window'' (rate tokens per calendar unit in a time zone) or ''concurrency'' (at most rate operations in flight, docs/concurrency.md)';

-- Timed leases of concurrency limits (docs/concurrency.md): which slot
-- (the state row (name, key, shard = slot)) lease id holds, and for how
-- long each renew() extends it. The slot row says until when (ts; value 1
-- while a timed lease holds it): this row only finds the slot from the id
-- that release() and renew() are given. At most one row per slot (a new
-- timed lease of a slot replaces its last one's row), so the table is
-- never larger than the state rows of concurrency limits.
CREATE TABLE rate_limiter.leases (
    id       bigint PRIMARY KEY,
    name     text COLLATE "C" NOT NULL,
    key      text COLLATE "C",
    slot     int2 NOT NULL,
    duration interval NOT NULL,
    CONSTRAINT leases_slot UNIQUE NULLS NOT DISTINCT (name, key, slot)
);
COMMENT ON TABLE rate_limiter.leases IS
    'Timed leases of concurrency limits: the slot (name, key, slot) lease id holds and the duration renew() extends it by; write it with rate_limiter.acquire(), release() and renew()';

SELECT pg_catalog.pg_extension_config_dump('rate_limiter.leases', '');

-- sql/concurrency.sql
-- Concurrency limits (docs/concurrency.md): at most max operations in
-- flight per (name, key). PL/pgSQL in both editions: scripts/portable.sh
-- takes every function below the line "Both editions" from here, and
-- concurrency_status.sql, concurrency_guard.sql and
-- concurrency_leases.sql whole (concurrency_citus.sql is native only). The
-- slots of (name, key) are its state rows, shard = slot, 0 .. max - 1:
-- value 0 free (ts: when it was last written), value 1 held by a timed
-- lease until ts. A transaction lease is a row lock on a free slot's row,
-- taken with SKIP LOCKED: nothing is written once the row exists, and the
-- slot is free again when the transaction ends, however it ends.

-- Native only: what the portable edition has in portable/sql/ ------------

-- The clock of rate_limiter.now_override, else clock_timestamp()
-- (src/clock.rs; portable: _now()).
CREATE FUNCTION rate_limiter._clock()
RETURNS timestamptz
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'clock_wrapper';

-- A name or key as error messages show it (src/names.rs).
CREATE FUNCTION rate_limiter._for_message(value text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT
AS 'MODULE_PATHNAME', 'for_message_wrapper';

-- Counts a decision of acquire() in rate_limiter.stats (src/api/
-- concurrency.rs; portable: nothing): 0 admitted, 1 refused, 2 refused in
-- shadow mode.
CREATE FUNCTION rate_limiter._stats_count(name text, verdict int4)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', 'stats_count_wrapper';

-- Whether the state table is distributed by Citus (src/api/
-- concurrency.rs; portable: false): the slots of a key are then read and
-- locked with its distribution value, which routes each statement to the
-- node holding them (docs/citus.md, "Concurrency limits").
CREATE FUNCTION rate_limiter._slots_elsewhere()
RETURNS boolean
LANGUAGE c STABLE
AS 'MODULE_PATHNAME', 'slots_elsewhere_wrapper';

-- acquire() (src/api/acquire.rs): a free slot of a defined limit taken in
-- one statement, anything else by _acquire() below.
CREATE FUNCTION rate_limiter.acquire(
    name   text,
    key    text                DEFAULT NULL,
    wait   interval            DEFAULT '0',
    lease  interval            DEFAULT NULL,
    throws boolean             DEFAULT false,
    config rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, lease_id bigint, in_flight int4, retry_after interval)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'acquire_wrapper';

-- The SQLSTATE of a refusal with throws => true (rate_limiter.sqlstate,
-- checked when SET; _clock() has loaded the library that defines it).
CREATE FUNCTION rate_limiter._sqlstate()
RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.current_setting('rate_limiter.sqlstate') $$;

-- Both editions ---------------------------------------------------------

-- The max and lease of a concurrency config (22004 for a NULL max, 22023
-- for anything else out of place).
CREATE FUNCTION rate_limiter._concurrency_values(config rate_limiter.config, OUT max int4, OUT lease interval)
LANGUAGE plpgsql IMMUTABLE
AS $concurrency_values$
BEGIN
    IF config.kind IS NULL THEN
        RAISE EXCEPTION 'kind must not be NULL' USING ERRCODE = '22004';
    ELSIF config.kind::text <> 'concurrency' THEN
        RAISE EXCEPTION 'a % config is a rate limit: acquire() takes a concurrency limit', config.kind
            USING ERRCODE = '22023',
                  HINT = 'Build it with rate_limiter.concurrency(max), or call rate_limiter.rate_limit() for a rate limit.';
    ELSIF config.rate IS NULL THEN
        RAISE EXCEPTION 'max must not be NULL' USING ERRCODE = '22004';
    ELSIF NOT (config.rate >= 1 AND config.rate <= 32767 AND config.rate = pg_catalog.trunc(config.rate)) THEN
        RAISE EXCEPTION 'max must be a whole number from 1 to 32767, got %', config.rate
            USING ERRCODE = '22023',
                  HINT = 'max is the number of slots, and a slot is a state row numbered by the smallint shard column.';
    ELSIF config.period IS NOT NULL AND config.period <= interval '0' THEN
        RAISE EXCEPTION 'lease must be greater than zero, got %', config.period USING ERRCODE = '22023';
    ELSIF pg_catalog.num_nonnulls(config.capacity, config.max_reserved, config.start, config.block_for,
                                  config.max_block, config.forget_after, config.time_zone) > 0
          OR coalesce(config.shards, 1) <> 1 THEN
        RAISE EXCEPTION 'a concurrency limit has only max and lease'
            USING ERRCODE = '22023',
                  HINT = 'Build it with rate_limiter.concurrency(max, lease).';
    END IF;
    max := config.rate::int4;
    lease := config.period;
END
$concurrency_values$;

CREATE FUNCTION rate_limiter.concurrency(max int4, lease interval DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $concurrency$
DECLARE
    made rate_limiter.config := ROW('concurrency', max, lease, NULL, NULL, 1, NULL,
                                      NULL, NULL, NULL, NULL)::rate_limiter.config;
BEGIN
    PERFORM rate_limiter._concurrency_values(made);
    RETURN made;
END
$concurrency$;

COMMENT ON FUNCTION rate_limiter.concurrency(int4, interval) IS
'A concurrency limit''s config (kind ''concurrency''): at most max (1 to 32767) operations in flight per key, for define() or acquire(config => ...). '
'lease: the default of acquire()''s lease (NULL: transaction leases). Errors: 22004 NULL max; 22023 max out of range, lease not greater than zero.';

-- define() of a concurrency config (both editions' define() come here for
-- kind 'concurrency'). The slots of a limit that stays a concurrency
-- limit are kept, leases in them too; a rate limit's state rows are
-- deleted (their numbers are tokens, not slots), as define() deletes them
-- when a kind changes.
CREATE FUNCTION rate_limiter._define_concurrency(name text, config rate_limiter.config, enforce boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $define_concurrency$
DECLARE
    checked record;
    previous text;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF enforce IS NULL THEN
        RAISE EXCEPTION 'enforce must not be NULL' USING ERRCODE = '22004';
    END IF;
    checked := rate_limiter._concurrency_values(config);
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'cannot execute define() in a read-only transaction' USING ERRCODE = '25006';
    END IF;
    IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE c.name = _define_concurrency.name) THEN
        RAISE EXCEPTION '"%" is a composite (define_all): a limit needs a name of its own', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'Choose another name, or undefine() the composite first.';
    END IF;
    IF EXISTS (SELECT FROM rate_limiter.composites AS c WHERE _define_concurrency.name = ANY (c.members)) THEN
        RAISE EXCEPTION 'rate limit "%" is a member of a composite: it cannot become a concurrency limit', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'undefine() the composite first.';
    END IF;
    SELECT d.kind::text INTO previous FROM rate_limiter.definitions AS d
    WHERE d.name = _define_concurrency.name FOR UPDATE;
    IF previous IS DISTINCT FROM 'concurrency' THEN
        DELETE FROM rate_limiter.rate_limits AS r WHERE r.name = _define_concurrency.name;
    END IF;
    INSERT INTO rate_limiter.definitions AS d (name, kind, rate, period, shards, enforce)
    VALUES (name, config.kind, checked.max, coalesce(checked.lease, interval '0'), 1, enforce)
    ON CONFLICT ON CONSTRAINT definitions_pkey DO UPDATE SET
        kind = excluded.kind, rate = excluded.rate, period = excluded.period, capacity = NULL,
        max_reserved = NULL, shards = 1, start = NULL, enforce = excluded.enforce, block_for = NULL,
        max_block = NULL, forget_after = NULL, time_zone = NULL;
END
$define_concurrency$;

-- The concurrency limit a call of (name, config) uses: max, lease (the
-- default of the call's), enforce. 42704 no definition and no config;
-- 22023 a rate limit's name; 42501 a config for a defined name.
CREATE FUNCTION rate_limiter._concurrency_limit(name text, config rate_limiter.config,
                                                OUT max int4, OUT lease interval, OUT enforce boolean)
LANGUAGE plpgsql STABLE
AS $concurrency_limit$
DECLARE
    defined rate_limiter.definitions;
    checked record;
BEGIN
    SELECT * INTO defined FROM rate_limiter.definitions AS d WHERE d.name = _concurrency_limit.name;
    IF pg_catalog.num_nulls(config) = 0 THEN
        IF defined.name IS NOT NULL THEN
            RAISE EXCEPTION 'permission denied to override the definition of limit "%" with an inline config',
                rate_limiter._for_message(name)
                USING ERRCODE = '42501',
                      HINT = 'The limit is defined: call it without config => ..., or change the definition with rate_limiter.define().';
        END IF;
        checked := rate_limiter._concurrency_values(config);
        max := checked.max;
        lease := checked.lease;
        enforce := true;
        RETURN;
    END IF;
    IF defined.name IS NULL THEN
        RAISE EXCEPTION 'concurrency limit "%" is not defined', rate_limiter._for_message(name)
            USING ERRCODE = '42704',
                  HINT = 'Define it with rate_limiter.define(name, rate_limiter.concurrency(max)), or pass config => rate_limiter.concurrency(...).';
    ELSIF defined.kind::text <> 'concurrency' THEN
        RAISE EXCEPTION '"%" is a rate limit, not a concurrency limit', rate_limiter._for_message(name)
            USING ERRCODE = '22023',
                  HINT = 'Call rate_limiter.rate_limit() for a rate limit.';
    END IF;
    max := defined.rate::int4;
    lease := nullif(defined.period, interval '0');
    enforce := defined.enforce;
END
$concurrency_limit$;

-- The advisory lock that a caller inserting the row of slot (name, key,
-- slot) holds until its transaction ends, so that another caller passes
-- over that slot instead of waiting for the insert (an insert of the same
-- unique key would wait): the SKIP LOCKED of a row that does not exist yet.
CREATE FUNCTION rate_limiter._slot_lock(name text, key text, slot int4)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.hashtextextended(
        pg_catalog.length(name) || ':' || name || ':' || coalesce(pg_catalog.length(key) || ':' || key, '-'),
        slot)
$$;

-- The slots of (name, key) that this transaction holds with transaction
-- leases (a row lock of its own would not be passed over by SKIP LOCKED),
-- kept in a transaction-local setting: a subtransaction rolled back
-- forgets its own, as it releases their row locks.
CREATE FUNCTION rate_limiter._held_slots(name text, key text)
RETURNS int4[]
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.array_agg(held.slot)
    FROM pg_catalog.jsonb_to_recordset(
             coalesce(nullif(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), ''), '[]')::jsonb)
         AS held(n text, k text, slot int4)
    WHERE held.n = name AND held.k IS NOT DISTINCT FROM key
$$;

-- Takes a free slot of (name, key) for this transaction, without waiting:
-- the slot number, or NULL when every slot is held. A row of a free slot
-- is locked (SKIP LOCKED: a slot another transaction holds is passed
-- over; at READ COMMITTED the lock rechecks the newest version, so a
-- timed lease committed meanwhile is seen); else a slot without a row is
-- inserted, under its _slot_lock. A free slot is value = 0, or a timed
-- lease that expired before at. On a distributed install each statement
-- names the key's distribution value and runs on the node holding the
-- key's slots (a global limit's: _take_spread_slot), and _slot_lock is
-- taken there (_slot_lock_where).
CREATE FUNCTION rate_limiter._take_slot(name text, key text, most int4, at timestamptz)
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $take_slot$
DECLARE
    taken int4;
    own int4[] := CASE WHEN coalesce(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), '') = ''
                       THEN '{}' ELSE coalesce(rate_limiter._held_slots(name, key), '{}') END;
    existing int4[];
    candidate int4;
    -- On a distributed install, the key's distribution value (the key,
    -- read as the column's type: text, bigint, integer or uuid), which
    -- routes each statement to the node holding the key's slots; NULL on
    -- one server.
    d rate_limiter.rate_limits.dkey%TYPE;
    inserting boolean;
BEGIN
    IF rate_limiter._slots_elsewhere() THEN
        IF key IS NULL THEN
            RETURN rate_limiter._take_spread_slot(name, most, at, own);
        END IF;
        d := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(d));
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.dkey = d AND r.shard < most
          AND NOT (r.value > 0 AND r.ts > at) AND r.shard <> ALL (own)
        ORDER BY r.shard LIMIT 1
        FOR UPDATE SKIP LOCKED;
    ELSIF key IS NULL THEN
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key IS NULL AND r.shard < most
          AND NOT (r.value > 0 AND r.ts > at) AND r.shard <> ALL (own)
        ORDER BY r.shard LIMIT 1
        FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.shard < most
          AND NOT (r.value > 0 AND r.ts > at) AND r.shard <> ALL (own)
        ORDER BY r.shard LIMIT 1
        FOR UPDATE SKIP LOCKED;
    END IF;
    IF taken IS NOT NULL THEN
        RETURN taken;
    END IF;
    IF d IS NOT NULL THEN
        SELECT pg_catalog.array_agg(r.shard) INTO existing FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.dkey = d AND r.shard < most;
    ELSIF key IS NULL THEN
        SELECT pg_catalog.array_agg(r.shard) INTO existing FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key IS NULL AND r.shard < most;
    ELSE
        SELECT pg_catalog.array_agg(r.shard) INTO existing FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_slot.name AND r.key = _take_slot.key AND r.shard < most;
    END IF;
    IF coalesce(pg_catalog.cardinality(existing), 0) >= most THEN
        RETURN NULL;
    END IF;
    FOR candidate IN
        SELECT s FROM pg_catalog.generate_series(0, most - 1) AS s
        WHERE s <> ALL (coalesce(existing, '{}'))
    LOOP
        IF d IS NULL THEN
            inserting := pg_catalog.pg_try_advisory_xact_lock(rate_limiter._slot_lock(name, key, candidate));
        ELSE
            inserting := rate_limiter._slot_lock_where(d, rate_limiter._slot_lock(name, key, candidate));
        END IF;
        IF inserting THEN
            -- (DO NOTHING on the unique (name, key, shard), which is
            -- (name, key, shard, dkey) on a distributed install.)
            INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts, dkey)
            VALUES (name, key, candidate::int2, 0, at, d)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                RETURN candidate;
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$take_slot$;

-- The earliest end of a timed lease that holds a slot of (name, key) at
-- at; NULL when none does.
CREATE FUNCTION rate_limiter._earliest_expiry(name text, key text, most int4, at timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $earliest_expiry$
DECLARE
    -- (PL/pgSQL: Citus 13 cannot plan a SQL function's parameters on a
    -- distributed table.) A keyed limit's slots on a distributed install:
    -- read where they live.
    d rate_limiter.rate_limits.dkey%TYPE;
    earliest timestamptz;
BEGIN
    IF key IS NULL THEN
        SELECT pg_catalog.min(r.ts) INTO earliest FROM rate_limiter.rate_limits AS r
        WHERE r.name = _earliest_expiry.name AND r.key IS NULL AND r.shard < most
          AND r.value > 0 AND r.ts > at;
    ELSIF rate_limiter._slots_elsewhere() THEN
        d := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(d));
        SELECT pg_catalog.min(r.ts) INTO earliest FROM rate_limiter.rate_limits AS r
        WHERE r.name = _earliest_expiry.name AND r.key = _earliest_expiry.key AND r.dkey = d AND r.shard < most
          AND r.value > 0 AND r.ts > at;
    ELSE
        SELECT pg_catalog.min(r.ts) INTO earliest FROM rate_limiter.rate_limits AS r
        WHERE r.name = _earliest_expiry.name AND r.key = _earliest_expiry.key AND r.shard < most
          AND r.value > 0 AND r.ts > at;
    END IF;
    RETURN earliest;
END
$earliest_expiry$;

-- A new lease id: 63 random bits (gen_random_uuid, a strong random
-- source), never 0.
CREATE FUNCTION rate_limiter._lease_id()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT greatest(1, ('x' || pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 16))::bit(64)::bigint
                       & 9223372036854775807)
$$;

-- The texts of a refusal with throws => true (the native acquire raises
-- them itself: a SQLSTATE of rate_limiter.sqlstate does not pass through
-- its SPI call).
CREATE FUNCTION rate_limiter._concurrency_refusal(name text, key text, most int4, retry_after interval,
                                                  OUT message text, OUT detail text, OUT hint text)
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN key IS NULL
                THEN pg_catalog.format('concurrency limit "%s" is full (global limit)', rate_limiter._for_message(name))
                ELSE pg_catalog.format('concurrency limit "%s" is full for key "%s"', rate_limiter._for_message(name),
                                       rate_limiter._for_message(key)) END,
           pg_catalog.json_build_object('name', name, 'key', key, 'in_flight', most, 'max', most,
                                        'retry_after_ms', EXTRACT(epoch FROM retry_after) * 1000)::text,
           CASE WHEN retry_after IS NULL
                THEN 'Retry when one of the operations in flight ends (wait => ... waits for it).'
                ELSE 'Retry when one of the operations in flight ends, at the latest when the first lease ends.' END
$$;

-- acquire(): the native extension's takes a free slot of a defined limit
-- itself (src/api/acquire.rs) and calls this for everything else; the
-- portable edition's calls it (portable/sql/58_concurrency.sql).
CREATE FUNCTION rate_limiter._acquire(name text, key text, wait interval, lease interval, throws boolean,
                                      config rate_limiter.config)
RETURNS TABLE (ok boolean, lease_id bigint, in_flight int4, retry_after interval)
LANGUAGE plpgsql VOLATILE ROWS 1
AS $acquire$
DECLARE
    limited record;
    defined_kind text;
    most int4;
    enforcing boolean;
    duration interval;
    deadline timestamptz;
    at timestamptz;
    slot int4;
    pause float8 := 0.001;
    id bigint;
    earliest timestamptz;
    held text := pg_catalog.current_setting('rate_limiter_internal.held_slots', true);
    refusal record;
    elsewhere boolean := rate_limiter._slots_elsewhere();
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF wait IS NULL THEN
        RAISE EXCEPTION 'wait must not be NULL' USING ERRCODE = '22004';
    ELSIF throws IS NULL THEN
        RAISE EXCEPTION 'throws must not be NULL' USING ERRCODE = '22004';
    ELSIF wait < interval '0' THEN
        RAISE EXCEPTION 'wait must not be negative, got %', wait USING ERRCODE = '22023';
    ELSIF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be greater than zero, got %', lease USING ERRCODE = '22023';
    END IF;
    -- A defined limit, read here (the common case: one statement); else
    -- _concurrency_limit, which also raises every error.
    IF pg_catalog.num_nulls(config) = 1 THEN
        SELECT d.kind::text, d.rate::int4, coalesce(lease, nullif(d.period, interval '0')), d.enforce
        INTO defined_kind, most, duration, enforcing
        FROM rate_limiter.definitions AS d WHERE d.name = _acquire.name;
    END IF;
    IF defined_kind IS DISTINCT FROM 'concurrency' THEN
        limited := rate_limiter._concurrency_limit(name, config);
        most := limited.max;
        duration := coalesce(lease, limited.lease);
        enforcing := limited.enforce;
    END IF;
    -- Distributed by Citus, a timed lease is written into the leases'
    -- reference table; an install distributed before 0.6.0 and updated
    -- since has a table of each node's own until distribute() runs again.
    -- (Nested: without Citus pg_dist_partition does not exist, and the
    -- condition is planned only when reached.)
    IF elsewhere AND duration IS NOT NULL THEN
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_dist_partition AS p
                       WHERE p.logicalrelid = 'rate_limiter.leases'::pg_catalog.regclass AND p.partmethod = 'n') THEN
            RAISE EXCEPTION 'rate_limiter.leases is not a reference table of this cluster: a timed lease written now would be this node''s alone'
                USING ERRCODE = '55000',
                      HINT = 'Call SELECT rate_limiter.distribute(); on the coordinator once more (after ALTER EXTENSION rate_limiter UPDATE it makes the leases a reference table), then retry.';
        END IF;
    END IF;
    deadline := pg_catalog.clock_timestamp() + wait;
    LOOP
        at := rate_limiter._clock();
        -- The first try of _take_slot, here when this transaction holds
        -- no slot yet (the common case): a free slot's row, locked.
        IF (held IS NULL OR held = '') AND NOT elsewhere THEN
            IF key IS NULL THEN
                SELECT r.shard INTO slot FROM rate_limiter.rate_limits AS r
                WHERE r.name = _acquire.name AND r.key IS NULL AND r.shard < most
                  AND NOT (r.value > 0 AND r.ts > at)
                ORDER BY r.shard LIMIT 1
                FOR UPDATE SKIP LOCKED;
            ELSE
                SELECT r.shard INTO slot FROM rate_limiter.rate_limits AS r
                WHERE r.name = _acquire.name AND r.key = _acquire.key AND r.shard < most
                  AND NOT (r.value > 0 AND r.ts > at)
                ORDER BY r.shard LIMIT 1
                FOR UPDATE SKIP LOCKED;
            END IF;
        END IF;
        IF slot IS NULL THEN
            slot := rate_limiter._take_slot(name, key, most, at);
        END IF;
        EXIT WHEN slot IS NOT NULL OR pg_catalog.clock_timestamp() >= deadline;
        -- Holding nothing (a refused _take_slot keeps no lock it needs):
        -- pg_sleep is cancellable, and statement_timeout applies.
        PERFORM pg_catalog.pg_sleep(least(pause,
            EXTRACT(epoch FROM deadline - pg_catalog.clock_timestamp())::float8));
        pause := least(pause * 2, 0.05);
    END LOOP;
    IF slot IS NOT NULL THEN
        IF duration IS NULL THEN
            PERFORM pg_catalog.set_config('rate_limiter_internal.held_slots',
                (coalesce(nullif(pg_catalog.current_setting('rate_limiter_internal.held_slots', true), ''), '[]')::jsonb
                 || pg_catalog.jsonb_build_object('n', name, 'k', key, 'slot', slot))::text, true);
            held := 'taken';
        ELSE
            id := rate_limiter._lease_id();
            PERFORM rate_limiter._write_slot(name, key, slot, 1, at + duration, NULL);
            INSERT INTO rate_limiter.leases AS l (id, name, key, slot, duration)
            VALUES (id, name, key, slot::int2, duration)
            ON CONFLICT ON CONSTRAINT leases_slot DO UPDATE SET id = excluded.id, duration = excluded.duration;
        END IF;
        PERFORM rate_limiter._stats_count(name, 0);
        RETURN QUERY SELECT true, id, NULL::int4, NULL::interval;
        RETURN;
    END IF;
    earliest := rate_limiter._earliest_expiry(name, key, most, at);
    IF NOT enforcing THEN
        -- Shadow mode: the refusal answered as admitted, holding nothing.
        PERFORM rate_limiter._stats_count(name, 2);
        RETURN QUERY SELECT true, NULL::bigint, most, NULL::interval;
        RETURN;
    END IF;
    PERFORM rate_limiter._stats_count(name, 1);
    IF throws THEN
        refusal := rate_limiter._concurrency_refusal(name, key, most, earliest - at);
        RAISE EXCEPTION USING
            ERRCODE = rate_limiter._sqlstate(),
            MESSAGE = refusal.message, DETAIL = refusal.detail, HINT = refusal.hint;
    END IF;
    RETURN QUERY SELECT false, NULL::bigint, most, earliest - at;
END
$acquire$;

COMMENT ON FUNCTION rate_limiter.acquire(text, text, interval, interval, boolean, rate_limiter.config) IS
'Takes one of the max slots of concurrency limit (name, key). lease NULL (and no lease in the definition): a transaction lease, held until this transaction ends, lease_id NULL; '
'lease given: a timed lease, committed with the transaction, held until release(name, lease_id) or now + lease (renew() extends it). '
'Returns one row: ok, lease_id, in_flight (max when refused; NULL when admitted), retry_after (refused: until the earliest timed lease ends; NULL when only transaction leases hold slots). '
'wait: how long to wait for a slot, holding nothing meanwhile. Shadow mode (define(..., enforce => false)): a refusal is answered ok = true, holding nothing. '
'Errors: 22004 NULL name/wait/throws, NULL max in config; 42704 no config and no definition; 22023 a rate limit''s name or config, negative wait, lease not greater than zero; '
'42501 an inline config for a defined name; the rate_limiter.sqlstate SQLSTATE (default RL429, JSON DETAIL with in_flight and max) when refused with throws => true.';

-- sql/concurrency_status.sql
-- Concurrency limits (docs/concurrency.md): what their slots hold, read
-- without a lock (status()) and cleaned up (prune() of the timed leases).
-- PL/pgSQL in both editions: scripts/portable.sh takes this whole file;
-- the slots themselves are sql/concurrency.sql's.

-- Whether transaction id xid (a row's xmin or xmax, 32 bits; 0: none) is
-- still running, given the newest full transaction id: its full id has
-- the newest one's epoch, or the one before when its low 32 bits are past
-- the newest's. (A row locked by more than one transaction names a
-- multixact, not a transaction: pg_xact_status fails or answers for
-- another id, and the row counts as held.)
CREATE FUNCTION rate_limiter._running(xid bigint, newest bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $running$
DECLARE
    full_id bigint := (newest & ~4294967295::bigint) | xid;
BEGIN
    IF xid = 0 THEN
        RETURN false;
    END IF;
    IF full_id > newest THEN
        full_id := full_id - 4294967296;
    END IF;
    RETURN pg_catalog.pg_xact_status(full_id::text::xid8) = 'in progress';
EXCEPTION WHEN OTHERS THEN
    RETURN true;
END
$running$;

-- Whether a state row whose xmin and xmax are these (32 bits each) is
-- held by a transaction still running on this node: the one that locked
-- it, or the one that inserted it.
CREATE FUNCTION rate_limiter._held_by_running(xmin bigint, xmax bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $held_by_running$
DECLARE
    newest bigint := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
BEGIN
    RETURN rate_limiter._running(xmax, newest) OR rate_limiter._running(xmin, newest);
END
$held_by_running$;

-- The rows of the slots of (name, key) below most, without a lock, and
-- whether each is held by a transaction still running (_held_by_running,
-- evaluated beside the row, where its lockers' transaction ids mean
-- something: the one that locked the row (xmax), or the one that
-- inserted it (xmin: the caller's own insert, which it sees; another's it
-- does not see at all)). On a distributed install each statement names
-- the slots' distribution value: one for a keyed limit's slots, one per
-- slot for a global limit's (spread over the nodes).
CREATE FUNCTION rate_limiter._slot_rows(name text, key text, most int4)
RETURNS TABLE (shard int2, value float8, ts timestamptz, locked boolean)
LANGUAGE plpgsql VOLATILE
AS $slot_rows$
DECLARE
    d rate_limiter.rate_limits.dkey%TYPE;
    candidate int4;
BEGIN
    IF NOT rate_limiter._slots_elsewhere() THEN
        RETURN QUERY
            SELECT r.shard, r.value, r.ts,
                   rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
            FROM rate_limiter.rate_limits AS r
            WHERE _slot_rows.key IS NULL AND r.name = _slot_rows.name AND r.key IS NULL AND r.shard < most
            UNION ALL
            SELECT r.shard, r.value, r.ts,
                   rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
            FROM rate_limiter.rate_limits AS r
            WHERE r.name = _slot_rows.name AND r.key = _slot_rows.key AND r.shard < most;
    ELSIF key IS NOT NULL THEN
        d := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(d));
        RETURN QUERY
            SELECT r.shard, r.value, r.ts,
                   rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
            FROM rate_limiter.rate_limits AS r
            WHERE r.name = _slot_rows.name AND r.key = _slot_rows.key AND r.dkey = d AND r.shard < most;
    ELSE
        FOR candidate IN 0 .. most - 1 LOOP
            d := rate_limiter._slot_dkey(name, NULL, candidate, pg_catalog.pg_typeof(d));
            RETURN QUERY
                SELECT r.shard, r.value, r.ts,
                       rate_limiter._held_by_running(r.xmin::text::bigint, r.xmax::text::bigint)
                FROM rate_limiter.rate_limits AS r
                WHERE r.name = _slot_rows.name AND r.key IS NULL AND r.shard = candidate AND r.dkey = d;
        END LOOP;
    END IF;
END
$slot_rows$;

-- status() of a concurrency limit (both editions' status() come here for
-- kind 'concurrency'): value = the slots free now (max - in flight),
-- capacity = max, full_at = when every slot is free if nothing more is
-- taken (now when none is held; the last timed lease's end when only
-- timed leases hold; NULL when a transaction lease holds one: its end is
-- not known), shards 1. It takes no lock: a transaction lease is seen as
-- a row whose locker (xmax) is still running, or, for a slot whose row is
-- being inserted, its _slot_lock in pg_locks. (A row locked by more than
-- one transaction names a multixact, not a transaction: counted as held.)
CREATE FUNCTION rate_limiter._concurrency_status(name text, key text, config rate_limiter.config)
RETURNS TABLE (value float8, capacity float8, full_at timestamptz, shards int4)
LANGUAGE plpgsql VOLATILE ROWS 1
AS $concurrency_status$
DECLARE
    limited record;
    at timestamptz := rate_limiter._clock();
    slot record;
    held int4 := 0;
    by_transactions boolean := false;
    last_end timestamptz;
    existing int4[] := '{}';
    slot_dkey rate_limiter.rate_limits.dkey%TYPE;
    candidate int4;
    inserting int4;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    limited := rate_limiter._concurrency_limit(name, config);
    FOR slot IN SELECT * FROM rate_limiter._slot_rows(name, key, limited.max) LOOP
        existing := existing || slot.shard::int4;
        IF slot.value > 0 AND slot.ts > at THEN
            held := held + 1;
            last_end := greatest(last_end, slot.ts);
        ELSIF slot.locked THEN
            held := held + 1;
            by_transactions := true;
        END IF;
    END LOOP;
    -- Slots without a row that another transaction is inserting (its
    -- _slot_lock held: on a distributed install, on the node of the
    -- slot's distribution value, asked there).
    IF rate_limiter._slots_elsewhere() THEN
        IF pg_catalog.cardinality(existing) < limited.max THEN
            inserting := 0;
            IF key IS NOT NULL THEN
                -- (A keyed limit's slots share one value: one call.)
                slot_dkey := rate_limiter._slot_dkey(name, key, 0, pg_catalog.pg_typeof(slot_dkey));
                inserting := rate_limiter._slot_locks_held_where(slot_dkey, ARRAY(
                    SELECT rate_limiter._slot_lock(name, key, s) FROM pg_catalog.generate_series(0, limited.max - 1) AS s
                    WHERE s <> ALL (existing)));
            ELSE
                FOR candidate IN SELECT s FROM pg_catalog.generate_series(0, limited.max - 1) AS s
                                 WHERE s <> ALL (existing) LOOP
                    slot_dkey := rate_limiter._slot_dkey(name, NULL, candidate, pg_catalog.pg_typeof(slot_dkey));
                    inserting := inserting + rate_limiter._slot_locks_held_where(slot_dkey,
                        ARRAY[rate_limiter._slot_lock(name, NULL, candidate)]);
                END LOOP;
            END IF;
            held := held + inserting;
            by_transactions := by_transactions OR inserting > 0;
        END IF;
    ELSE
        SELECT held + count(*), by_transactions OR count(*) > 0 INTO held, by_transactions
        FROM pg_catalog.generate_series(0, limited.max - 1) AS s, pg_catalog.pg_locks AS l
        WHERE pg_catalog.cardinality(existing) < limited.max AND s <> ALL (existing) AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
          AND l.classid::text::bigint = (rate_limiter._slot_lock(_concurrency_status.name, _concurrency_status.key, s) >> 32) & 4294967295
          AND l.objid::text::bigint = rate_limiter._slot_lock(_concurrency_status.name, _concurrency_status.key, s) & 4294967295;
    END IF;
    value := limited.max - least(held, limited.max);
    capacity := limited.max;
    full_at := CASE WHEN by_transactions THEN NULL ELSE coalesce(last_end, at) END;
    shards := 1;
    RETURN NEXT;
END
$concurrency_status$;

-- prune() of rate_limiter.leases (both editions' prune() call it): the
-- rows of leases that hold no slot any more (released rows are deleted by
-- release(); these ended, or their slot's row was pruned). How many.
CREATE FUNCTION rate_limiter._prune_leases()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $prune_leases$
DECLARE
    at timestamptz := rate_limiter._clock();
    gone bigint;
BEGIN
    IF rate_limiter._slots_elsewhere() THEN
        -- Distributed: the leases are a reference table, which Citus does
        -- not delete from by a subquery over the distributed state; the
        -- leases that still hold their slot are read first.
        DELETE FROM rate_limiter.leases AS l
        WHERE l.id <> ALL (coalesce((
            SELECT pg_catalog.array_agg(h.id)
            FROM rate_limiter.leases AS h
            JOIN rate_limiter.rate_limits AS r
              ON r.name = h.name AND r.shard = h.slot AND (r.key = h.key OR (r.key IS NULL AND h.key IS NULL))
            WHERE r.value > 0 AND r.ts > at), '{}'));
        GET DIAGNOSTICS gone = ROW_COUNT;
        RETURN gone;
    END IF;
    DELETE FROM rate_limiter.leases AS l
    WHERE NOT EXISTS (SELECT FROM rate_limiter.rate_limits AS r
                      WHERE r.name = l.name AND r.key = l.key AND r.shard = l.slot AND r.value > 0 AND r.ts > at)
      AND NOT (l.key IS NULL AND EXISTS (SELECT FROM rate_limiter.rate_limits AS r
                                         WHERE r.name = l.name AND r.key IS NULL AND r.shard = l.slot
                                           AND r.value > 0 AND r.ts > at));
    GET DIAGNOSTICS gone = ROW_COUNT;
    RETURN gone;
END
$prune_leases$;

-- sql/concurrency_guard.sql
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

-- sql/concurrency_leases.sql
-- Timed leases of concurrency limits (docs/concurrency.md): release()
-- and renew(), and the write of a slot's lease end. PL/pgSQL in both
-- editions: scripts/portable.sh takes this whole file; acquire() is
-- sql/concurrency.sql's.

-- The lease id of (name) and its slot row, locked: what release() and
-- renew() act on. NULL when lease_id is no lease of name.
CREATE FUNCTION rate_limiter._lease(name text, lease_id bigint)
RETURNS rate_limiter.leases
LANGUAGE plpgsql VOLATILE
AS $lease$
DECLARE
    held rate_limiter.leases;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    ELSIF lease_id IS NULL THEN
        RAISE EXCEPTION 'lease_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT * INTO held FROM rate_limiter.leases AS l
    WHERE l.id = lease_id AND l.name = _lease.name
    FOR UPDATE;
    RETURN held;
END
$lease$;

-- Writes value and ts (until) into the row of slot (name, key, slot),
-- only if a timed lease holds it at held_at (NULL: whatever it holds):
-- whether it did. On a distributed install the statement names the
-- slot's distribution value (it runs on the node holding the row).
CREATE FUNCTION rate_limiter._write_slot(name text, key text, slot int4, value float8, until timestamptz,
                                         held_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $write_slot$
DECLARE
    d rate_limiter.rate_limits.dkey%TYPE;
BEGIN
    IF rate_limiter._slots_elsewhere() THEN
        d := rate_limiter._slot_dkey(name, key, slot, pg_catalog.pg_typeof(d));
        IF key IS NULL THEN
            UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
            WHERE r.name = _write_slot.name AND r.key IS NULL AND r.shard = slot AND r.dkey = d
              AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
        ELSE
            UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
            WHERE r.name = _write_slot.name AND r.key = _write_slot.key AND r.shard = slot AND r.dkey = d
              AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
        END IF;
    ELSIF key IS NULL THEN
        UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
        WHERE r.name = _write_slot.name AND r.key IS NULL AND r.shard = slot
          AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
    ELSE
        UPDATE rate_limiter.rate_limits AS r SET value = _write_slot.value, ts = until
        WHERE r.name = _write_slot.name AND r.key = _write_slot.key AND r.shard = slot
          AND (held_at IS NULL OR (r.value > 0 AND r.ts > held_at));
    END IF;
    RETURN FOUND;
END
$write_slot$;

-- Sets the end of the timed lease held of slot (held) to until, if it
-- still holds it at at: whether it did.
CREATE FUNCTION rate_limiter._set_lease_end(held rate_limiter.leases, at timestamptz, until timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT rate_limiter._write_slot(held.name, held.key, held.slot, CASE WHEN until > at THEN 1 ELSE 0 END, until, at)
$$;

CREATE FUNCTION rate_limiter.release(name text, lease_id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $release$
DECLARE
    held rate_limiter.leases := rate_limiter._lease(name, lease_id);
    at timestamptz;
    freed boolean;
BEGIN
    IF held.id IS NULL THEN
        RETURN false;
    END IF;
    at := rate_limiter._clock();
    freed := rate_limiter._set_lease_end(held, at, at);
    DELETE FROM rate_limiter.leases AS l WHERE l.id = held.id;
    RETURN freed;
END
$release$;

COMMENT ON FUNCTION rate_limiter.release(text, bigint) IS
'Frees the slot of timed lease lease_id of concurrency limit name (from acquire(lease => ...)) at once. '
'Returns true if the lease held its slot; false when it had expired, was released already, or is not a lease of name (nothing is changed then). '
'Errors: 22004 NULL name/lease_id; 25006 in a read-only transaction.';

CREATE FUNCTION rate_limiter.renew(name text, lease_id bigint, lease interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $renew$
DECLARE
    held rate_limiter.leases;
    at timestamptz;
BEGIN
    IF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be greater than zero, got %', lease USING ERRCODE = '22023';
    END IF;
    held := rate_limiter._lease(name, lease_id);
    IF held.id IS NULL THEN
        RETURN false;
    END IF;
    at := rate_limiter._clock();
    IF NOT rate_limiter._set_lease_end(held, at, at + coalesce(lease, held.duration)) THEN
        RETURN false;
    END IF;
    IF lease IS NOT NULL AND lease <> held.duration THEN
        UPDATE rate_limiter.leases AS l SET duration = renew.lease WHERE l.id = held.id;
    END IF;
    RETURN true;
END
$renew$;

COMMENT ON FUNCTION rate_limiter.renew(text, bigint, interval) IS
'Extends timed lease lease_id of concurrency limit name to now + lease (NULL: the lease it was taken or last renewed with), while it still holds its slot. '
'Returns true if it did; false when the lease had expired, was released, or is not a lease of name (nothing is changed then). '
'Errors: 22004 NULL name/lease_id; 22023 lease not greater than zero; 25006 in a read-only transaction.';

-- sql/concurrency_citus.sql
-- Concurrency limits on a distributed install (docs/citus.md, "Special
-- cases"; docs/citus-design.md, section 17): where a slot's row lives
-- and the advisory lock of a slot being inserted, taken on that row's
-- node. Native only (the portable edition is never distributed): the
-- shared PL/pgSQL (sql/concurrency.sql, concurrency_status.sql and
-- concurrency_leases.sql) calls these only when _slots_elsewhere().

-- The distribution value of slot (name, key, slot) on a distributed
-- install, as text of the column's type (typ): a keyed limit's slots
-- have the key's (the key read as that type: they live beside the key's
-- state), a global limit's slot n that of name/n, as distribute()
-- computes a global limit's shard n's (src/citus/value.rs).
CREATE FUNCTION rate_limiter._slot_dkey(name text, key text, slot int4, typ regtype)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN key IS NOT NULL THEN key
                WHEN typ = 'pg_catalog.uuid'::pg_catalog.regtype THEN pg_catalog.md5(name || '/' || slot)
                WHEN typ = 'pg_catalog.int8'::pg_catalog.regtype THEN pg_catalog.hashtextextended(name || '/' || slot, 0)::text
                WHEN typ = 'pg_catalog.int4'::pg_catalog.regtype THEN pg_catalog.hashtext(name || '/' || slot)::text
                ELSE name || '/' || slot END
$$;

-- How many of these _slot_locks another transaction of this node holds
-- (slots whose rows it is inserting, which status() counts as held).
CREATE FUNCTION rate_limiter._slot_locks_held(locks bigint[])
RETURNS int4
LANGUAGE sql STABLE
AS $$
    SELECT count(*)::int4 FROM pg_catalog.unnest(locks) AS lock, pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid <> pg_catalog.pg_backend_pid()
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
      AND l.classid::text::bigint = (lock >> 32) & 4294967295
      AND l.objid::text::bigint = lock & 4294967295
$$;

-- On a distributed install, pg_try_advisory_xact_lock(lock) taken, and
-- _slot_locks_held(locks) counted, on the node holding the rows of
-- distribution value dkey (distribute() makes Citus delegate these calls
-- there, in the caller's transaction; plpgsql, so that they are never
-- inlined): the _slot_lock of a slot being inserted is then one lock
-- whichever node the callers are on, and a caller passes over a slot
-- another is inserting instead of waiting at the unique index for its
-- transaction. One of each for each type of the column dkey.
CREATE FUNCTION rate_limiter._slot_lock_on(dkey text, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey text, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

CREATE FUNCTION rate_limiter._slot_lock_on(dkey bigint, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey bigint, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

CREATE FUNCTION rate_limiter._slot_lock_on(dkey integer, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey integer, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

CREATE FUNCTION rate_limiter._slot_lock_on(dkey uuid, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN pg_catalog.pg_try_advisory_xact_lock(lock); END $$;

CREATE FUNCTION rate_limiter._slot_locks_held_on(dkey uuid, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN rate_limiter._slot_locks_held(locks); END $$;

-- _slot_lock_on(dkey, lock) and _slot_locks_held_on(dkey, locks) called
-- so that Citus delegates them: in a statement of its own whose
-- distribution argument is a constant (a PL/pgSQL variable is a
-- parameter, which Citus does not delegate by), the function in FROM.
CREATE FUNCTION rate_limiter._slot_lock_where(dkey anyelement, lock bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $slot_lock_where$
DECLARE
    taken boolean;
BEGIN
    EXECUTE pg_catalog.format('SELECT l FROM rate_limiter._slot_lock_on(%L::%s, %s) AS l',
                              dkey, pg_catalog.pg_typeof(dkey), lock)
    INTO taken;
    RETURN taken;
END
$slot_lock_where$;

CREATE FUNCTION rate_limiter._slot_locks_held_where(dkey anyelement, locks bigint[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $slot_locks_held_where$
DECLARE
    held int4;
BEGIN
    EXECUTE pg_catalog.format('SELECT h FROM rate_limiter._slot_locks_held_on(%L::%s, %L::bigint[]) AS h',
                              dkey, pg_catalog.pg_typeof(dkey), locks)
    INTO held;
    RETURN held;
END
$slot_locks_held_where$;

-- _take_slot() of a global limit on a distributed install: its slots'
-- rows are spread over the nodes (each its own distribution value), so
-- each slot is tried by statements of its own, in slot order: its row
-- locked if free (SKIP LOCKED), else inserted if it has none, under its
-- _slot_lock taken on the row's node (_slot_lock_where).
CREATE FUNCTION rate_limiter._take_spread_slot(name text, most int4, at timestamptz, own int4[])
RETURNS int4
LANGUAGE plpgsql VOLATILE
AS $take_spread_slot$
DECLARE
    d rate_limiter.rate_limits.dkey%TYPE;
    candidate int4;
    taken int4;
BEGIN
    FOR candidate IN SELECT s FROM pg_catalog.generate_series(0, most - 1) AS s WHERE s <> ALL (own) LOOP
        d := rate_limiter._slot_dkey(name, NULL, candidate, pg_catalog.pg_typeof(d));
        SELECT r.shard INTO taken FROM rate_limiter.rate_limits AS r
        WHERE r.name = _take_spread_slot.name AND r.key IS NULL AND r.shard = candidate AND r.dkey = d
          AND NOT (r.value > 0 AND r.ts > at)
        FOR UPDATE SKIP LOCKED;
        IF taken IS NOT NULL THEN
            RETURN taken;
        END IF;
        IF NOT EXISTS (SELECT FROM rate_limiter.rate_limits AS r
                       WHERE r.name = _take_spread_slot.name AND r.key IS NULL AND r.shard = candidate AND r.dkey = d)
           AND rate_limiter._slot_lock_where(d, rate_limiter._slot_lock(name, NULL, candidate)) THEN
            INSERT INTO rate_limiter.rate_limits AS r (name, key, shard, value, ts, dkey)
            VALUES (name, NULL, candidate::int2, 0, at, d)
            ON CONFLICT DO NOTHING;
            IF FOUND THEN
                RETURN candidate;
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$take_spread_slot$;


-- The concurrency limits' objects: nobody but their owner holds a
-- privilege on them, whatever ALTER DEFAULT PRIVILEGES handed out; the
-- installing role may pass EXECUTE on.
DO $revoke_concurrency$
DECLARE
    grantee_name name;
    function_name text;
BEGIN
    REVOKE ALL ON rate_limiter.leases FROM PUBLIC;
    FOR grantee_name IN
        SELECT DISTINCT r.rolname
        FROM pg_catalog.aclexplode((SELECT c.relacl FROM pg_catalog.pg_class AS c
                                    WHERE c.oid = 'rate_limiter.leases'::pg_catalog.regclass)) AS a
        JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee
        WHERE a.grantee <> (SELECT c.relowner FROM pg_catalog.pg_class AS c
                            WHERE c.oid = 'rate_limiter.leases'::pg_catalog.regclass)
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON rate_limiter.leases FROM %I', grantee_name);
    END LOOP;
    FOR function_name IN
        SELECT p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'rate_limiter'::pg_catalog.regnamespace
          AND p.proname = ANY (ARRAY['_clock', '_for_message', '_stats_count', 'acquire', '_sqlstate', '_concurrency_values', 'concurrency', '_define_concurrency', '_concurrency_limit', '_slot_lock', '_held_slots', '_take_slot', '_earliest_expiry', '_lease_id', '_concurrency_refusal', '_acquire', '_lease', '_set_lease_end', 'release', 'renew', '_running', '_held_by_running', '_slots_elsewhere', '_slot_dkey', '_slot_locks_held', '_slot_lock_on', '_slot_locks_held_on', '_slot_lock_where', '_slot_locks_held_where', '_take_spread_slot', '_write_slot', '_slot_rows', '_concurrency_status', '_prune_leases', 'guard_slot'])
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', function_name);
        FOR grantee_name IN
            SELECT DISTINCT r.rolname
            FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
            JOIN pg_catalog.pg_roles AS r ON r.oid = a.grantee
            WHERE p.oid = function_name::pg_catalog.regprocedure AND a.grantee <> p.proowner
        LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %I', function_name, grantee_name);
        END LOOP;
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO @extowner@ WITH GRANT OPTION', function_name);
    END LOOP;
END
$revoke_concurrency$;
