\set k random(1, :keys)
BEGIN;
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('pgbench', :k::text);
INSERT INTO app.messages (tenant_id, body) VALUES (:k::text, 'a message');
COMMIT;
