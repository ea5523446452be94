-- rate_limiter.stats: counters per limit name, in shared memory (the test
-- server preloads the library). One count per consuming decision:
-- calls = admitted + refused + shadow_refused; reserved = admitted with a
-- retry_after; tokens = counts admitted; credited = tokens given back;
-- near_limit = admitted calls that left less than 20% of capacity.
-- rate_check and status count nothing; errors count nothing; a decision
-- counts also when its transaction rolls back.
SET timezone = 'UTC';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
CREATE FUNCTION pg_temp.counted(prefix text) RETURNS TABLE (name text, calls bigint, admitted bigint,
    refused bigint, reserved bigint, tokens float8, credited float8, near_limit bigint,
    shadow_refused bigint, contended bigint)
LANGUAGE sql AS $$
    SELECT name, calls, admitted, refused, reserved, tokens, credited, near_limit, shadow_refused, contended
    FROM rate_limiter.stats WHERE name LIKE prefix || '%' ORDER BY name
$$;
SELECT rate_limiter.define('stats_bucket', rate_limiter.token_bucket(10, '1 hour'));

-- 7 of 10 tokens: admitted, not near the limit (3 left of 10: 30%).
SELECT ok, remaining FROM rate_limiter.rate_limit('stats_bucket', 'a', 7);
-- 2 more: 1 left, near the limit.
SELECT ok, remaining FROM rate_limiter.rate_limit('stats_bucket', 'a', 2);
-- Refused.
SELECT ok FROM rate_limiter.rate_limit('stats_bucket', 'a', 5);
-- Reserved: admitted with a retry_after.
SELECT ok, retry_after IS NOT NULL AS reserved FROM rate_limiter.rate_limit('stats_bucket', 'b', 12, reserve => true);
-- Looking counts nothing.
SELECT ok FROM rate_limiter.rate_check('stats_bucket', 'a');
SELECT value FROM rate_limiter.status('stats_bucket', 'a');
-- Errors count nothing.
SELECT ok FROM rate_limiter.rate_limit('stats_bucket', 'a', -1);
-- A rolled-back decision is counted.
BEGIN;
SELECT ok FROM rate_limiter.rate_limit('stats_bucket', 'c', 1);
ROLLBACK;
-- Tokens given back.
SELECT rate_limiter.rate_credit('stats_bucket', 'a', 4);
SELECT * FROM pg_temp.counted('stats_bucket');

-- rate_limit_all: a row per request, as answered; a call refused as a
-- whole consumed nothing, so only its refused requests count.
SELECT rate_limiter.define('stats_all', rate_limiter.token_bucket(3, '1 hour'));
SELECT name, ok FROM rate_limiter.rate_limit_all(ARRAY[
    ('stats_all', 'x', 2, NULL), ('stats_all_other', 'x', 1, rate_limiter.token_bucket(1, '1 hour'))]::rate_limiter.request[]);
SELECT name, ok FROM rate_limiter.rate_limit_all(ARRAY[
    ('stats_all', 'x', 2, NULL), ('stats_all_other', 'x', 1, rate_limiter.token_bucket(1, '1 hour'))]::rate_limiter.request[]);
-- stats_all alone could be admitted (1 token left), stats_all_other
-- cannot: refused as a whole, so only stats_all_other's refusal counts.
SELECT name, ok FROM rate_limiter.rate_limit_all(ARRAY[
    ('stats_all', 'x', 1, NULL), ('stats_all_other', 'x', 1, rate_limiter.token_bucket(1, '1 hour'))]::rate_limiter.request[]);
SELECT * FROM pg_temp.counted('stats_all');

-- rate_wait: its final answer only.
SELECT rate_limiter.define('stats_wait', rate_limiter.token_bucket(1, '1 hour'));
SELECT ok FROM rate_limiter.rate_wait('stats_wait', 'w');
SELECT ok FROM rate_limiter.rate_wait('stats_wait', 'w', timeout => '1 second');
SELECT * FROM pg_temp.counted('stats_wait');

