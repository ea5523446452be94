-- Every SQL function of the extension. The bodies are in Rust (src/); each
-- AS clause names the symbol that #[pg_extern(sql = false)] generates.
-- The functions that read or write the tables run their statements as the
-- extension's owner with the search path pg_catalog, rate_limiter (see
-- src/security.rs): the effect of SECURITY DEFINER SET search_path = ...,
-- at a fraction of its cost per call.
-- None is STRICT: a NULL required argument is an error (SQLSTATE 22004),
-- and a NULL key means the global limit.

-- Config constructors ------------------------------------------------------

CREATE FUNCTION rate_limiter.token_bucket(
    rate         float8,
    period       interval,
    capacity     float8 DEFAULT NULL,
    max_reserved float8 DEFAULT NULL,
    shards       int4   DEFAULT 1)
RETURNS rate_limiter.config
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'token_bucket_wrapper';

COMMENT ON FUNCTION rate_limiter.token_bucket(float8, interval, float8, float8, int4) IS
'Token-bucket config: rate tokens arrive continuously per period, up to capacity (NULL = rate); '
'max_reserved bounds the debt of reservations (NULL = unlimited, 0 = none). '
'shards splits the limit over that many rows (each with 1/shards of rate, capacity and max_reserved) so that concurrent transactions do not queue on one row. '
'Errors: 22004 NULL rate/period/shards; 22023 non-finite or non-positive rate/period, negative capacity/max_reserved, shards outside 1..32767.';

CREATE FUNCTION rate_limiter.fixed_window(
    rate         float8,
    period       interval,
    capacity     float8      DEFAULT NULL,
    max_reserved float8      DEFAULT NULL,
    shards       int4        DEFAULT 1,
    start        timestamptz DEFAULT NULL)
RETURNS rate_limiter.config
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'fixed_window_wrapper';

COMMENT ON FUNCTION rate_limiter.fixed_window(float8, interval, float8, float8, int4, timestamptz) IS
'Fixed-window config: rate tokens at the start of each window of length period, up to capacity (NULL = rate). '
'Windows start at start + k * period (NULL start = a per-key phase from a hash of name and key). '
'Errors as for token_bucket.';

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

-- Definitions --------------------------------------------------------------

CREATE FUNCTION rate_limiter.define(name text, config rate_limiter.config, enforce boolean DEFAULT true)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'define_enforcing_wrapper';

COMMENT ON FUNCTION rate_limiter.define(text, rate_limiter.config, boolean) IS
'Creates or replaces the named limit. Changing kind, period or shards discards its state; other changes keep it (capped at the new capacity), switching enforce too. '
'enforce => false is shadow mode: calls decide and write state as an enforcing limit does, but answer ok = true, never raise, and count the refusal in rate_limiter.stats.shadow_refused. '
'WARNING when each shard of a sharded limit would hold fewer than 5 tokens. '
'Errors: 22004 NULL name/config/enforce or required field; 22023 invalid config, or a name that is a composite (define_all).';

CREATE FUNCTION rate_limiter.undefine(name text)
RETURNS boolean
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'undefine_wrapper';

COMMENT ON FUNCTION rate_limiter.undefine(text) IS
'Deletes the named limit, its overrides and its blocks, or the composite of that name; true if it existed. Its state rows are left alone. Errors: 22004 NULL name; 2BP01 the limit is the plan of an override (remove those overrides first) or a member of a composite (undefine the composite first).';

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

-- The core -----------------------------------------------------------------

CREATE FUNCTION rate_limiter.rate_limit(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    reserve boolean             DEFAULT false,
    throws  boolean             DEFAULT false,
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'rate_limit_wrapper';

COMMENT ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config) IS
'Consumes count tokens of limit (name, key) inside the current transaction, locking its row. '
'Returns one row: ok, retry_after (interval, rounded up to the microsecond; NULL when admitted without debt), remaining (tokens). '
'key NULL = the global limit; config inline is for names without a definition (for a defined name only a role that may call define may pass one). '
'A sharded limit consumes from one or two of its shards, passing over shards other transactions hold; remaining is then an estimate for the whole limit. '
'Errors: 22004 NULL name/count/reserve/throws; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 invalid count or config; '
'the rate_limiter.sqlstate SQLSTATE (default RL429, JSON DETAIL) when refused with throws => true.';

