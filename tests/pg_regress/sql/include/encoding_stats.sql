-- Included by encodings_stats.sql after include/encoding_corpus.sql.
-- Statistics, read by a UTF8 client (as postgres_exporter reads them):
-- every name converts, each row's name is distinct: characters with no
-- UTF-8 equivalent show as \xNN and \ as \\, so the name 'caf\xff'
-- (written with a backslash) is not shown as the name 'caf' || chr(255).
-- stats_reset() takes a name as the view shows it.
SELECT ok FROM rate_limiter.rate_limit('caf\xff', config => rate_limiter.token_bucket(1, '1 minute'));
SET client_encoding = 'UTF8';
SELECT name, calls FROM rate_limiter.stats ORDER BY name COLLATE "C";
SELECT count(DISTINCT name) = count(*) AS distinct_names FROM rate_limiter.stats;
SELECT rate_limiter.stats_reset('caf\\xff');
SELECT rate_limiter.stats_reset(name) FROM rate_limiter.stats WHERE name LIKE 'caf\\\\x%' OR name = 'caf' || chr(255);
SELECT name, calls FROM rate_limiter.stats WHERE name LIKE 'caf%' ORDER BY name COLLATE "C";
RESET client_encoding;