-- guard() and postgrest_limit() count through rate_limit.
CREATE TABLE stats_rows (id int);
CREATE TRIGGER guard BEFORE INSERT ON stats_rows
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('stats_wait');
INSERT INTO stats_rows VALUES (1);
SELECT rate_limiter.postgrest_limit('stats_wait', 'p');
SELECT rate_limiter.postgrest_limit('stats_wait', 'p');
SELECT * FROM pg_temp.counted('stats_wait');
DROP TABLE stats_rows;

-- A name longer than 256 bytes is shown cut (at a character boundary),
-- followed by a marker with its length and hash, so two such names stay
-- distinct rows (and distinct from any name shown whole), and
-- stats_reset() takes the name as shown.
SELECT ok FROM rate_limiter.rate_limit('stats_' || repeat('é', 200) || 'one', config => rate_limiter.token_bucket(1, '1 hour'));
SELECT ok FROM rate_limiter.rate_limit('stats_' || repeat('é', 200) || 'two', config => rate_limiter.token_bucket(1, '1 hour'));
SELECT ok FROM rate_limiter.rate_limit('stats_' || repeat('é', 200) || 'two', config => rate_limiter.token_bucket(1, '1 hour'));
SELECT octet_length(name), regexp_replace(substr(name, 120), '#[0-9a-f]{16}\]$', '#<hash>]') AS ending, calls
FROM rate_limiter.stats WHERE name LIKE 'stats_é%' ORDER BY calls;
SELECT count(DISTINCT name) AS distinct_names FROM rate_limiter.stats WHERE name LIKE 'stats_é%';
SELECT name AS cut_name FROM rate_limiter.stats WHERE name LIKE 'stats_é%' AND calls = 2 \gset
SELECT rate_limiter.stats_reset(:'cut_name');
SELECT calls FROM rate_limiter.stats WHERE name LIKE 'stats_é%' ORDER BY calls;
-- The name as called works too.
SELECT rate_limiter.stats_reset('stats_' || repeat('é', 200) || 'one');
SELECT calls FROM rate_limiter.stats WHERE name LIKE 'stats_é%' ORDER BY calls;

-- stats_reset(name) zeroes one name and restarts its clock; stats_reset()
-- every name of this database.
SELECT stats_reset AS bucket_started FROM rate_limiter.stats WHERE name = 'stats_bucket' \gset
SELECT rate_limiter.stats_reset('stats_bucket');
SELECT calls, tokens, credited, stats_reset > :'bucket_started' AS restarted
FROM rate_limiter.stats WHERE name = 'stats_bucket';
SELECT calls FROM rate_limiter.stats WHERE name = 'stats_all';
SELECT rate_limiter.stats_reset();
SELECT count(*) AS names, sum(calls) AS calls FROM rate_limiter.stats WHERE name LIKE 'stats%';

-- Nothing is granted: a monitoring role needs USAGE on the schema, SELECT
-- on the view and EXECUTE on the function behind it (README, "Monitoring").
CREATE ROLE rl_stats_monitor;
GRANT USAGE ON SCHEMA rate_limiter TO rl_stats_monitor;
SET ROLE rl_stats_monitor;
SELECT count(*) FROM rate_limiter.stats;
RESET ROLE;
GRANT SELECT ON rate_limiter.stats TO rl_stats_monitor;
SET ROLE rl_stats_monitor;
SELECT count(*) FROM rate_limiter.stats;
RESET ROLE;
GRANT EXECUTE ON FUNCTION rate_limiter._stats() TO rl_stats_monitor;
SET ROLE rl_stats_monitor;
SELECT count(*) >= 6 AS sees_the_names FROM rate_limiter.stats;
SELECT rate_limiter.stats_reset();
RESET ROLE;
REVOKE ALL ON SCHEMA rate_limiter FROM rl_stats_monitor;
REVOKE ALL ON rate_limiter.stats FROM rl_stats_monitor;
REVOKE ALL ON FUNCTION rate_limiter._stats() FROM rl_stats_monitor;
DROP ROLE rl_stats_monitor;

SELECT rate_limiter.rate_reset(name) FROM (VALUES ('stats_bucket'), ('stats_all'), ('stats_all_other'), ('stats_wait')) AS l(name);
SELECT rate_limiter.undefine(name) FROM (VALUES ('stats_bucket'), ('stats_all'), ('stats_wait')) AS l(name);
