-- The state an upgrade test writes before upgrading (scripts/real_upgrade.sh,
-- scripts/pg_upgrade_test.sh): keyed and global token buckets, a
-- reservation in debt, fixed windows with and without an anchor, an inline
-- config. Written with the SQL of 0.1.0, which every later version keeps.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('chat', rate_limiter.token_bucket(10, '1 minute', capacity => 3));
SELECT rate_limiter.define('llm', rate_limiter.token_bucket(40000, '1 minute', max_reserved => 40000));
SELECT rate_limiter.define('signup', rate_limiter.fixed_window(100, '1 hour'));
SELECT rate_limiter.define('window', rate_limiter.fixed_window(5, '1 minute', start => '2026-01-01'));
SELECT count(*) FROM generate_series(1, 50) AS i, LATERAL rate_limiter.rate_limit('chat', 'user' || (i % 7), 1) AS r;
SELECT ok FROM rate_limiter.rate_limit('chat', NULL, 3);
SELECT ok FROM rate_limiter.rate_limit('llm', 'org', 60000, reserve => true);
SELECT count(*) FROM generate_series(1, 30) AS i, LATERAL rate_limiter.rate_limit('signup', 'k' || (i % 4), 7) AS r;
SELECT ok FROM rate_limiter.rate_limit('window', NULL, 5);
SELECT ok FROM rate_limiter.rate_limit('inline', 'k', 4, config => rate_limiter.token_bucket(5, '1 second'));
