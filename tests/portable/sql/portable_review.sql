-- The portable edition's answers where a placeholder setting, a SECURITY
-- DEFINER caller, a per-role setting or a snapshot could make it answer
-- otherwise than the native extension (README.md, "Managed PostgreSQL":
-- what differs, and nothing else).
SET timezone = 'UTC';
SET datestyle = 'ISO';
SELECT current_database() AS database \gset
SELECT rate_limiter.define('review', rate_limiter.token_bucket(1, '1 hour'));
-- (The clock is real here: RESET ALL resets it. Errors show only their
-- SQLSTATE.)
\set VERBOSITY sqlstate

-- rate_limiter.sqlstate after RESET, RESET ALL or DISCARD ALL reads ''
-- (a placeholder's reset value): that is the default, RL429, as the
-- native setting returns to it; so is a value of only blanks.
SELECT ok FROM rate_limiter.rate_limit('review', 'sqlstate');
SET rate_limiter.sqlstate = 'PT429';
RESET rate_limiter.sqlstate;
SELECT ok FROM rate_limiter.rate_limit('review', 'sqlstate', throws => true);
SET rate_limiter.sqlstate = 'PT429';
RESET ALL;
SELECT ok FROM rate_limiter.rate_check('review', 'sqlstate', throws => true);
SET rate_limiter.sqlstate = 'PT429';
DISCARD ALL;
SELECT count(*) FROM rate_limiter.rate_limit_all(ARRAY[('review', 'sqlstate', 1, NULL)::rate_limiter.request], throws => true);
SET rate_limiter.sqlstate = '   ';
SELECT ok FROM rate_limiter.rate_limit('review', 'sqlstate', throws => true);
RESET ALL;
\set VERBOSITY default
SET timezone = 'UTC';
SET datestyle = 'ISO';
