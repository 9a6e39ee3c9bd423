-- stats: counts per queue, live and historical, at the server's now. Read-only.
-- Scheduled = available_at in the future; a due job still waiting in the delayed set
-- counts as available.
--
-- KEYS: one GROUP of keys per queue (_common.lua)
-- Returns: per queue, in KEYS order, {available, scheduled, running, dead, completed,
-- cancelled, discarded, paused (1/0)}

local now = int(now_us())
local out = {}
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  local due = redis.call('ZCOUNT', q.delayed, '-inf', now)
  out[#out + 1] = {
    redis.call('ZCARD', q.ready) + due,
    redis.call('ZCARD', q.delayed) - due,
    redis.call('ZCARD', q.running),
    redis.call('ZCARD', q.dead),
    redis.call('ZCARD', q.completed),
    redis.call('ZCARD', q.cancelled),
    redis.call('ZCARD', q.discarded),
    redis.call('EXISTS', q.paused),
  }
end
return out
