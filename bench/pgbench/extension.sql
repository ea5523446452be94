\set k random(1, 100000)
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('pgbench', :k::text);
