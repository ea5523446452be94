-- Schema objects of the rate_limiter extension: types and tables.
-- Functions are declared in sql/functions.sql; privileges are set in
-- sql/privileges.sql, which runs last.

-- The algorithm of a limit.
CREATE TYPE rate_limiter.kind AS ENUM ('token bucket', 'fixed window', 'sliding window', 'calendar window', 'concurrency');
COMMENT ON TYPE rate_limiter.kind IS
    'Rate-limit algorithm: ''token bucket'' (continuous refill), ''fixed window'' (rate tokens per window), ''sliding window'' (the weighted two-window counter), ''calendar window'' (rate tokens per calendar unit in a time zone) or ''concurrency'' (at most rate operations in flight, docs/concurrency.md)';

-- A limit's configuration; build one with rate_limiter.token_bucket(),
-- rate_limiter.fixed_window() or rate_limiter.sliding_window(), and
-- rate_limiter.with_block(). NULL capacity
-- means rate; NULL max_reserved means unlimited debt; NULL start means a
-- per-key window phase; NULL block_for means no automatic blocks (then
-- max_block and forget_after are NULL too), NULL max_block no bound, NULL
-- forget_after a day (docs/blocks.md).
CREATE TYPE rate_limiter.config AS (
    kind         rate_limiter.kind,
    rate         float8,
    period       interval,
    capacity     float8,
    max_reserved float8,
    shards       int4,
    start        timestamptz,
    block_for    interval,
    max_block    interval,
    forget_after interval,
    time_zone    text
);
COMMENT ON TYPE rate_limiter.config IS
    'Rate-limit configuration: kind, rate (tokens per period), period, capacity (NULL = rate), max_reserved (NULL = unlimited), shards, start (window anchor, NULL = per-key phase), block_for, max_block, forget_after (automatic blocks, NULL = none), time_zone (a calendar window''s; NULL for the other kinds)';

-- One request of rate_limiter.rate_limit_all(): a limit (name, key), how
-- many tokens (NULL = 1) and an inline config (NULL = the definition).
CREATE TYPE rate_limiter.request AS (
    name   text,
    key    text,
    count  float8,
    config rate_limiter.config
);
COMMENT ON TYPE rate_limiter.request IS
    'One request of rate_limiter.rate_limit_all(): limit name, key (NULL = global), count (NULL = 1), config (NULL = the definition)';

-- Named limits ("define once, use by name").
CREATE TABLE rate_limiter.definitions (
    name         text PRIMARY KEY,
    kind         rate_limiter.kind NOT NULL,
    rate         float8 NOT NULL,
    period       interval NOT NULL,
    capacity     float8,
    max_reserved float8,
    shards       int4 NOT NULL DEFAULT 1,
    start        timestamptz,
    -- false: shadow mode (decides and writes state, answers as admitted).
    enforce      boolean NOT NULL DEFAULT true,
    -- Automatic blocks (docs/blocks.md): NULL block_for is none.
    block_for    interval,
    max_block    interval,
    forget_after interval,
    -- A calendar window's time zone (docs/shapes.md); its unit is period.
    time_zone    text
);
COMMENT ON TABLE rate_limiter.definitions IS
    'Named rate limits; write it with rate_limiter.define() and rate_limiter.undefine()';

-- State: two numbers per (name, key, shard) that has been used. key NULL is
-- the global limit of that name; NULLS NOT DISTINCT makes it one row.
-- The row is as small as the hand-written (name, key, value, ts) table's:
-- shard is a smallint, which fits in the alignment padding before value.
-- name and key compare bytewise (COLLATE "C"): the unique index is searched
-- on every call, and equality is the same under every deterministic
-- collation. The default fillfactor (100) keeps the table compact; value
-- and ts are not indexed, so updates stay HOT once each page has one free
-- slot (README, "Storage"). The index only grows when a key is new (HOT
-- updates add no entries), so its pages are filled completely when keys
-- arrive in ascending order.
CREATE TABLE rate_limiter.rate_limits (
    name   text COLLATE "C" NOT NULL,
    key    text COLLATE "C",
    shard  int2 NOT NULL DEFAULT 0,
    value  float8 NOT NULL,
    ts     timestamptz NOT NULL,
    -- Citus's distribution column (docs/guarantees.md, "Citus"): NULL until
    -- rate_limiter.distribute(), then the key (or name/shard for a global
    -- limit). A NULL costs no row bytes (the null bitmap fits in the
    -- header's padding).
    dkey   text COLLATE "C",
    -- Which configuration the row was written under (docs/overrides.md,
    -- "State"): NULL for the limit's definition, or an override of the
    -- same kind, period and shards; else a 64-bit hash of the kind, period
    -- and shards of the key's override. A call whose configuration has
    -- another regime treats the row as missing (its numbers would mean
    -- something else) and overwrites it. NULL costs no row bytes.
    regime int8,
    -- A sliding window's count of its previous window (docs/shapes.md;
    -- value is then its current window's count, ts that window's start):
    -- NULL when 0, and always for the other kinds. NULL costs no row bytes.
    prev   float8,
    CONSTRAINT rate_limits_name_key_shard_key UNIQUE NULLS NOT DISTINCT (name, key, shard)
        WITH (fillfactor = 100)
);
COMMENT ON TABLE rate_limiter.rate_limits IS
    'Rate-limit state: tokens (value) at time ts per (name, key, shard) (a sliding window: value admitted in the window starting at ts, prev in the one before); a missing row is a full limit';

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

-- Composites (docs/composites.md): a name made of defined limits, each
-- call of it consumed from every member all or nothing, with one key and
-- count. Names share one namespace with the definitions (define() of a
-- composite's name and define_all() of a definition's are refused). Written
-- by rate_limiter.define_all() and rate_limiter.undefine(); read by a call
-- of a name that has no definition (src/composites.rs).
CREATE TABLE rate_limiter.composites (
    name    text PRIMARY KEY,
    members text[] NOT NULL,
    -- false: shadow mode (a refusal is answered as admitted, consuming
    -- nothing).
    enforce boolean NOT NULL DEFAULT true
);
COMMENT ON TABLE rate_limiter.composites IS
    'Composite limits: a name whose calls consume from every member (a defined limit) all or nothing; write it with rate_limiter.define_all() and rate_limiter.undefine()';

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

-- pg_dump keeps definitions and state (a restore must not hand everyone a
-- full bucket).
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.definitions', '');
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.rate_limits', '');
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.overrides', '');
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.blocks', '');
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.composites', '');
SELECT pg_catalog.pg_extension_config_dump('rate_limiter.leases', '');
