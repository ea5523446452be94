\set k random(1, :keys)
SELECT ok, retry_after_ms, remaining FROM baseline.plpgsql_token_bucket('pgbench', :k::text, 1, 100, 60000, 100);
