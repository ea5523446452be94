-- The portable edition (docs/guarantees.md, "Portable edition"):
-- settings. Without C code the extension cannot define its settings, so
-- rate_limiter.* are placeholder settings, which any role can SET. So:
--
-- * rate_limiter.now_override and rate_limiter.random_seed take effect
--   only in a session whose login role is a member of the extension's
--   owner (the owner of rate_limiter.rate_limits); in any other session a
--   call with either set is 42501.
-- * rate_limiter.max_requests and rate_limiter.max_inline_shards: the
--   session's value counts only for such a role (or one granted SET on
--   the parameter); for any other role they are read from the per-role
--   and per-database settings (ALTER ROLE / ALTER DATABASE ... SET, which
--   for a placeholder only a superuser may run), with PostgreSQL's
--   precedence: its SET cannot raise them.
-- * rate_limiter.sqlstate is checked when a refusal raises (SET cannot be
--   refused without C code): a value the native extension would refuse is
--   then 22023, with the native message; empty or blank (what RESET,
--   RESET ALL and DISCARD ALL leave in a placeholder) is the default.

-- The role a call runs for: the session's current role.
CREATE FUNCTION rate_limiter._invoker()
RETURNS name
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') IN ('none', '') THEN session_user
                ELSE pg_catalog.current_setting('role')::name END
$$;

