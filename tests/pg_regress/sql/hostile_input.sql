-- Hostile input: a table of bad calls to every function, each run in its
-- own subtransaction; per call the SQLSTATE and message (or 'ok' and the
-- result), and whether it changed rate_limiter.rate_limits or
-- rate_limiter.definitions. Calls meant to succeed and write use names
-- starting with 'ok_'; every error is a standard SQLSTATE (never XX000)
-- and writes nothing.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

CREATE TEMP TABLE hostile (id serial PRIMARY KEY, grp text NOT NULL, call text NOT NULL);
-- n characters of incompressible text (hex digits of md5 sums).
CREATE FUNCTION pg_temp.noise(n int) RETURNS text LANGUAGE sql AS $$
    SELECT left(string_agg(md5(i::text), '' ORDER BY i), n) FROM generate_series(1, n / 32 + 1) i
$$;
CREATE TEMP TABLE hostile_results (
    id int PRIMARY KEY, sqlstate text, outcome text, detail text,
    limits_changed boolean, definitions_changed boolean);

-- A fingerprint of both tables, to see whether a call changed anything.
CREATE FUNCTION pg_temp.fingerprint(OUT limits text, OUT definitions text) LANGUAGE sql AS $$
    SELECT (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM rate_limiter.rate_limits t),
           (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM rate_limiter.definitions t)
$$;

-- What existed before the corpus ran (earlier tests may leave rows).
CREATE TEMP TABLE limits_before AS SELECT * FROM rate_limiter.rate_limits;
CREATE TEMP TABLE definitions_before AS SELECT * FROM rate_limiter.definitions;

