-- Keyed concurrency limits with transaction leases: the part of
-- docs/concurrency.md that a distributed install supports too
-- (docs/citus.md, "Concurrency limits"). Run unchanged on one server and,
-- in tests/pg_regress/citus_schedule, on a Citus coordinator and worker,
-- where each key's slots live on the node holding the key's state.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('keyed_exports', rate_limiter.concurrency(2));

-- Two slots per tenant: a third call in the same transaction is refused,
-- another tenant's slots are its own, and status counts what is held.
BEGIN;
SELECT * FROM rate_limiter.acquire('keyed_exports', 'acme');
SELECT * FROM rate_limiter.acquire('keyed_exports', 'acme');
SELECT * FROM rate_limiter.acquire('keyed_exports', 'acme');
SELECT ok FROM rate_limiter.acquire('keyed_exports', 'globex');
SELECT value, capacity, full_at FROM rate_limiter.status('keyed_exports', 'acme');
SELECT value, capacity, full_at FROM rate_limiter.status('keyed_exports', 'globex');
COMMIT;
-- The transaction ended: every slot is free again, nothing written since.
SELECT value, capacity, full_at FROM rate_limiter.status('keyed_exports', 'acme');
SELECT key, shard, value FROM rate_limiter.rate_limits WHERE name = 'keyed_exports' ORDER BY key, shard;

-- A rollback frees them as well; throws => true raises RL429.
BEGIN;
SELECT ok FROM rate_limiter.acquire('keyed_exports', 'acme');
SELECT ok FROM rate_limiter.acquire('keyed_exports', 'acme');
\set VERBOSITY default
SELECT * FROM rate_limiter.acquire('keyed_exports', 'acme', throws => true);
\set VERBOSITY terse
ROLLBACK;
SELECT ok FROM rate_limiter.acquire('keyed_exports', 'acme');

-- Shadow mode: a refusal is answered as admitted, holding nothing.
SELECT rate_limiter.define('keyed_exports', rate_limiter.concurrency(1), enforce => false);
BEGIN;
SELECT * FROM rate_limiter.acquire('keyed_exports', 'acme');
SELECT * FROM rate_limiter.acquire('keyed_exports', 'acme');
COMMIT;

-- guard_slot(): the writing transaction holds its tenant's slot.
SELECT rate_limiter.define('keyed_exports', rate_limiter.concurrency(1));
CREATE TABLE keyed_export_runs (tenant text);
CREATE TRIGGER one_export_per_tenant BEFORE INSERT ON keyed_export_runs
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard_slot('keyed_exports', 'tenant');
BEGIN;
INSERT INTO keyed_export_runs VALUES ('acme'), ('acme'), ('globex');
SELECT ok, in_flight FROM rate_limiter.acquire('keyed_exports', 'acme');
COMMIT;
SELECT ok FROM rate_limiter.acquire('keyed_exports', 'acme');
DROP TABLE keyed_export_runs;

-- Not consumption: the rate-limit calls refuse the name (22023).
SELECT * FROM rate_limiter.rate_limit('keyed_exports', 'acme');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW('keyed_exports', 'acme', 1, NULL)]::rate_limiter.request[]);
\echo :LAST_ERROR_SQLSTATE
-- Statistics: one call per decision, counted on the node called (a
-- refusal in shadow mode in shadow_refused).
SELECT calls, admitted, refused, shadow_refused FROM rate_limiter.stats WHERE name = 'keyed_exports';
SELECT rate_limiter.undefine('keyed_exports');
