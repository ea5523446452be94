-- Shadow mode (define(..., enforce => false)): a limit decides and writes
-- its state exactly as an enforcing limit would (a refused decision
-- consumes nothing), but every call answers ok = true with retry_after
-- NULL and never raises; the refusals are counted in rate_limiter.stats
-- (shadow_refused). Switching between enforce and shadow keeps the state.
SET timezone = 'UTC';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('shadow_new', rate_limiter.token_bucket(2, '1 hour'), enforce => false);
SELECT rate_limiter.define('shadow_twin', rate_limiter.token_bucket(2, '1 hour'));
SELECT name, enforce FROM rate_limiter.definitions WHERE name LIKE 'shadow%' ORDER BY name;

-- The same calls on both: the twin enforces, the shadow limit answers as
-- admitted. remaining is the same: the limit's own.
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_new', 'k');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_twin', 'k');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_new', 'k');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_twin', 'k');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_new', 'k');
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_twin', 'k');
-- rate_check answers as rate_limit would.
SELECT ok, retry_after FROM rate_limiter.rate_check('shadow_new', 'k');
-- Both stored the same state.
SELECT name, key, value, ts FROM rate_limiter.rate_limits WHERE name LIKE 'shadow%' ORDER BY name;

-- throws => true never raises in shadow mode.
SELECT ok, retry_after FROM rate_limiter.rate_limit('shadow_new', 'k', throws => true);
SELECT ok FROM rate_limiter.rate_limit('shadow_twin', 'k', throws => true);
\echo :LAST_ERROR_SQLSTATE
-- Reservations: the shadow limit reserves as the twin would.
SELECT rate_limiter.define('shadow_debt', rate_limiter.token_bucket(2, '1 hour', max_reserved => 1), enforce => false);
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_debt', 'k', 3, reserve => true);
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('shadow_debt', 'k', 1, reserve => true);

-- rate_limit_all: a shadow refusal does not fail the call; the enforcing
-- request is consumed, the shadow-refused one consumes nothing.
SELECT rate_limiter.define('shadow_all', rate_limiter.token_bucket(5, '1 hour'));
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('shadow_all', 'k', 1, NULL), ('shadow_new', 'k', 1, NULL)]::rate_limiter.request[], throws => true);
SELECT name, value FROM rate_limiter.rate_limits WHERE name IN ('shadow_all', 'shadow_new') ORDER BY name;
-- An enforced refusal still fails it (nothing consumed).
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[
    ('shadow_all', 'k', 1, NULL), ('shadow_twin', 'k', 1, NULL)]::rate_limiter.request[]);
SELECT name, value FROM rate_limiter.rate_limits WHERE name = 'shadow_all';

-- rate_wait answers at once.
SELECT ok, retry_after FROM rate_limiter.rate_wait('shadow_new', 'k', timeout => '0');

-- guard(): the insert goes through.
CREATE TABLE shadow_signups (email text);
CREATE TRIGGER guard BEFORE INSERT ON shadow_signups
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('shadow_new');
INSERT INTO shadow_signups VALUES ('a@example.com'), ('b@example.com'), ('c@example.com');
SELECT count(*) FROM shadow_signups;

-- postgrest_limit(): no 429; the headers say what the limit says.
BEGIN;
SELECT rate_limiter.postgrest_limit('shadow_new', 'k');
SELECT current_setting('response.headers')::jsonb;
COMMIT;

-- Switching to enforce keeps the state: the limit is empty and now refuses.
SELECT rate_limiter.define('shadow_new', rate_limiter.token_bucket(2, '1 hour'));
SELECT name, key, value FROM rate_limiter.rate_limits WHERE name = 'shadow_new' ORDER BY key;
SELECT ok, retry_after FROM rate_limiter.rate_limit('shadow_new', 'k');
-- And back.
SELECT rate_limiter.define('shadow_new', rate_limiter.token_bucket(2, '1 hour'), enforce => false);
SELECT ok, retry_after FROM rate_limiter.rate_limit('shadow_new', 'k');

-- (What statistics counted of these calls: shadow_stats.sql, which runs next.)

SELECT rate_limiter.define('shadow_new', rate_limiter.token_bucket(2, '1 hour'), enforce => NULL);

DROP TABLE shadow_signups;
SELECT rate_limiter.rate_reset(name) FROM (VALUES ('shadow_new'), ('shadow_twin'), ('shadow_debt'), ('shadow_all')) AS l(name);
SELECT rate_limiter.undefine(name) FROM (VALUES ('shadow_new'), ('shadow_twin'), ('shadow_debt'), ('shadow_all')) AS l(name);
