-- Consumption is part of the caller's transaction.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('tx', rate_limiter.token_bucket(10, '1 hour'));

-- A rolled-back transaction leaves no consumption behind.
BEGIN;
SELECT remaining FROM rate_limiter.rate_limit('tx', 'a', 4);
ROLLBACK;
SELECT remaining FROM rate_limiter.rate_check('tx', 'a', 0);
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'tx';

-- So does a rolled-back savepoint; the rest of the transaction stays.
BEGIN;
SELECT remaining FROM rate_limiter.rate_limit('tx', 'a', 1);
SAVEPOINT s;
SELECT remaining FROM rate_limiter.rate_limit('tx', 'a', 5);
ROLLBACK TO SAVEPOINT s;
SELECT remaining FROM rate_limiter.rate_limit('tx', 'a', 2);
COMMIT;
SELECT value FROM rate_limiter.rate_limits WHERE name = 'tx' AND key = 'a';

-- A refused call writes nothing: the row is unchanged (same value, ts and
-- tuple version).
SELECT xmin AS xmin_before, value, ts FROM rate_limiter.rate_limits WHERE name = 'tx' AND key = 'a' \gset
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT ok FROM rate_limiter.rate_limit('tx', 'a', 9);
SELECT xmin = :'xmin_before' AS untouched, value, ts FROM rate_limiter.rate_limits WHERE name = 'tx' AND key = 'a';
-- rate_check writes nothing, takes no lock, and works read-only.
SELECT ok, remaining FROM rate_limiter.rate_check('tx', 'z', 3);
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'tx' AND key = 'z';
BEGIN READ ONLY;
SELECT ok, remaining FROM rate_limiter.rate_check('tx', 'a', 1);
SELECT * FROM rate_limiter.rate_limit('tx', 'a', 1);
ROLLBACK;

-- rate_limit takes a row-exclusive lock on the table and locks the row
-- until the transaction ends; rate_check takes only the plain read lock.
-- (Listed without RowShareLock, which conflicts with no more than
-- RowExclusiveLock does: the portable edition (docs/guarantees.md,
-- "Portable edition") takes it too, as its SELECT ... FOR UPDATE does.)
BEGIN;
SELECT ok FROM rate_limiter.rate_check('tx', 'a', 0);
SELECT mode FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'rate_limiter.rate_limits'::regclass AND mode <> 'RowShareLock' ORDER BY mode;
SELECT ok FROM rate_limiter.rate_limit('tx', 'a', 0);
SELECT mode FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'rate_limiter.rate_limits'::regclass AND mode <> 'RowShareLock' ORDER BY mode;
COMMIT;
