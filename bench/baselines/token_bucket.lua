-- BASELINE (c): the common Redis token bucket in Lua, run with EVALSHA.
-- KEYS[1] = the limit's key; ARGV = rate, period_ms, capacity, count.
-- Returns {1, remaining} when admitted, {0, retry_after_ms} when refused.
-- Not transactional with the application's database.
local rate, period, capacity, count = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
local state = redis.call('HMGET', KEYS[1], 'value', 'ts')
local value = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
local v = math.min(value + math.max(0, now - ts) * rate / period, capacity) - count
if v < 0 then
  return {0, tostring(-v * period / rate)}
end
redis.call('HSET', KEYS[1], 'value', tostring(v), 'ts', tostring(math.max(ts, now)))
return {1, tostring(v)}
