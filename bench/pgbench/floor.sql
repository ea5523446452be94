\set k random(1, :keys)
INSERT INTO baseline.floor_limits AS l (name, key, value, ts) VALUES ('pgbench', :k::text, 100 - 1, clock_timestamp())
ON CONFLICT (name, key) DO UPDATE
    SET value = least(l.value + greatest(0, extract(epoch FROM clock_timestamp() - l.ts) * 1000) * 100 / 60000, 100) - 1,
        ts = greatest(l.ts, clock_timestamp())
    WHERE least(l.value + greatest(0, extract(epoch FROM clock_timestamp() - l.ts) * 1000) * 100 / 60000, 100) - 1 >= 0
RETURNING value;
