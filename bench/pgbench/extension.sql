\set k random(1, :keys)
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('pgbench', :k::text);
