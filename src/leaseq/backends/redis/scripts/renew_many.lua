-- renew_many (heartbeat_many): renew for each item, in one script: lease_until = now +
-- extend where the item's lease is held; nothing changes for the others.
--
-- KEYS: one GROUP of keys per distinct queue of the items (_common.lua)
-- ARGV: 4 values per item: group (1-based), job id, lease token, extend (µs)
-- Returns: per item {lease_until, cancel_requested (1/0)}, "lost" (not held) or
-- "missing" (no such job)

local now = now_us()
local out = {}
for i = 1, #ARGV, 4 do
  local q = queue_at(1 + (tonumber(ARGV[i]) - 1) * GROUP)
  local id, token = ARGV[i + 1], ARGV[i + 2]
  local key = q.job .. id
  local refused = not_held(key, token)
  if refused then
    out[#out + 1] = refused
  else
    local lease_until = int(now + tonumber(ARGV[i + 3]))
    redis.call('HSET', key, 'lease_until', lease_until)
    redis.call('ZADD', q.running, lease_until, id)
    local cancel = redis.call('HGET', key, 'cancel_requested') and 1 or 0
    out[#out + 1] = {tonumber(lease_until), cancel}
  end
end
return out
