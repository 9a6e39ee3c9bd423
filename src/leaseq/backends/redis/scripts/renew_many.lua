-- renew_many (heartbeat_many): renew for each item, in one script, each within its
-- queue's touch limits (touch() in _common.lua); nothing changes for refused or stale
-- items.
--
-- KEYS: one GROUP of keys per distinct queue of the items (_common.lua)
-- ARGV: 4 values per item: group (1-based), job id, lease token, extend (µs)
-- Returns: per item what renew.lua returns: {lease_until, cancel_requested (1/0)},
-- {"max_touches", ...} / {"max_touch_duration", ...} (refused), "lost" (not held) or
-- "missing" (no such job)

local now = now_us()
local queues, limits = {}, {}
local out = {}
for i = 1, #ARGV, 4 do
  local g = ARGV[i]
  if not queues[g] then
    queues[g] = queue_at(1 + (tonumber(g) - 1) * GROUP)
    limits[g] = touch_limits(queues[g])
  end
  local q = queues[g]
  local id = ARGV[i + 1]
  out[#out + 1] = touch(q, q.job .. id, id, ARGV[i + 2], tonumber(ARGV[i + 3]), now,
                        limits[g])
end
return out