CREATE FUNCTION rate_limiter.rate_check(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    reserve boolean             DEFAULT false,
    throws  boolean             DEFAULT false,
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'rate_check_wrapper';

COMMENT ON FUNCTION rate_limiter.rate_check(text, text, float8, boolean, boolean, rate_limiter.config) IS
'The answer rate_limit would give now, without taking a lock or writing anything. Same arguments, result and errors as rate_limit. '
'For a sharded limit: the answer for its two fullest shards, and remaining summed over every shard.';

CREATE FUNCTION rate_limiter.rate_reset(name text, key text DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
-- The DELETE is planned once per backend; keep that plan on the index even
-- if it was made while the table was empty.
SET enable_seqscan = off
AS 'MODULE_PATHNAME', 'rate_reset_wrapper';

COMMENT ON FUNCTION rate_limiter.rate_reset(text, text) IS
'Forgets the state of (name, key) on every shard, so the next call starts full. Needs no definition; a no-op without state. Errors: 22004 NULL name.';

-- Giving tokens back -----------------------------------------------------

CREATE FUNCTION rate_limiter.rate_credit(
    name   text,
    key    text                DEFAULT NULL,
    count  float8              DEFAULT 1,
    config rate_limiter.config DEFAULT NULL)
RETURNS float8
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'rate_credit_wrapper';

COMMENT ON FUNCTION rate_limiter.rate_credit(text, text, float8, rate_limiter.config) IS
'Gives count tokens back to the limit (name, key), e.g. the unused part of a reservation: refills to now, adds count, never above capacity '
'(a sharded limit fills its emptiest shards first, each up to its capacity); a limit without state is full and nothing is written. '
'Locks the rows like rate_limit. Returns the value afterwards (tokens, summed over shards). '
'Errors: 22004 NULL name/count; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 invalid count or config; 25006 in a read-only transaction.';

-- Guarding a table ---------------------------------------------------------

CREATE FUNCTION rate_limiter.guard()
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

COMMENT ON FUNCTION rate_limiter.guard() IS
'Trigger function: CREATE TRIGGER ... BEFORE INSERT OR UPDATE ON t FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard(limit_name [, key_column [, count_column]]). '
'Each row consumes count_column (default 1) tokens of the limit, keyed by key_column (none = the global limit) in a canonical text form: values that compare equal are one key (numeric 42.0 is 42, timestamptz in UTC); '
'a refusal raises the rate_limiter.sqlstate error (default RL429) and the statement is rolled back. The role writing the rows needs USAGE on the schema and EXECUTE on rate_limit. '
'Errors: 39P01 not a BEFORE ... FOR EACH ROW trigger; 22023 wrong number of arguments, or a key column whose equal values may have different text forms (a nondeterministic collation, citext, jsonb, ...); '
'22004 a NULL key value; 42703 unknown column; and those of rate_limit.';

-- Reading a limit without consuming ---------------------------------------
-- (work in read-only transactions and on hot standbys)

CREATE FUNCTION rate_limiter.status(
    name   text,
    key    text                DEFAULT NULL,
    config rate_limiter.config DEFAULT NULL)
RETURNS TABLE (value float8, capacity float8, full_at timestamptz, shards int4)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'status_wrapper';

COMMENT ON FUNCTION rate_limiter.status(text, text, rate_limiter.config) IS
'Where the limit (name, key) stands now, without consuming or locking: value (tokens available now, summed over shards; negative in debt), '
'capacity (all shards together), full_at (when it is full again if nothing consumes; now when full), shards. '
'Errors: 22004 NULL name; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 invalid config.';

CREATE FUNCTION rate_limiter.http_headers(
    name        text,
    key         text                DEFAULT NULL,
    ok          boolean             DEFAULT NULL,
    retry_after interval            DEFAULT NULL,
    remaining   float8              DEFAULT NULL,
    config      rate_limiter.config DEFAULT NULL)
RETURNS jsonb
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'http_headers_wrapper';

COMMENT ON FUNCTION rate_limiter.http_headers(text, text, boolean, interval, float8, rate_limiter.config) IS
'HTTP response fields for a call of (name, key), per draft-ietf-httpapi-ratelimit-headers-10: '
'a jsonb object with RateLimit-Policy ("<name>";q=<rate>;w=<period seconds>), RateLimit ("<name>";r=<whole tokens left>;t=<seconds until full, or until retry_after when refused>) '
'and, only when ok is false, Retry-After (<seconds>). Seconds are whole, rounded up. ok, retry_after, remaining are a rate_limit result; NULL remaining means the current value. '
'The name is sent as given; keys never are. Errors: 22004 NULL name, or NULL retry_after with ok false; 42704 no config and no definition; 42501 an inline config for a defined limit from a role that may not call define; 54000 an inline config with more than rate_limiter.max_inline_shards shards; 22023 a name that is not printable ASCII, a negative retry_after.';

-- Several limits at once ------------------------------------------------------

CREATE FUNCTION rate_limiter.rate_limit_all(
    requests rate_limiter.request[],
    reserve  boolean DEFAULT false,
    throws   boolean DEFAULT false)
RETURNS TABLE (name text, key text, ok boolean, retry_after interval, remaining float8)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'rate_limit_all_wrapper';

COMMENT ON FUNCTION rate_limiter.rate_limit_all(rate_limiter.request[], boolean, boolean) IS
'Consumes every request (name, key, count, config) or none: the rows of all the limits are locked in one fixed order (name, key, shard; no deadlock whatever the order of the requests), '
'the clock is read once, and the requests are evaluated in the order given (a limit named twice is charged twice). '
'Returns one row per request, in order: name, key, ok, retry_after, remaining (as rate_limit). If any row is not ok, nothing is consumed. '
'A NULL count means 1; a NULL config means the definition. '
'Errors: 22004 NULL requests/element/name/reserve/throws; 42704 a name without config or definition; 22023 invalid count or config, one limit named with two configs, or a composite''s name; '
'54000 more than rate_limiter.max_requests requests, or an inline config with more than rate_limiter.max_inline_shards shards; 42501 an inline config for a defined limit from a role that may not call define; '
'25006 in a read-only transaction; the rate_limiter.sqlstate SQLSTATE (default RL429) for the first refused request with throws => true.';

-- Waiting for capacity ------------------------------------------------------

CREATE FUNCTION rate_limiter.rate_wait(
    name    text,
    key     text                DEFAULT NULL,
    count   float8              DEFAULT 1,
    timeout interval            DEFAULT '30 seconds',
    config  rate_limiter.config DEFAULT NULL)
RETURNS TABLE (ok boolean, retry_after interval, remaining float8)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', 'rate_wait_wrapper';

COMMENT ON FUNCTION rate_limiter.rate_wait(text, text, float8, interval, rate_limiter.config) IS
'As rate_limit, but a refused call sleeps until retry_after and tries again, until it is admitted or the next try would come after timeout '
'(then it returns ok = false at once, with retry_after, and consumes nothing). While it sleeps it holds no row lock (the refused try is rolled back). '
'Each try first looks (rate_check: no lock, no transaction id) and consumes only when the limit would admit, so waiting uses no subtransaction per refusal. '
'Only the final answer is counted in rate_limiter.stats. '
'Sleeps on the real clock; can be cancelled (57014); statement_timeout applies. '
'Errors: as rate_limit (22004, 42704, 42501, 54000, 22023, 25006 in a read-only transaction); 22004 NULL timeout; 22023 negative timeout.';

-- Statistics (need shared_preload_libraries = 'rate_limiter') ---------------

CREATE FUNCTION rate_limiter._stats()
RETURNS TABLE (name text, calls bigint, admitted bigint, refused bigint, reserved bigint,
               tokens float8, credited float8, near_limit bigint, shadow_refused bigint,
               contended bigint, stats_reset timestamptz, blocked bigint)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'stats_wrapper';

COMMENT ON FUNCTION rate_limiter._stats() IS
'The rows of the view rate_limiter.stats. Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

CREATE VIEW rate_limiter.stats AS SELECT * FROM rate_limiter._stats();

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

CREATE FUNCTION rate_limiter.stats_reset(name text DEFAULT NULL)
RETURNS void
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'stats_reset_wrapper';

COMMENT ON FUNCTION rate_limiter.stats_reset(text) IS
'Zeroes the counters of one row of rate_limiter.stats and sets its stats_reset to now: the row whose name is name as the view shows it, '
'else the row of the limit named name (NULL: every row of this database). '
'Errors: 55000 when rate_limiter is not in shared_preload_libraries.';

-- Housekeeping -----------------------------------------------------------------

CREATE FUNCTION rate_limiter.prune(older_than interval DEFAULT NULL)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'prune_wrapper';

COMMENT ON FUNCTION rate_limiter.prune(interval) IS
'Deletes state rows that change no later answer: rows of a defined limit that are full again and that a missing row would answer for exactly (under the key''s override, if any), rows written under a configuration the key no longer has; '
'and expired overrides and ended blocks whose strikes are forgotten (a NOTICE says how many of each); '
'and, when older_than is given, rows of names without a definition (inline configs) whose ts is older than now - older_than. '
'Rows another transaction holds are skipped. Returns how many rows were deleted (state rows, overrides and blocks). Schedule it with pg_cron. '
'Errors: 22023 negative older_than; 25006 in a read-only transaction.';

-- PostgREST ---------------------------------------------------------------------

CREATE FUNCTION rate_limiter.postgrest_limit(
    name  text,
    key   text   DEFAULT NULL,
    count float8 DEFAULT 1)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $postgrest_limit$
DECLARE
    result record;
    fields jsonb;
    response_headers jsonb;
BEGIN
    IF name IS NULL OR count IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = pg_catalog.format('%s must not be NULL', CASE WHEN name IS NULL THEN 'name' ELSE 'count' END);
    END IF;
    IF pg_catalog.current_setting('transaction_read_only')::boolean THEN
        -- GET and HEAD run read-only: consume nothing, report where the limit stands.
        fields := rate_limiter.http_headers(name, key);
    ELSE
        SELECT * INTO result FROM rate_limiter.rate_limit(name, key, count);
        fields := rate_limiter.http_headers(name, key, result.ok, result.retry_after, result.remaining);
        IF NOT result.ok THEN
            RAISE SQLSTATE 'PGRST' USING
                MESSAGE = pg_catalog.json_build_object(
                    'code', coalesce(nullif(pg_catalog.current_setting('rate_limiter.sqlstate', true), ''), 'RL429'),
                    'message', 'rate limit exceeded',
                    'details', pg_catalog.format('rate limit "%s": try again in %s seconds', name, fields->>'Retry-After'),
                    'hint', NULL)::text,
                DETAIL = pg_catalog.json_build_object(
                    'status', 429,
                    'status_text', 'Too Many Requests',
                    'headers', fields)::text;
        END IF;
    END IF;
    -- PostgREST reads response.headers as a JSON array of one-field
    -- objects; keep what earlier code of the request put there.
    response_headers := coalesce(nullif(pg_catalog.current_setting('response.headers', true), ''), '[]')::jsonb;
    SELECT response_headers || coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(field.key, field.value)), '[]')
      INTO response_headers
      FROM pg_catalog.jsonb_each(fields) AS field;
    PERFORM pg_catalog.set_config('response.headers', response_headers::text, true);
