-- Per-key overrides and plans (docs/overrides.md): one key of a defined
-- limit gets its own config, or another definition's (its plan), until
-- expires_at. Precedence: inline config > unexpired override > definition.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

-- Plans are plain definitions; the limit every call names is 'api'.
SELECT rate_limiter.define('api', rate_limiter.fixed_window(100, '1 minute', start => '2026-01-01'));
SELECT rate_limiter.define('api_pro', rate_limiter.fixed_window(1000, '1 minute', start => '2026-01-01'));
SELECT rate_limiter.override('api', 'acme', plan => 'api_pro');
SELECT name, key, plan, kind, rate, expires_at FROM rate_limiter.overrides;
-- acme has 1,000 a minute, everyone else 100.
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme', 150);
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'globex', 100);
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'globex');

-- Removing it keeps acme's state, capped at the definition's capacity
-- (same kind, period and shards: as define() does): the 850 tokens left
-- become 100, so 100 more are admitted in this window, then none.
SELECT rate_limiter.remove_override('api', 'acme');
SELECT rate_limiter.remove_override('api', 'acme');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme', 100);
SELECT ok, remaining, retry_after FROM rate_limiter.rate_limit('api', 'acme');

-- Back on the plan: 0 left in this window under either (the same row).
SELECT rate_limiter.override('api', 'acme', plan => 'api_pro');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme', 0);
-- Redefining the plan changes every key on it at its next call: its rate
-- (carries on) ...
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT rate_limiter.define('api_pro', rate_limiter.fixed_window(2000, '1 minute', start => '2026-01-01'));
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme', 500);
-- ... or its kind: the key starts full under the new kind.
SELECT rate_limiter.define('api_pro', rate_limiter.token_bucket(10, '1 second'));
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme', 9);
SELECT ok, remaining, retry_after FROM rate_limiter.rate_limit('api', 'acme');
-- The row says which configuration wrote it: NULL is the definition's.
SELECT key, value, regime IS NOT NULL AS other_regime FROM rate_limiter.rate_limits
WHERE name = 'api' ORDER BY key;

-- A config of its own, for a week: a change of kind starts the key full;
-- from expires_at on the definition applies, and since the kind changes
-- back the key starts full again.
SELECT rate_limiter.override('api', 'globex',
    config => rate_limiter.token_bucket(5, '1 second'),
    expires_at => '2026-01-08 00:01:00+00');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'globex', 5);
SELECT ok, remaining, retry_after FROM rate_limiter.rate_limit('api', 'globex');
SET rate_limiter.now_override = '2026-01-08 00:00:59.999999+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'globex', 5);
SELECT ok, remaining, retry_after FROM rate_limiter.rate_limit('api', 'globex');
SET rate_limiter.now_override = '2026-01-08 00:01:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'globex');

-- A boost of the same kind and period carries the state on, both ways:
-- 60 of 100 used leaves 40 tokens, which the boost keeps (a fixed window
-- grants its larger rate at its next window); when the boost ends, the
-- tokens left are capped at 100.
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'initech', 60);
SELECT rate_limiter.override('api', 'initech',
    config => rate_limiter.fixed_window(1000, '1 minute', start => '2026-01-01'),
    expires_at => '2026-01-08 00:02:30+00');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'initech', 0);
SET rate_limiter.now_override = '2026-01-08 00:02:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'initech', 600);
SET rate_limiter.now_override = '2026-01-08 00:02:29.999999+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'initech', 0);
SET rate_limiter.now_override = '2026-01-08 00:02:30+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'initech', 0);

-- Precedence: an inline config (a managing role's) wins over the override.
SELECT ok, remaining FROM rate_limiter.rate_check('api', 'acme', config => rate_limiter.token_bucket(3, '1 hour'));
SELECT ok, remaining FROM rate_limiter.rate_check('api', 'acme');

-- Everything that reads a configuration reads the key's.
SET rate_limiter.now_override = '2026-01-09 00:00:00+00';
SELECT rate_limiter.override('api', 'hooli', config => rate_limiter.token_bucket(4, '1 hour', shards => 2));
SELECT * FROM rate_limiter.status('api', 'hooli');
SELECT * FROM rate_limiter.status('api', 'globex');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'hooli', 2);
SELECT * FROM rate_limiter.rate_check('api', 'hooli');
SELECT * FROM rate_limiter.rate_credit('api', 'hooli', 1);
SELECT * FROM rate_limiter.rate_wait('api', 'hooli', 1, '0');
SELECT * FROM rate_limiter.http_headers('api', 'hooli');
SELECT * FROM rate_limiter.http_headers('api', 'globex');
SELECT ok, remaining FROM rate_limiter.rate_limit_all(ARRAY[
    ROW('api', 'hooli', 1, NULL)::rate_limiter.request,
    ROW('api', 'globex', 1, NULL)::rate_limiter.request]);
SELECT ok, remaining FROM rate_limiter.rate_limit_all(ARRAY[
    ROW('api', 'hooli', 1, NULL)::rate_limiter.request]);
SELECT * FROM rate_limiter.rate_limit('api', 'hooli', throws => true);
\echo :LAST_ERROR_SQLSTATE

