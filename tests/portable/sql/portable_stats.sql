-- The portable edition (docs/guarantees.md, "Portable edition") in place of
-- stats.sql: it has no statistics (they live in shared memory, which only a
-- native extension loaded with shared_preload_libraries can have). The view
-- and functions exist and raise 0A000 with a hint naming the native
-- extension; the Citus functions likewise.
\set VERBOSITY default
SELECT * FROM rate_limiter.stats;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.stats_info;
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.stats_reset();
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.stats_reset('x');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.distribute();
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.undistribute();
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.prepare_node('localhost');
\echo :LAST_ERROR_SQLSTATE
-- Calls work as ever: nothing counts them.
SELECT ok FROM rate_limiter.rate_limit('portable_stats', config => rate_limiter.token_bucket(1, '1 minute'));