END
$postgrest_limit$;

COMMENT ON FUNCTION rate_limiter.postgrest_limit(text, text, float8) IS
'For PostgREST''s db-pre-request: consumes count tokens of (name, key). Refused: raises SQLSTATE PGRST with MESSAGE {"code","message","details","hint"} and '
'DETAIL {"status":429,"status_text","headers":{RateLimit-Policy, RateLimit, Retry-After}}, so PostgREST answers 429 with those headers. '
'Admitted: appends RateLimit-Policy and RateLimit to the response.headers setting (transaction-local), keeping headers already there. '
'In a read-only transaction (PostgREST''s GET and HEAD) it consumes nothing and only sets the headers. '
'Errors: 22004 NULL name/count; 42704 no definition; 22023 invalid count; 22P02 when response.headers is not JSON.';

-- Internal ----------------------------------------------------------------
-- Used by the definitions trigger (see src/definitions.rs); not granted
-- to anyone (sql/privileges.sql revokes them from PUBLIC).

CREATE FUNCTION rate_limiter._invalidate_definitions(relid oid)
RETURNS void
LANGUAGE c VOLATILE STRICT
AS 'MODULE_PATHNAME', '_invalidate_definitions_wrapper';

COMMENT ON FUNCTION rate_limiter._invalidate_definitions(oid) IS
'Internal: tells every backend to drop its cached definitions (called by the trigger on rate_limiter.definitions).';

CREATE FUNCTION rate_limiter._definitions_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rate_limiter._invalidate_definitions(TG_RELID);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION rate_limiter._definitions_changed() IS
'Internal: statement trigger on rate_limiter.definitions that invalidates cached definitions.';

CREATE TRIGGER definitions_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.definitions
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();

CREATE TRIGGER overrides_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.overrides
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();

CREATE TRIGGER blocks_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limiter.blocks
FOR EACH STATEMENT EXECUTE FUNCTION rate_limiter._definitions_changed();

