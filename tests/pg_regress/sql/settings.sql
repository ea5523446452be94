-- The native extension's settings (docs/guarantees.md, "Input and
-- errors"): a SET is checked when it is made, so a bad value, a misspelled
-- name of the rate_limiter prefix, or a superuser setting SET by another
-- role is an error at once. (The portable edition, docs/guarantees.md,
-- "Portable edition", has no C code to check a SET: it refuses such values
-- when a call would use them, tests/portable/sql/portable_settings.sql; so
-- this test is not in its schedule.)
SET timezone = 'UTC';
SET datestyle = 'ISO';
\set VERBOSITY terse
-- rate_limiter.sqlstate: five characters of 0-9A-Z, not of a class that
-- means success, a warning, no data, or an error clients retry or treat as
-- fatal.
SHOW rate_limiter.sqlstate;

-- Only five characters of 0-9A-Z outside class 00 are accepted.
SET rate_limiter.sqlstate = 'rl429';
SET rate_limiter.sqlstate = 'RL42';
SET rate_limiter.sqlstate = 'RL4290';
SET rate_limiter.sqlstate = '00000';
SET rate_limiter.sqlstate = 'R-429';
SET rate_limiter.sqlstate = '';
SHOW rate_limiter.sqlstate;

-- Misspelled settings of the rate_limiter prefix are errors.
SET rate_limiter.sql_state = 'PT429';
\echo :LAST_ERROR_SQLSTATE

-- rate_limiter.now_override takes a finite timestamptz literal or ''.
SET rate_limiter.now_override = 'not a time';
SET rate_limiter.now_override = 'infinity';
SET rate_limiter.now_override = '';
SHOW rate_limiter.now_override;

-- The test server preloads the library (shared_preload_libraries, for
-- rate_limiter.stats), so every session checks a rate_limiter.* setting
-- when it is SET: a bad value is refused at once. (Without preloading,
-- SET before the session's first call keeps any value as a placeholder;
-- loading the library then gives a WARNING and the default applies.)
\c
\set VERBOSITY terse
SET rate_limiter.sqlstate = 'toolong';
SELECT ok FROM rate_limiter.rate_check('placeholder', config => rate_limiter.token_bucket(1, '1 minute'));
SHOW rate_limiter.sqlstate;
SET rate_limiter.sqlstate = 'toolong';
SHOW rate_limiter.sqlstate;

-- The same through set_config() (the hostile-input cases).
SELECT set_config('rate_limiter.sqlstate', '00000', true);
SELECT set_config('rate_limiter.sqlstate', 'rl429', true);
SELECT set_config('rate_limiter.sqlstate', 'RL4290', true);
SELECT set_config('rate_limiter.now_override', 'infinity', true);
SELECT set_config('rate_limiter.now_override', 'next tuesday', true);
SELECT set_config('rate_limiter.no_such_setting', 'on', true);
SELECT set_config('rate_limiter.sqlstate', '01000', true);
SELECT set_config('rate_limiter.sqlstate', '02000', true);
SELECT set_config('rate_limiter.sqlstate', '08006', true);
SELECT set_config('rate_limiter.sqlstate', '25P02', true);
SELECT set_config('rate_limiter.sqlstate', '40001', true);
SELECT set_config('rate_limiter.sqlstate', '40P01', true);
SELECT set_config('rate_limiter.sqlstate', '53300', true);
SELECT set_config('rate_limiter.sqlstate', '57014', true);
SELECT set_config('rate_limiter.sqlstate', '58000', true);
SELECT set_config('rate_limiter.sqlstate', 'XX000', true);
SELECT set_config('rate_limiter.sqlstate', 'P0001', true);
SELECT set_config('rate_limiter.sqlstate', '22000', true);

-- The bounds and the clock are superuser settings: another role cannot SET
-- them.
SHOW rate_limiter.max_requests;
SHOW rate_limiter.max_inline_shards;
DROP ROLE IF EXISTS rl_settings_user;
CREATE ROLE rl_settings_user;
SET ROLE rl_settings_user;
SET rate_limiter.max_requests = 100000;
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.max_inline_shards = 32767;
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.now_override = '2030-01-01 00:00:00+00';
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.random_seed = 1;
\echo :LAST_ERROR_SQLSTATE
SET rate_limiter.lock_free_refusals = off;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE rl_settings_user;
-- rate_limiter.lock_free_refusals (refusals never wait: docs/guarantees.md,
-- "Concurrency and exactness"): on by default, a boolean.
SHOW rate_limiter.lock_free_refusals;
SET rate_limiter.lock_free_refusals = 'sometimes';
SET rate_limiter.lock_free_refusals = off;
SHOW rate_limiter.lock_free_refusals;
RESET rate_limiter.lock_free_refusals;

-- rate_limiter.random_seed takes an integer, or empty for real randomness,
-- and only from a superuser.
SET rate_limiter.random_seed = 'seven';
SET rate_limiter.random_seed = '';
RESET rate_limiter.random_seed;
CREATE ROLE shards_app;
SET ROLE shards_app;
SET rate_limiter.random_seed = 1;
RESET ROLE;
DROP ROLE shards_app;

-- The definitions trigger's helper (native only), given an OID that is not
-- a relation's, does nothing (it raised XX000 with a backtrace).
SELECT rate_limiter._invalidate_definitions(0);
SELECT rate_limiter._invalidate_definitions(4294967295);
SELECT rate_limiter._invalidate_definitions('rate_limiter.definitions'::regclass);