-- A trigger and PostgREST's pre-request read the key's too.
CREATE TABLE ov_uploads (owner text, bytes int);
CREATE TRIGGER ov_uploads_limit BEFORE INSERT ON ov_uploads
FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('api', 'owner');
INSERT INTO ov_uploads VALUES ('hooli', 1);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO ov_uploads VALUES ('globex', 1);
SELECT count(*) FROM ov_uploads;
DROP TABLE ov_uploads;
SELECT rate_limiter.postgrest_limit('api', 'hooli');
\echo :LAST_ERROR_SQLSTATE

-- Shadow mode per key: enforce => false answers admitted and counts the
-- refusal as shadow_refused, under the limit's name.
SELECT rate_limiter.override('api', 'hooli', config => rate_limiter.token_bucket(4, '1 hour', shards => 2), enforce => false);
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'hooli', 1);
SELECT ok FROM rate_limiter.rate_limit('api', 'hooli', 1);
SELECT enforce FROM rate_limiter.overrides WHERE key = 'hooli';
-- enforce NULL takes the plan's: a plan in shadow mode answers admitted
-- for the keys on it, and an override's own enforce wins over the plan's.
SELECT rate_limiter.define('api_trial', rate_limiter.token_bucket(1, '1 hour'), enforce => false);
SELECT rate_limiter.override('api', 'trial', plan => 'api_trial');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'trial');
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'trial');
SELECT rate_limiter.override('api', 'trial', plan => 'api_trial', enforce => true);
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'trial');
SELECT rate_limiter.remove_override('api', 'trial');
SELECT rate_limiter.undefine('api_trial');

-- Bad input writes nothing.
SELECT rate_limiter.override(NULL, 'k', plan => 'api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('api', NULL, plan => 'api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('nope', 'k', plan => 'api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('api', 'k', plan => 'nope');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('api', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('api', 'k', config => rate_limiter.token_bucket(1, '1 second'), plan => 'api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('api', 'k', plan => 'api');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.override('api', 'k', config => ROW('token bucket', -1, '1 second', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.remove_override('api', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.remove_override('nope', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM rate_limiter.overrides WHERE key = 'k';

-- A plan in use cannot be undefined; undefining the limit removes its
-- overrides.
SELECT rate_limiter.undefine('api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.define('other', rate_limiter.token_bucket(1, '1 second'));
SELECT rate_limiter.override('other', 'x', plan => 'api');
SELECT rate_limiter.undefine('other');
SELECT count(*) FROM rate_limiter.overrides WHERE name = 'other';

-- prune: expired overrides go (a NOTICE says how many), and so do rows
-- written under a configuration their key no longer has (acme's, once
-- its plan is removed: 5 of 10 tokens left, not full, yet it goes).
SELECT ok, remaining FROM rate_limiter.rate_limit('api', 'acme', 5);
SELECT rate_limiter.remove_override('api', 'acme');
SELECT key, expires_at FROM rate_limiter.overrides ORDER BY key;
SELECT count(*) FROM rate_limiter.rate_limits WHERE regime IS NOT NULL;
-- (Its count includes the full rows other tests of the schedule left.)
SELECT rate_limiter.prune() >= 2 + 2 AS pruned;
SELECT key FROM rate_limiter.overrides ORDER BY key;
SELECT key, regime IS NOT NULL AS other_regime FROM rate_limiter.rate_limits
WHERE name = 'api' ORDER BY key;

-- Privileges: only a role that may call define() manages overrides
-- (42501, nothing written), and no other role reads the table.
SET client_min_messages = warning;
DROP ROLE IF EXISTS rl_ov_app;
RESET client_min_messages;
CREATE ROLE rl_ov_app;
GRANT USAGE ON SCHEMA rate_limiter TO rl_ov_app;
GRANT EXECUTE ON FUNCTION rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config) TO rl_ov_app;
SET ROLE rl_ov_app;
SELECT rate_limiter.override('api', 'mine', plan => 'api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.remove_override('api', 'hooli');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rate_limiter.overrides;
\echo :LAST_ERROR_SQLSTATE
SELECT ok FROM rate_limiter.rate_limit('api', 'hooli');
RESET ROLE;
-- EXECUTE granted on override() alone is not enough.
GRANT EXECUTE ON FUNCTION rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean),
    rate_limiter.remove_override(text, text) TO rl_ov_app;
SET ROLE rl_ov_app;
SELECT rate_limiter.override('api', 'mine', plan => 'api_pro');
\echo :LAST_ERROR_SQLSTATE
SELECT rate_limiter.remove_override('api', 'hooli');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT key FROM rate_limiter.overrides ORDER BY key;
REVOKE ALL ON FUNCTION rate_limiter.override(text, text, rate_limiter.config, text, timestamptz, boolean),
    rate_limiter.remove_override(text, text),
    rate_limiter.rate_limit(text, text, float8, boolean, boolean, rate_limiter.config) FROM rl_ov_app;
REVOKE USAGE ON SCHEMA rate_limiter FROM rl_ov_app;
DROP ROLE rl_ov_app;


SELECT rate_limiter.remove_override('api', key) FROM rate_limiter.overrides WHERE name = 'api' ORDER BY key;
SELECT rate_limiter.undefine('api');
SELECT rate_limiter.undefine('api_pro');
SELECT rate_limiter.rate_reset('api', NULL);
DELETE FROM rate_limiter.rate_limits WHERE name = 'api';