INSERT INTO hostile (grp, call) VALUES
-- null_tb: NULL in every argument position of token_bucket (rate, period, shards are required).
('null_tb', $c$rate_limiter.token_bucket(NULL, '1 minute')$c$),
('null_tb', $c$rate_limiter.token_bucket(10, NULL)$c$),
('null_tb', $c$rate_limiter.token_bucket(10, '1 minute', NULL)$c$),
('null_tb', $c$rate_limiter.token_bucket(10, '1 minute', 3, NULL)$c$),
('null_tb', $c$rate_limiter.token_bucket(10, '1 minute', 3, 5, NULL)$c$),
('null_tb', $c$rate_limiter.token_bucket(NULL, NULL, NULL, NULL, NULL)$c$),
-- null_fw: NULL in every argument position of fixed_window.
('null_fw', $c$rate_limiter.fixed_window(NULL, '1 hour')$c$),
('null_fw', $c$rate_limiter.fixed_window(10, NULL)$c$),
('null_fw', $c$rate_limiter.fixed_window(10, '1 hour', NULL)$c$),
('null_fw', $c$rate_limiter.fixed_window(10, '1 hour', NULL, NULL)$c$),
('null_fw', $c$rate_limiter.fixed_window(10, '1 hour', NULL, NULL, NULL)$c$),
('null_fw', $c$rate_limiter.fixed_window(10, '1 hour', NULL, NULL, 1, NULL)$c$),
('null_fw', $c$rate_limiter.fixed_window(NULL, NULL, NULL, NULL, NULL, NULL)$c$),
-- null_define: NULL name, NULL config, and NULL required fields inside a hand-built config.
('null_define', $c$rate_limiter.define(NULL, rate_limiter.token_bucket(10, '1 minute'))$c$),
('null_define', $c$rate_limiter.define('h_null', NULL)$c$),
('null_define', $c$rate_limiter.define(NULL, NULL)$c$),
('null_define', $c$rate_limiter.define('h_null', ROW(NULL, 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('null_define', $c$rate_limiter.define('h_null', ROW('token bucket', NULL, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('null_define', $c$rate_limiter.define('h_null', ROW('token bucket', 10, NULL, NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('null_define', $c$rate_limiter.define('h_null', ROW('token bucket', 10, '1 minute', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('null_define', $c$rate_limiter.define('h_null', ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
-- null_other: NULL name for undefine and rate_reset; a NULL key is the global limit.
('null_other', $c$rate_limiter.undefine(NULL)$c$),
('null_other', $c$rate_limiter.rate_reset(NULL)$c$),
('null_other', $c$rate_limiter.rate_reset(NULL, 'k')$c$),
('null_other', $c$rate_limiter.rate_reset('h_nothing', NULL)$c$),
-- null_limit: NULL in every argument position of rate_limit.
('null_limit', $c$rate_limiter.rate_limit(NULL, 'k', 1, false, false, rate_limiter.token_bucket(10, '1 minute'))$c$),
('null_limit', $c$rate_limiter.rate_limit('ok_null_key', NULL, 1, false, false, rate_limiter.token_bucket(10, '1 minute'))$c$),
('null_limit', $c$rate_limiter.rate_limit('h_undefined', 'k', NULL, false, false, NULL)$c$),
('null_limit', $c$rate_limiter.rate_limit('h_undefined', 'k', 1, NULL, false, NULL)$c$),
('null_limit', $c$rate_limiter.rate_limit('h_undefined', 'k', 1, false, NULL, NULL)$c$),
('null_limit', $c$rate_limiter.rate_limit('h_undefined', 'k', 1, false, false, NULL)$c$),
('null_limit', $c$rate_limiter.rate_limit(NULL, NULL, NULL, NULL, NULL, NULL)$c$),
-- null_check: NULL in every argument position of rate_check.
('null_check', $c$rate_limiter.rate_check(NULL, 'k', 1, false, false, rate_limiter.token_bucket(10, '1 minute'))$c$),
('null_check', $c$rate_limiter.rate_check('h_check', NULL, 1, false, false, rate_limiter.token_bucket(10, '1 minute'))$c$),
('null_check', $c$rate_limiter.rate_check('h_undefined', 'k', NULL, false, false, NULL)$c$),
('null_check', $c$rate_limiter.rate_check('h_undefined', 'k', 1, NULL, false, NULL)$c$),
('null_check', $c$rate_limiter.rate_check('h_undefined', 'k', 1, false, NULL, NULL)$c$),
('null_check', $c$rate_limiter.rate_check('h_undefined', 'k', 1, false, false, NULL)$c$),
('null_check', $c$rate_limiter.rate_check(NULL, NULL, NULL, NULL, NULL, NULL)$c$),
-- rate: non-finite, negative, zero, huge and subnormal rates (finite and > 0 is valid).
('rate', $c$rate_limiter.token_bucket('NaN', '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket('Infinity', '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket('-Infinity', '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(-1, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(0, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket('-0', '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(1e308, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(-1e308, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(1.7976931348623157e308, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(5e-324, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(-5e-324, '1 minute')$c$),
('rate', $c$rate_limiter.token_bucket(1e309, '1 minute')$c$),
('rate', $c$rate_limiter.fixed_window('NaN', '1 hour')$c$),
('rate', $c$rate_limiter.fixed_window('Infinity', '1 hour')$c$),
('rate', $c$rate_limiter.fixed_window(0, '1 hour')$c$),
('rate', $c$rate_limiter.fixed_window(1.7976931348623157e308, '1 hour')$c$),
('rate', $c$rate_limiter.fixed_window(5e-324, '1 hour')$c$),
-- capacity: the same values for capacity (finite and >= 0 is valid).
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => 'NaN')$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => 'Infinity')$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => '-Infinity')$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => -1)$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => 0)$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => 1e308)$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => -1e308)$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => 1.7976931348623157e308)$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => 5e-324)$c$),
('capacity', $c$rate_limiter.token_bucket(10, '1 minute', capacity => -5e-324)$c$),
('capacity', $c$rate_limiter.fixed_window(10, '1 hour', capacity => 'NaN')$c$),
('capacity', $c$rate_limiter.fixed_window(10, '1 hour', capacity => -1)$c$),
-- max_reserved: the same values for max_reserved (finite and >= 0 is valid).
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => 'NaN')$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => 'Infinity')$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => '-Infinity')$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => -1)$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => 0)$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => 1e308)$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => -1e308)$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => 1.7976931348623157e308)$c$),
('max_reserved', $c$rate_limiter.token_bucket(10, '1 minute', max_reserved => 5e-324)$c$),
('max_reserved', $c$rate_limiter.fixed_window(10, '1 hour', max_reserved => 'Infinity')$c$),
-- count: the same values for count against a defined limit (finite and >= 0, and <= capacity).
('count', $c$rate_limiter.define('ok_count', rate_limiter.token_bucket(10, '1 minute'))$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 'NaN')$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 'Infinity')$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', '-Infinity')$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', -1)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 0)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', '-0')$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 1e308)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', -1e308)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 1.7976931348623157e308)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 5e-324)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', -5e-324)$c$),
('count', $c$rate_limiter.rate_limit('ok_count', 'k', 1e308, reserve => true)$c$),
('count', $c$rate_limiter.rate_check('ok_count', 'k', 'NaN')$c$),
('count', $c$rate_limiter.rate_check('ok_count', 'k', 'Infinity')$c$),
('count', $c$rate_limiter.rate_check('ok_count', 'k', -1)$c$),
('count', $c$rate_limiter.rate_check('ok_count', 'k', 1e308)$c$),
-- period: months, years, negative, zero, mixed sign, huge and tiny intervals (> 0 is valid).
('period', $c$rate_limiter.token_bucket(10, '1 month')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 year')$c$),
('period', $c$rate_limiter.token_bucket(10, '-1 minute')$c$),
('period', $c$rate_limiter.token_bucket(10, '0')$c$),
('period', $c$rate_limiter.token_bucket(10, '00:00:00')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 month -30 days')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 month -29 days')$c$),
('period', $c$rate_limiter.token_bucket(10, '-1 month 31 days')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 day -86400 seconds')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 year -365 days -6 hours')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 month -30 days 1 microsecond')$c$),
('period', $c$rate_limiter.token_bucket(10, '178000000 years')$c$),
('period', $c$rate_limiter.token_bucket(10, '-178000000 years')$c$),
('period', $c$rate_limiter.token_bucket(10, '178000000 years 2147483647 days 2562047788 hours')$c$),
('period', $c$rate_limiter.token_bucket(10, '1 microsecond')$c$),
('period', $c$rate_limiter.token_bucket(10, '-1 microsecond')$c$),
('period', $c$rate_limiter.token_bucket(10, '-0 seconds')$c$),
('period', $c$rate_limiter.token_bucket(10, 'a while')$c$),
('period', $c$rate_limiter.fixed_window(10, '1 month -30 days')$c$),
('period', $c$rate_limiter.fixed_window(10, '178000000 years')$c$),
('period', $c$rate_limiter.fixed_window(10, '-1 year')$c$),
-- shards: only 1 is implemented; <= 0 is invalid, > 1 not supported; out-of-int4 does not resolve.
('shards', $c$rate_limiter.token_bucket(10, '1 minute', shards => 0)$c$),
('shards', $c$rate_limiter.token_bucket(10, '1 minute', shards => -1)$c$),
('shards', $c$rate_limiter.token_bucket(10, '1 minute', shards => 2)$c$),
('shards', $c$rate_limiter.token_bucket(10, '1 minute', shards => 2147483647)$c$),
('shards', $c$rate_limiter.token_bucket(10, '1 minute', shards => -2147483648)$c$),
('shards', $c$rate_limiter.token_bucket(10, '1 minute', shards => 2147483648)$c$),
('shards', $c$rate_limiter.fixed_window(10, '1 hour', shards => 0)$c$),
('shards', $c$rate_limiter.fixed_window(10, '1 hour', shards => 2147483647)$c$),
('shards', $c$rate_limiter.define('ok_shards', ROW('token bucket', 10, '1 minute', NULL, NULL, 2, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('shards', $c$rate_limiter.rate_limit('h_shards', config => ROW('token bucket', 10, '1 minute', NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('shards', $c$rate_limiter.rate_check('h_shards', config => ROW('fixed window', 10, '1 minute', NULL, NULL, -1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
-- empty: '' is a valid name and key (data, not absent); what these write is removed by the last two calls.
('empty', $c$rate_limiter.rate_limit('', 'k')$c$),
('empty', $c$rate_limiter.rate_check('', '', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('empty', $c$rate_limiter.rate_limit('ok_empty_key', '', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('empty', $c$rate_limiter.define('', rate_limiter.token_bucket(10, '1 minute'))$c$),
('empty', $c$rate_limiter.rate_limit('', '', 3)$c$),
('empty', $c$rate_limiter.undefine('')$c$),
('empty', $c$rate_limiter.rate_reset('', '')$c$),
-- huge: 10 MB names and keys (and a 100 kB compressible and a 3.2 kB incompressible name); the index limits what can be stored.
('huge', $c$rate_limiter.define(repeat('x', 10*1024*1024), rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.undefine(repeat('x', 10*1024*1024))$c$),
('huge', $c$rate_limiter.rate_reset(repeat('x', 10*1024*1024), repeat('x', 10*1024*1024))$c$),
('huge', $c$rate_limiter.rate_limit(repeat('x', 10*1024*1024))$c$),
('huge', $c$rate_limiter.rate_check(repeat('x', 10*1024*1024), 'k')$c$),
('huge', $c$rate_limiter.rate_limit(repeat('x', 10*1024*1024), 'k', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.rate_limit('ok_big', repeat('x', 10*1024*1024), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.rate_check(repeat('x', 10*1024*1024), repeat('x', 10*1024*1024), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.rate_check('ok_big', repeat('x', 10*1024*1024), 11, config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.define('ok_big_' || repeat('y', 100000), rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.rate_limit('ok_big_' || repeat('y', 100000), repeat('z', 100000))$c$),
('huge', $c$rate_limiter.define('h_' || (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 100) i), rate_limiter.token_bucket(10, '1 minute'))$c$),
('huge', $c$rate_limiter.rate_limit('ok_big', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 100) i), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
-- injection: SQL, format specifiers and JSON breakers in names and keys are data.
('injection', $c$rate_limiter.rate_limit($$ok_inj'); DROP TABLE rate_limiter.rate_limits; --$$, config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('injection', $c$rate_limiter.define($$ok_inj"; DELETE FROM rate_limiter.definitions; --$$, rate_limiter.token_bucket(10, '1 minute'))$c$),
('injection', $c$rate_limiter.rate_limit($$ok_inj"; DELETE FROM rate_limiter.definitions; --$$, $$' OR '1'='1$$)$c$),
('injection', $c$rate_limiter.rate_limit('ok_inj', $$k'||pg_sleep(10)||'$$, config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('injection', $c$rate_limiter.rate_limit('ok_inj', '%s%s%n%x%%', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('injection', $c$rate_limiter.rate_check($$x' UNION SELECT 1 --$$, 'k')$c$),
('injection', $c$rate_limiter.undefine($$x'; DROP SCHEMA rate_limiter CASCADE; --$$)$c$),
('injection', $c$rate_limiter.rate_reset($$'; TRUNCATE rate_limiter.definitions; --$$, $$'--$$)$c$),
('injection', $c$rate_limiter.rate_limit('ok_inj_json', E'"},"retry_after_ms":0,"x":{"\\', 1, config => rate_limiter.token_bucket(1, '1 hour'))$c$),
('injection', $c$rate_limiter.rate_limit('ok_inj_json', E'"},"retry_after_ms":0,"x":{"\\', 1, throws => true, config => rate_limiter.token_bucket(1, '1 hour'))$c$),
('injection', $c$rate_limiter.rate_limit('ok_inj_json', E'line1\nline2\t\u0001', 1, config => rate_limiter.token_bucket(1, '1 hour'))$c$),
('injection', $c$rate_limiter.rate_limit('ok_inj_json', E'line1\nline2\t\u0001', 1, throws => true, config => rate_limiter.token_bucket(1, '1 hour'))$c$),
-- composite: unknown enum values and wrong types or arity through rate_limiter.config.
('composite', $c$rate_limiter.rate_limit('h_comp', config => ROW('leaky bucket', 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('Token Bucket', 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('', 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('token bucket', 'ten', '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('token bucket', 10, 'a minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('token bucket', 10, '1 minute', NULL, NULL, 'one', NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('ok_comp', ROW('token bucket', 10, '1 minute', NULL, NULL, 1.5, NULL, NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('token bucket', 10, '1 minute')::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('token bucket', 10, '1 minute', NULL, NULL, 1, NULL, NULL, NULL, NULL, NULL, 'extra')::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', 'token bucket'::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', '(leaky bucket,10,"1 minute",,,1,,,,,)'::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', '(token bucket,10,"1 minute",,,1,,,,,,extra)'::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', '(token bucket,10,"1 minute")'::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('ok_textcast', '(token bucket,10,"1 minute",,,1,,,,,)'::rate_limiter.config)$c$),
('composite', $c$rate_limiter.define('h_comp', 'leaky bucket'::rate_limiter.kind::text::rate_limiter.config)$c$),
('composite', $c$rate_limiter.rate_limit('h_comp', config => 42)$c$),
('composite', $c$rate_limiter.define('h_comp', ROW('token bucket', 10, '1 minute', NULL, NULL, 1, '2026-01-01 00:00:00+00', NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
-- start: infinite and extreme fixed-window anchors, a start on a token bucket, and window math at the edges of timestamptz.
('start', $c$rate_limiter.fixed_window(10, '1 hour', start => 'infinity')$c$),
('start', $c$rate_limiter.fixed_window(10, '1 hour', start => '-infinity')$c$),
('start', $c$rate_limiter.fixed_window(10, '1 hour', start => 'soonish')$c$),
('start', $c$rate_limiter.define('h_start', ROW('fixed window', 10, '1 hour', NULL, NULL, 1, 'infinity', NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('start', $c$rate_limiter.rate_check('h_start', config => ROW('fixed window', 10, '1 hour', NULL, NULL, 1, '-infinity', NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('start', $c$rate_limiter.rate_limit('h_fw_inf', config => rate_limiter.fixed_window(10, '1 hour', start => 'infinity'))$c$),
('start', $c$rate_limiter.rate_limit('h_fw_inf', 'k', 11, reserve => true, config => rate_limiter.fixed_window(10, '1 hour', start => '-infinity'))$c$),
('start', $c$rate_limiter.rate_limit('h_tb_start', config => ROW('token bucket', 10, '1 minute', NULL, NULL, 1, 'infinity', NULL, NULL, NULL, NULL)::rate_limiter.config)$c$),
('start', $c$rate_limiter.rate_limit('ok_fw_past', config => rate_limiter.fixed_window(1e308, '1 microsecond', start => '4713-01-01 00:00:00+00 BC'))$c$),
('start', $c$rate_limiter.rate_limit('ok_fw_future', config => rate_limiter.fixed_window(10, '292000 years', start => '294276-12-31 23:59:59+00'))$c$),
('start', $c$rate_limiter.rate_limit('ok_fw_future', 'k', 11, reserve => true, config => rate_limiter.fixed_window(10, '292000 years', start => '294276-12-31 23:59:59+00'))$c$),
('start', $c$rate_limiter.rate_check('ok_fw_future', config => rate_limiter.fixed_window(10, '200000 years', start => '294276-12-31 23:59:59+00'))$c$),
('start', $c$rate_limiter.rate_limit('ok_fw_future', config => rate_limiter.fixed_window(10, '200000 years', start => '294276-12-31 23:59:59+00'))$c$),
('start', $c$rate_limiter.rate_limit('ok_fw_future', 'k2', 20, reserve => true, config => rate_limiter.fixed_window(10, '292000 years', start => '4713-01-01 00:00:00+00 BC'))$c$),
-- encoding: non-UTF-8 bytes and NUL in names and keys (the database is UTF8: rejected before any call).
('encoding', $c$rate_limiter.rate_limit(E'\xff', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('encoding', $c$rate_limiter.rate_limit('h_enc', E'\xff', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('encoding', $c$rate_limiter.define(E'\xc3\x28', rate_limiter.token_bucket(10, '1 minute'))$c$),
('encoding', $c$rate_limiter.rate_reset(E'\xed\xa0\x80', E'\xff')$c$),
('encoding', $c$rate_limiter.undefine(E'\x00')$c$),
('encoding', $c$rate_limiter.rate_check(U&'\D800', 'k')$c$),
('encoding', $c$rate_limiter.rate_limit('h_enc', convert_from('\xff'::bytea, 'UTF8'))$c$),
('encoding', $c$rate_limiter.rate_limit('h_enc', chr(0))$c$),
-- never: counts that can never succeed, and reservations against max_reserved.
('never', $c$rate_limiter.define('ok_res', rate_limiter.token_bucket(10, '1 minute', capacity => 5, max_reserved => 3))$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 6)$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 6, throws => true)$c$),
('never', $c$rate_limiter.rate_check('ok_res', 'a', 6)$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 8.000001, reserve => true)$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 8, reserve => true)$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 1, reserve => true)$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 1, reserve => true, throws => true)$c$),
('never', $c$rate_limiter.rate_limit('ok_res', 'a', 0)$c$),
('never', $c$rate_limiter.rate_limit('ok_zero', 'k', 1, config => rate_limiter.token_bucket(10, '1 minute', capacity => 0))$c$),
('never', $c$rate_limiter.rate_limit('ok_zero', 'k', 0, config => rate_limiter.token_bucket(10, '1 minute', capacity => 0))$c$),
('never', $c$rate_limiter.rate_limit('ok_zero', 'k', 1, reserve => true, config => rate_limiter.token_bucket(10, '1 minute', capacity => 0, max_reserved => 0))$c$),
('never', $c$rate_limiter.rate_limit('ok_zero', 'k', 1, reserve => true, config => rate_limiter.fixed_window(10, '1 minute', capacity => 0, max_reserved => 0))$c$),
-- extreme: configs whose math overflows (huge debts and retry_after beyond interval range).
('extreme', $c$rate_limiter.token_bucket(10, '292000 years')$c$),
('extreme', $c$rate_limiter.rate_limit('ok_tiny', count => 1, config => rate_limiter.token_bucket(5e-324, '292000 years', capacity => 1))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_tiny', count => 1, config => rate_limiter.token_bucket(5e-324, '292000 years', capacity => 1))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_tiny', count => 1, reserve => true, config => rate_limiter.token_bucket(5e-324, '292000 years', capacity => 1))$c$),
('extreme', $c$rate_limiter.rate_check('ok_tiny', count => 1, reserve => true, throws => true, config => rate_limiter.token_bucket(5e-324, '292000 years', capacity => 1, max_reserved => 0.5))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_huge', count => 1.7976931348623157e308, config => rate_limiter.token_bucket(1.7976931348623157e308, '1 microsecond'))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_huge', count => 1.7976931348623157e308, config => rate_limiter.token_bucket(1.7976931348623157e308, '1 microsecond'))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_huge', count => 1.7976931348623157e308, reserve => true, config => rate_limiter.token_bucket(1.7976931348623157e308, '1 microsecond'))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_huge', count => 1.7976931348623157e308, reserve => true, config => rate_limiter.token_bucket(1.7976931348623157e308, '1 microsecond'))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_debt', count => 1e308, reserve => true, config => rate_limiter.token_bucket(1, '292000 years', capacity => 1))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_debt', count => 1e308, reserve => true, config => rate_limiter.fixed_window(1, '292000 years', capacity => 1))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_debt', 'fw', count => 1e308, reserve => true, config => rate_limiter.fixed_window(5e-324, '1 microsecond', capacity => 1e308))$c$),
('extreme', $c$rate_limiter.rate_limit('ok_debt', 'fw', count => 1e308, reserve => true, config => rate_limiter.fixed_window(5e-324, '1 microsecond', capacity => 1e308))$c$),
-- length: names and keys of every length up to and past what the unique
-- index can hold (about 2,700 bytes for a btree entry, 8,191 for any index
-- row): incompressible text (pg_temp.noise); past the limit rate_limit
-- fails with 54000, rate_check (which inserts nothing) still answers.
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(1), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(100), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(1000), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2000), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2600), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2650), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2680), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2690), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2700), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(2710), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(3000), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(8000), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len', pg_temp.noise(9000), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len_' || pg_temp.noise(2600), 'k', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len_' || pg_temp.noise(2690), 'k', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len_' || pg_temp.noise(2700), 'k', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_limit('ok_len_' || pg_temp.noise(9000), 'k', config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_check('ok_len', pg_temp.noise(2700), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.rate_check('ok_len', pg_temp.noise(9000), config => rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.define('ok_len_' || pg_temp.noise(2600), rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.define('ok_len_' || pg_temp.noise(2700), rate_limiter.token_bucket(10, '1 minute'))$c$),
('length', $c$rate_limiter.define('ok_len_' || pg_temp.noise(9000), rate_limiter.token_bucket(10, '1 minute'))$c$);

-- (Invalid values of the settings, which the native extension refuses when
-- they are SET: settings.sql.)

SELECT count(*) AS hostile_calls, count(DISTINCT grp) AS groups FROM hostile;

-- Run every call in its own subtransaction and record what happened.
DO $$
DECLARE
    h record;
    before record;
    after record;
    n bigint;
    result text;
    st text;
    msg text;
    det text;
BEGIN
    FOR h IN SELECT * FROM hostile ORDER BY id LOOP
        before := pg_temp.fingerprint();
        st := 'ok';
        det := NULL;
        BEGIN
            EXECUTE format('SELECT count(*), string_agg(coalesce(r::text, %L), %L) FROM (SELECT (%s) AS r) s',
                           'NULL', ' ; ', h.call)
                INTO n, result;
            msg := CASE WHEN n = 1 THEN result ELSE n || ' rows: ' || coalesce(result, '') END;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
        END;
        after := pg_temp.fingerprint();
        INSERT INTO hostile_results VALUES (h.id, st, left(msg, 120), nullif(left(regexp_replace(det, 'tuple \(\d+,\d+\)', 'tuple (...)'), 120), ''),
            before.limits IS DISTINCT FROM after.limits,
            before.definitions IS DISTINCT FROM after.definitions);
    END LOOP;
END
$$;

SELECT h.id, h.grp, h.call, r.sqlstate, r.outcome, r.detail,
       r.limits_changed AS wrote_limits, r.definitions_changed AS wrote_defs
FROM hostile h JOIN hostile_results r USING (id)
ORDER BY h.id;

-- How many calls ended in each SQLSTATE.
SELECT sqlstate, count(*) FROM hostile_results GROUP BY sqlstate ORDER BY sqlstate;

-- No internal errors (XX000) and no missing result.
SELECT count(*) AS internal_errors FROM hostile_results WHERE sqlstate LIKE 'XX%' OR sqlstate IS NULL;

-- No call that errored changed either table.
SELECT count(*) AS errored_calls_that_wrote FROM hostile_results
WHERE sqlstate <> 'ok' AND (limits_changed OR definitions_changed);

-- Calls that wrote although their name does not start with 'ok_': the empty
-- name (cleaned up by the corpus itself), and configs that are accepted
-- although their start is infinite or is given for a token bucket.
SELECT h.id, h.call FROM hostile h JOIN hostile_results r USING (id)
WHERE (r.limits_changed OR r.definitions_changed)
  AND h.call NOT LIKE '%''ok\_%' AND h.call NOT LIKE '%$$ok\_%'
ORDER BY h.id;

-- Exactly these rows were added; everything that existed before is unchanged.
SELECT left(name, 50) AS name, length(name) AS name_length, left(key, 40) AS key,
       length(key) AS key_length, shard, value, ts
FROM (SELECT * FROM rate_limiter.rate_limits EXCEPT ALL SELECT * FROM limits_before) added
ORDER BY name, key NULLS FIRST, key_length, shard;
SELECT count(*) AS removed_or_changed_limits
FROM (SELECT * FROM limits_before EXCEPT ALL SELECT * FROM rate_limiter.rate_limits) gone;
SELECT left(name, 50) AS name, length(name) AS name_length, kind, rate, period, capacity, max_reserved, shards, start
FROM (SELECT * FROM rate_limiter.definitions EXCEPT ALL SELECT * FROM definitions_before) added
ORDER BY name;
SELECT count(*) AS removed_or_changed_definitions
FROM (SELECT * FROM definitions_before EXCEPT ALL SELECT * FROM rate_limiter.definitions) gone;

-- Clean up what the corpus created.
SELECT count(rate_limiter.undefine(name)) AS undefined
FROM (SELECT name FROM rate_limiter.definitions EXCEPT SELECT name FROM definitions_before) d;
SELECT count(rate_limiter.rate_reset(name, key)) AS reset
FROM (SELECT DISTINCT name, key FROM rate_limiter.rate_limits
      EXCEPT SELECT name, key FROM limits_before) s;
SELECT count(*) AS limits_left FROM (SELECT * FROM rate_limiter.rate_limits EXCEPT ALL SELECT * FROM limits_before) s;
SELECT count(*) AS definitions_left FROM (SELECT * FROM rate_limiter.definitions EXCEPT ALL SELECT * FROM definitions_before) s;

-- The backend survived all of it.
SELECT 1 AS backend_alive;
