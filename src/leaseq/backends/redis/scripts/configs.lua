-- configs: the stored settings of several queues. Read-only.
--
-- KEYS: the {P:Q}:settings hash of each queue
-- Returns: per queue, in KEYS order, an HGETALL reply (empty: every setting at default)

local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('HGETALL', key) end
return out
