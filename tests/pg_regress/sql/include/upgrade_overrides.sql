-- Included by upgrade.sql with :version set: installs that released
-- version, uses it, updates, and gives a key an override on the updated
-- database (whose state rows all have a NULL regime: the definition's),
-- then uses a sliding and a calendar window there, and a composite of
-- them.
CREATE EXTENSION rate_limiter VERSION :'version';
SELECT rate_limiter.define('plain', rate_limiter.token_bucket(10, '1 minute'));
SELECT ok, remaining FROM rate_limiter.rate_limit('plain', 'acme', 4);
ALTER EXTENSION rate_limiter UPDATE;
SELECT extversion = (SELECT default_version FROM pg_available_extensions WHERE name = 'rate_limiter') AS updated
FROM pg_extension WHERE extname = 'rate_limiter';
SELECT count(*) FILTER (WHERE regime IS NULL) AS kept_rows FROM rate_limiter.rate_limits;
SELECT rate_limiter.define('plain_pro', rate_limiter.token_bucket(100, '1 minute'));
SELECT rate_limiter.override('plain', 'acme', plan => 'plain_pro');
-- (The same kind and period: its 6 tokens carry over, under the plan's rate.)
SELECT ok, remaining FROM rate_limiter.rate_limit('plain', 'acme', 6);
SELECT rate_limiter.override('plain', 'acme', config => rate_limiter.fixed_window(3, '1 hour'));
SELECT ok, remaining FROM rate_limiter.rate_limit('plain', 'acme');
SELECT ok, remaining FROM rate_limiter.rate_limit('plain', 'globex');
-- The limit shapes of the updated version (docs/shapes.md): the kinds and
-- the config's time_zone the update added.
SELECT rate_limiter.define('rolling', rate_limiter.sliding_window(5, '1 minute', start => '2026-01-01'));
SELECT rate_limiter.define('monthly', rate_limiter.calendar_window(5, 'month', 'America/New_York'));
SELECT ok, remaining FROM rate_limiter.rate_limit('rolling', 'acme', 2);
SELECT ok, remaining FROM rate_limiter.rate_limit('monthly', 'acme', 2);
SELECT name, kind, time_zone FROM rate_limiter.definitions WHERE name IN ('rolling', 'monthly') ORDER BY name;
-- And a composite of them (docs/composites.md), the table the update added.
SELECT rate_limiter.define_all('rolling_monthly', ARRAY['rolling', 'monthly']);
SELECT ok, remaining FROM rate_limiter.rate_limit('rolling_monthly', 'acme', 3);
SELECT ok, remaining FROM rate_limiter.rate_limit('rolling_monthly', 'acme', 1);
SELECT rate_limiter.undefine('rolling_monthly');
DROP EXTENSION rate_limiter;