-- Whether the call is provably not made from inside another role's
-- function: the native extension checks an inline config for a defined
-- name against current_user, the role a SECURITY DEFINER caller runs as,
-- which these functions (SECURITY DEFINER themselves) cannot see. So the
-- call stack (PG_CONTEXT) must hold nothing but rate_limiter's own
-- PL/pgSQL functions, and, outermost, at most a DO block (which runs as
-- the session's role): the last line, the outermost frame, is one of them,
-- and no line names another function. Any other caller (a function of
-- any role, SECURITY DEFINER or not, a trigger, a procedure, a SQL
-- function, an SPI call from another language) is on the stack, and the
-- answer is false. Only ever called on the way to a 42501 decision.
CREATE FUNCTION rate_limiter._called_directly()
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $called_directly$
DECLARE
    stack text;
    frames text[];
    -- ("line 12 at assignment", "during statement block local variable
    -- initialization", ...: never a double quote, which ends the text of
    -- a statement another language ran.)
    own constant text := '^PL/pgSQL function rate_limiter\.[a-z0-9_]+\([a-z0-9_ .,\[\]]*\)( [A-Za-z0-9 '']+)?$';
    do_block constant text := '^PL/pgSQL function inline_code_block( [A-Za-z0-9 '']+)?$';
BEGIN
    GET DIAGNOSTICS stack = PG_CONTEXT;
    frames := pg_catalog.string_to_array(stack, E'\n');
    IF frames IS NULL OR pg_catalog.cardinality(frames) = 0
       OR NOT (frames[pg_catalog.cardinality(frames)] ~ own OR frames[pg_catalog.cardinality(frames)] ~ do_block) THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (
        SELECT FROM pg_catalog.unnest(frames) AS frame
        WHERE frame ~ '^(PL/[A-Za-z0-9]+|SQL) function ' AND frame !~ own AND frame !~ do_block);
END
$called_directly$;

-- Whether the session may move the clock, seed the choice of shards or
-- raise a bound: its login role (session_user) is a member of the
-- extension's owner (a superuser is). The login role, because a SET ROLE
-- is no boundary for the session that made it (RESET ROLE undoes it): a
-- superuser's session that SET ROLE to an application role keeps its
-- clock, as a superuser's SET does in the native extension, and a session
-- that logged in as an application role never may.
CREATE FUNCTION rate_limiter._may_override()
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.pg_has_role(session_user, c.relowner, 'MEMBER')
    FROM pg_catalog.pg_class AS c WHERE c.oid = 'rate_limiter.rate_limits'::pg_catalog.regclass
$$;

-- The current time in microseconds since 2000-01-01: the real clock
-- (clock_timestamp()), or rate_limiter.now_override when set (by a role
-- that may: 42501 otherwise; 22023 for a value that is not a finite
-- timestamptz, as the native extension refuses it when it is set).
CREATE FUNCTION rate_limiter._now()
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $now$
DECLARE
    override text := pg_catalog.current_setting('rate_limiter.now_override', true);
    at timestamptz;
BEGIN
    IF override IS NULL OR pg_catalog.btrim(override) = '' THEN
        RETURN rate_limiter._micros(pg_catalog.clock_timestamp());
    END IF;
    IF NOT rate_limiter._may_override() THEN
        RAISE EXCEPTION 'permission denied to set rate_limiter.now_override'
            USING ERRCODE = '42501',
                  HINT = 'Only a member of the role that owns rate_limiter''s tables may replace the clock: RESET rate_limiter.now_override.';
    END IF;
    BEGIN
        at := override::timestamptz;
    EXCEPTION WHEN OTHERS THEN
        at := NULL;
    END;
    IF at IS NULL OR NOT pg_catalog.isfinite(at) THEN
        RAISE EXCEPTION 'invalid value for parameter "rate_limiter.now_override": "%"', override
            USING ERRCODE = '22023',
                  DETAIL = 'rate_limiter.now_override must be a finite timestamptz literal, or empty for the real clock.';
    END IF;
    RETURN rate_limiter._micros(at);
END
$now$;

-- rate_limiter.lock_free_refusals (docs/guarantees.md, "Concurrency and
-- exactness": refusals never wait): whether a consuming call first decides on
-- the committed state, without a lock, and answers a refusal from it. On
-- unless set; a value that is not a boolean is 22023 (with the message of the
-- native extension's SET); turning it off is for a member of the role that
-- owns rate_limiter's tables (a superuser setting in the native extension),
-- 42501 for any other role.
CREATE FUNCTION rate_limiter._lock_free()
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $lock_free$
DECLARE
    chosen text := pg_catalog.current_setting('rate_limiter.lock_free_refusals', true);
    lock_free boolean;
BEGIN
    IF chosen IS NULL OR pg_catalog.btrim(chosen) = '' THEN
        RETURN true;
    END IF;
    BEGIN
        lock_free := chosen::boolean;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'parameter "rate_limiter.lock_free_refusals" requires a Boolean value'
            USING ERRCODE = '22023';
    END;
    IF NOT lock_free AND NOT rate_limiter._may_override() THEN
        RAISE EXCEPTION 'permission denied to set rate_limiter.lock_free_refusals'
            USING ERRCODE = '42501',
                  HINT = 'Only a member of the role that owns rate_limiter''s tables may turn it off: RESET rate_limiter.lock_free_refusals.';
    END IF;
    RETURN lock_free;
END
$lock_free$;

-- The SQLSTATE of a refusal raised with throws => true:
-- rate_limiter.sqlstate, default RL429, checked as the native extension
-- checks it when it is set (22023 otherwise). Empty (or only blanks) is
-- the default: a placeholder setting reads '' after RESET, RESET ALL or
-- DISCARD ALL, where the native setting returns to RL429.
CREATE FUNCTION rate_limiter._sqlstate()
RETURNS text
LANGUAGE plpgsql STABLE
AS $sqlstate$
DECLARE
    chosen text := pg_catalog.current_setting('rate_limiter.sqlstate', true);
BEGIN
    IF chosen IS NULL OR pg_catalog.btrim(chosen) = '' THEN
        RETURN 'RL429';
    END IF;
    IF chosen !~ '^[0-9A-Z]{5}$'
       OR pg_catalog.left(chosen, 2) IN ('00', '01', '02', '08', '25', '40', '53', '57', '58', 'XX') THEN
        RAISE EXCEPTION 'invalid value for parameter "rate_limiter.sqlstate": "%"', chosen
            USING ERRCODE = '22023',
                  DETAIL = 'rate_limiter.sqlstate must be five characters of 0-9 and A-Z, e.g. RL429 or PT429, and not of a class that means success, a warning, no data, or an error clients retry or treat as fatal (00, 01, 02, 08, 25, 40, 53, 57, 58, XX).';
    END IF;
    RETURN chosen;
END
$sqlstate$;

-- A bound (rate_limiter.max_requests, rate_limiter.max_inline_shards):
-- for a member of the role that owns rate_limiter's tables (as a
-- superuser's SET in the native extension), or a login role a superuser
-- granted SET on the parameter (GRANT SET ON PARAMETER: it may SET the
-- native setting too), the session's value. For any other login role, the
-- values stored in pg_db_role_setting, with PostgreSQL's precedence: ALTER
-- ROLE that IN DATABASE this ... SET, then ALTER ROLE that SET, then ALTER
-- DATABASE this SET, then ALTER ROLE ALL SET; never the session's (its SET
-- or a connection option cannot raise it). Since PostgreSQL 15 only a
-- superuser, or a role granted SET on the parameter, can store a value of
-- a placeholder setting there (a database owner or the role itself gets
-- 42501), so these values are the ones an administrator chose, as the
-- native extension applies them at login. The role is the login role
-- (session_user), whose settings PostgreSQL applies. Else the default.
CREATE FUNCTION rate_limiter._bound(setting text, fallback int)
RETURNS int
LANGUAGE plpgsql STABLE
AS $bound$
DECLARE
    chosen text;
BEGIN
    -- (The privilege first: a superuser's answer needs no catalog read.)
    IF pg_catalog.has_parameter_privilege(session_user, setting, 'SET') OR rate_limiter._may_override() THEN
        chosen := pg_catalog.current_setting(setting, true);
    ELSE
        SELECT pg_catalog.substr(config, pg_catalog.length(setting) + 2) INTO chosen
        FROM pg_catalog.pg_db_role_setting AS s, pg_catalog.unnest(s.setconfig) AS config
        WHERE s.setdatabase IN (0, (SELECT d.oid FROM pg_catalog.pg_database AS d
                                    WHERE d.datname = pg_catalog.current_database()))
          AND s.setrole IN (0, (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user))
          AND config LIKE setting || '=%'
        ORDER BY s.setrole <> 0 DESC, s.setdatabase <> 0 DESC
        LIMIT 1;
    END IF;
    IF chosen IS NULL OR pg_catalog.btrim(chosen) = '' THEN
        RETURN fallback;
    END IF;
    IF pg_catalog.btrim(chosen) !~ '^[+]?[0-9]{1,9}$' OR pg_catalog.btrim(chosen)::int < 1 THEN
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting, chosen
            USING ERRCODE = '22023', DETAIL = pg_catalog.format('%s must be a positive integer.', setting);
    END IF;
    RETURN pg_catalog.btrim(chosen)::int;
END
$bound$;

-- The next three random numbers (0 to 2^32 - 1) of a shard order: from
-- random(), or, while rate_limiter.random_seed is set (by a role that
-- may: 42501 otherwise), from SplitMix64 seeded with it, as the native
-- extension draws them (src/shard_choice.rs). The sequence's state is
-- kept in the session setting rate_limiter_portable.random_state (not
-- under rate_limiter., a prefix the native library reserves where it is
-- loaded); setting the seed
-- again starts the sequence again: after a draw the seed setting is
-- written back with a space after it (the same seed), so that a SET of
-- the seed, which has none, is told apart.
CREATE FUNCTION rate_limiter._draw()
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $draw$
DECLARE
    seed text := pg_catalog.current_setting('rate_limiter.random_seed', true);
    kept text := pg_catalog.current_setting('rate_limiter_portable.random_state', true);
    state bigint;
    step record;
    numbers bigint[] := ARRAY[]::bigint[];
BEGIN
    IF seed IS NULL OR pg_catalog.btrim(seed) = '' THEN
        RETURN ARRAY[pg_catalog.floor(pg_catalog.random() * 4294967296)::bigint,
                     pg_catalog.floor(pg_catalog.random() * 4294967296)::bigint,
                     pg_catalog.floor(pg_catalog.random() * 4294967296)::bigint];
    END IF;
    IF NOT rate_limiter._may_override() THEN
        RAISE EXCEPTION 'permission denied to set rate_limiter.random_seed'
            USING ERRCODE = '42501',
                  HINT = 'Only a member of the role that owns rate_limiter''s tables may seed the choice of shards: RESET rate_limiter.random_seed.';
    END IF;
    IF pg_catalog.btrim(seed) !~ '^[+-]?[0-9]+$' THEN
        RAISE EXCEPTION 'invalid value for parameter "rate_limiter.random_seed": "%"', seed
            USING ERRCODE = '22023',
                  DETAIL = 'rate_limiter.random_seed must be an integer (a 64-bit seed), or empty for real randomness.';
    END IF;
    IF kept IS NOT NULL AND seed = pg_catalog.btrim(seed) || ' '
       AND pg_catalog.split_part(kept, ':', 1) = pg_catalog.btrim(seed) THEN
        state := pg_catalog.split_part(kept, ':', 2)::bigint;
    ELSE
        state := pg_catalog.btrim(seed)::bigint;
    END IF;
    FOR i IN 1..3 LOOP
        step := rate_limiter._splitmix64(state);
        state := step.next_state;
        numbers := numbers || rate_limiter._shr64(step.number, 32);
    END LOOP;
    PERFORM pg_catalog.set_config('rate_limiter_portable.random_state', pg_catalog.btrim(seed) || ':' || state, false);
    PERFORM pg_catalog.set_config('rate_limiter.random_seed', pg_catalog.btrim(seed) || ' ', false);
    RETURN numbers;
END
$draw$;
