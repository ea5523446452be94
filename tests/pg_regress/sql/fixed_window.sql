-- Fixed window: rate tokens at the start of each window, up to capacity.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';

-- 2 per minute, windows anchored on the minute.
\set api 'rate_limiter.fixed_window(2, ''1 minute'', start => ''2026-01-01 00:00:00+00'')'
SET rate_limiter.now_override = '2026-01-01 00:00:10+00';
SELECT * FROM rate_limiter.rate_limit('api', 'dave', config => :api);
SET rate_limiter.now_override = '2026-01-01 00:00:20+00';
SELECT * FROM rate_limiter.rate_limit('api', 'dave', config => :api);
-- The third in the same window waits for the next window (00:01:00).
SET rate_limiter.now_override = '2026-01-01 00:00:30+00';
SELECT * FROM rate_limiter.rate_limit('api', 'dave', config => :api);
-- ts is the start of the window the value belongs to.
SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'api';
SET rate_limiter.now_override = '2026-01-01 00:00:59.999999+00';
SELECT ok FROM rate_limiter.rate_limit('api', 'dave', config => :api);
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT * FROM rate_limiter.rate_limit('api', 'dave', config => :api);
-- Unused tokens do not roll over beyond capacity (= rate here).
SET rate_limiter.now_override = '2026-01-01 01:00:00+00';
SELECT * FROM rate_limiter.rate_check('api', 'dave', 0, config => :api);

-- With capacity > rate, unused windows accumulate up to capacity.
\set burst 'rate_limiter.fixed_window(2, ''1 minute'', capacity => 5, start => ''2026-01-01 00:00:00+00'')'
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT * FROM rate_limiter.rate_limit('burst', count => 2, config => :burst);
SET rate_limiter.now_override = '2026-01-01 00:10:00+00';
SELECT * FROM rate_limiter.rate_limit('burst', count => 5, config => :burst);

-- Reservation: 5 from an empty window owes 5 = three windows (2 + 2 + 2).
SET rate_limiter.now_override = '2026-01-01 00:10:30+00';
SELECT * FROM rate_limiter.rate_limit('burst', count => 5, reserve => true, config => :burst);
-- A refused reservation with max_reserved waits until the debt fits.
\set tight 'rate_limiter.fixed_window(2, ''1 minute'', max_reserved => 1, start => ''2026-01-01 00:00:00+00'')'
SELECT * FROM rate_limiter.rate_limit('tight', count => 2, config => :tight);
SELECT * FROM rate_limiter.rate_limit('tight', count => 3, reserve => true, config => :tight);
SET rate_limiter.now_override = '2026-01-01 00:11:00+00';
SELECT * FROM rate_limiter.rate_limit('tight', count => 3, reserve => true, config => :tight);

-- A start in the future is only an anchor: it never blocks.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
\set future 'rate_limiter.fixed_window(1, ''1 hour'', start => ''2030-06-01 00:30:00+00'')'
SELECT * FROM rate_limiter.rate_limit('future', config => :future);
SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'future';
SELECT * FROM rate_limiter.rate_limit('future', config => :future);

-- Without start, each key's windows open at its own phase: stable across
-- calls, checks and resets, and spread across keys.
\set jitter 'rate_limiter.fixed_window(1, ''1 hour'')'
SELECT ok FROM rate_limiter.rate_limit('jitter', 'k1', config => :jitter);
SELECT ts AS phase FROM rate_limiter.rate_limits WHERE name = 'jitter' AND key = 'k1' \gset
SELECT retry_after AS refused_retry FROM rate_limiter.rate_limit('jitter', 'k1', config => :jitter) \gset
SELECT retry_after = :'refused_retry' AS check_agrees
FROM rate_limiter.rate_check('jitter', 'k1', config => :jitter);
SELECT :'phase'::timestamptz <= '2026-01-01 00:00:00+00' AS window_started,
       :'phase'::timestamptz + interval '1 hour' - :'refused_retry'::interval
           = '2026-01-01 00:00:00+00' AS retry_is_next_window;
SELECT rate_limiter.rate_reset('jitter', 'k1');
SELECT ok FROM rate_limiter.rate_limit('jitter', 'k1', config => :jitter);
SELECT ts = :'phase' AS same_phase_after_reset
FROM rate_limiter.rate_limits WHERE name = 'jitter' AND key = 'k1';
SELECT count(*) AS admitted
FROM generate_series(1, 100) AS k, rate_limiter.rate_limit('jitter', 'key' || k, config => :jitter) AS l
WHERE l.ok;
SELECT count(*) AS keys, count(DISTINCT ts) > 90 AS spread_across_keys,
       bool_and(ts > '2025-12-31 23:00:00+00' AND ts <= '2026-01-01 00:00:00+00') AS each_window_contains_now
FROM rate_limiter.rate_limits WHERE name = 'jitter' AND key LIKE 'key%';

-- Past the year 294247 the clock is still read to the microsecond (there
-- PostgreSQL's extract(epoch FROM timestamptz) keeps about 16 digits): a
-- window of 13 seconds anchored at 2000-01-01 ends 3.210988 s after
-- 12:34:56.789012; 4 more tokens at 3 a window take one window more.
SET rate_limiter.now_override = '294247-06-01 12:34:56.789012+00';
SELECT (extract(epoch FROM retry_after) * 1000000)::bigint AS retry_after_us
FROM rate_limiter.rate_check('far_future', 'k', 5, reserve => true,
                             config => rate_limiter.fixed_window(3, '13 seconds', 1, 10, start => '2000-01-01 00:00:00+00'));
RESET rate_limiter.now_override;
