\set k random(1, :keys)
BEGIN;
INSERT INTO baseline.citus_limits AS l (name, key, value, ts) VALUES ('pgbench', :k::text, 100 - 1, clock_timestamp())
ON CONFLICT (key, name) DO UPDATE
    SET value = least(l.value + greatest(0, extract(epoch FROM EXCLUDED.ts - l.ts) * 1000) * 100 / 60000, 100) - 1,
        ts = greatest(l.ts, EXCLUDED.ts)
    WHERE least(l.value + greatest(0, extract(epoch FROM EXCLUDED.ts - l.ts) * 1000) * 100 / 60000, 100) - 1 >= 0
RETURNING value;
INSERT INTO app.messages (tenant_id, body) VALUES (:k::text, 'a message');
COMMIT;
