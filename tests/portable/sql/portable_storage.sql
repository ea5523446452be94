-- The portable edition (docs/guarantees.md, "Portable edition") in place of
-- storage.sql, which tests the native extension's direct writes (and how
-- they fail closed on a table altered in ways they could not honour). The
-- portable edition writes the state with ordinary statements (SELECT ...
-- FOR UPDATE, UPDATE, INSERT ... ON CONFLICT), so PostgreSQL itself applies
-- whatever the table carries: triggers fire (a trigger function runs with
-- the calls' search_path, pg_catalog and pg_temp, so it names its tables
-- with their schema), CHECK constraints are checked, user indexes are
-- maintained, and row-level security applies when it binds the owner (FORCE
-- ROW LEVEL SECURITY, an owner that is not superuser). Each alteration is
-- made, a call tried, and everything rolled back.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('store', rate_limiter.token_bucket(10, '1 minute'));

-- A trigger fires, for the insert of a new row and for the update.
CREATE TABLE store_audit (name text, key text, value float8);
CREATE FUNCTION store_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.store_audit VALUES (NEW.name, NEW.key, NEW.value);
    RETURN NEW;
END
$$;
BEGIN;
CREATE TRIGGER audit BEFORE INSERT OR UPDATE ON rate_limiter.rate_limits
    FOR EACH ROW EXECUTE FUNCTION store_audit();
SELECT ok, remaining FROM rate_limiter.rate_limit('store', 'a', 3);
SELECT ok, remaining FROM rate_limiter.rate_limit('store', 'a', 2);
SELECT * FROM store_audit ORDER BY value DESC;
ROLLBACK;

-- A CHECK constraint is checked: a state it refuses is its error (23514),
-- and nothing is written.
BEGIN;
ALTER TABLE rate_limiter.rate_limits ADD CHECK (value <= 5) NOT VALID;
SELECT ok FROM rate_limiter.rate_limit('store', 'b', 1);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'store' AND key = 'b';

-- A user's index is maintained.
BEGIN;
CREATE INDEX store_by_value ON rate_limiter.rate_limits (value);
SELECT ok FROM rate_limiter.rate_limit('store', 'c', 4);
SET LOCAL enable_seqscan = off;
SELECT name, key, value FROM rate_limiter.rate_limits WHERE value = 6;
ROLLBACK;

SELECT rate_limiter.undefine('store');
DROP TABLE store_audit;
DROP FUNCTION store_audit();
