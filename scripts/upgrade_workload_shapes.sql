-- The state of the limit shapes of this version (docs/shapes.md), written
-- after scripts/upgrade_workload.sql by scripts/pg_upgrade_test.sh (not by
-- real_upgrade.sh, whose first version has none): sliding windows, keyed
-- and global, sharded, with a previous window's count (the column prev);
-- calendar windows in two time zones.
SET rate_limiter.now_override = '2025-12-31 23:59:30+00';
SELECT rate_limiter.define('rolling', rate_limiter.sliding_window(20, '1 minute', start => '2026-01-01'));
SELECT rate_limiter.define('rolling_sharded', rate_limiter.sliding_window(40, '1 minute', shards => 4, start => '2026-01-01'));
SELECT count(*) FROM generate_series(1, 24) AS i, LATERAL rate_limiter.rate_limit('rolling', 'r' || (i % 3), 2) AS r;
SELECT ok FROM rate_limiter.rate_limit('rolling', NULL, 15);
SELECT count(*) FROM generate_series(1, 12) AS i, LATERAL rate_limiter.rate_limit('rolling_sharded', 'k', 3) AS r;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT count(*) FROM generate_series(1, 6) AS i, LATERAL rate_limiter.rate_limit('rolling', 'r' || (i % 3), 1) AS r;
SELECT ok FROM rate_limiter.rate_limit('rolling_sharded', 'k', 5);
-- Calendar windows (the config's and the definitions' time_zone): a month
-- in New York with some used, a day in Berlin with carry-over.
SELECT rate_limiter.define('monthly_quota', rate_limiter.calendar_window(100, 'month', 'America/New_York'));
SELECT rate_limiter.define('daily_quota', rate_limiter.calendar_window(10, 'day', 'Europe/Berlin', capacity => 25));
SELECT count(*) FROM generate_series(1, 9) AS i, LATERAL rate_limiter.rate_limit('monthly_quota', 'm' || (i % 3), 7) AS r;
SELECT ok FROM rate_limiter.rate_limit('daily_quota', 'd', 22);
-- A composite (docs/composites.md) of the two calendar windows: its
-- answers after pg_upgrade are scripts/pg_upgrade_test.sh's "composites".
SELECT rate_limiter.define_all('quotas', ARRAY['monthly_quota', 'daily_quota']);
SELECT ok FROM rate_limiter.rate_limit('quotas', 'd', 2);
