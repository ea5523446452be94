-- Every limit's answer 7 seconds after scripts/upgrade_workload.sql, one
-- line each (name|key|ok|retry_after|remaining): what an upgrade must keep.
SET rate_limiter.now_override = '2026-01-01 00:00:07+00';
SELECT p.name || '|' || coalesce(p.key, '') || '|' || r.ok || '|' || coalesce(r.retry_after::text, '') || '|' || r.remaining
FROM (SELECT DISTINCT name, key FROM rate_limiter.rate_limits) AS p,
     LATERAL rate_limiter.rate_check(p.name, p.key, 1,
         config => CASE WHEN p.name = 'inline' THEN rate_limiter.token_bucket(5, '1 second') END) AS r
ORDER BY 1;
