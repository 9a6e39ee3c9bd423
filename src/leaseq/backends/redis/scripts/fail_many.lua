-- fail_many (nack_many): fail for each item, in one script, so all of them happen at
-- once: where the item's lease is held, what fail.lua does; nothing changes for the others.
--
-- KEYS: one GROUP of keys per distinct queue of the items (_common.lua)
-- ARGV: 6 values per item: group (1-based), job id, lease token, error (optional),
-- delay (µs), the error as JSON (optional: error_detail)
-- Publishes: each queue with a job available now, once, on P:wake
-- Returns: per item the new state (available, scheduled, dead, cancelled), "lost" (not
-- held: unchanged) or "missing" (no such job); for a repeat of the nack that ended the
-- item's lease (fail.lua), the state that nack returned. A job listed twice fails once,
-- its second listing a repeat.

local now = now_us()
local queues = {}
local out = {}
for i = 1, #ARGV, 6 do
  local g = ARGV[i]
  queues[g] = queues[g] or queue_at(1 + (tonumber(g) - 1) * GROUP)
  local q = queues[g]
  local key = q.job .. ARGV[i + 1]
  local token = ARGV[i + 2]
  local refused = not_held(key, token)
  if refused then
    out[#out + 1] = repeated(key, token, 'nack') or refused
  else
    out[#out + 1] = fail_held(q, key, token, opt(ARGV[i + 3]), tonumber(ARGV[i + 4]), now,
                              opt(ARGV[i + 5]))
  end
end
publish_finished()
return out
