-- complete_many (ack_many): complete for each item, in one script: running ->
-- completed (history) where the item's lease is held; nothing changes for the others.
-- A repeat by the lease that completed the job succeeds, as in complete.lua.
--
-- KEYS: one GROUP of keys per distinct queue of the items (_common.lua)
-- ARGV: 4 values per item: group (1-based), job id, lease token, result (optional)
-- Returns: per item "ok", "lost" (not held: unchanged) or "missing" (no such job)

local now = now_us()
local out = {}
for i = 1, #ARGV, 4 do
  local q = queue_at(1 + (tonumber(ARGV[i]) - 1) * GROUP)
  local id, token = ARGV[i + 1], ARGV[i + 2]
  local key = q.job .. id
  local refused = not_held(key, token)
  if refused == 'lost' and completed_by(key, token) then refused = false
  elseif not refused then complete_held(q, key, id, opt(ARGV[i + 3]), now)
  end
  out[#out + 1] = refused or 'ok'
end
publish_finished()
return out
