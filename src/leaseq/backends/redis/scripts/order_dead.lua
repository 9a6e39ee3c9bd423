-- order_dead (migrate): refiles dead jobs that an older leaseq filed as score id, member
-- id under the kick order of the dead set (KEY SCHEMA: score -priority - 2^31, member
-- dead_member(id)). Those old scores are ids (>= 1) and the new ones are <= 0, so the
-- old entries are the range (0, +inf): each call refiles at most `window` of them per
-- queue, and the driver calls again while a queue had a full window.
--
-- KEYS: one GROUP of keys per queue (_common.lua)
-- ARGV[1] window (most dead jobs refiled per queue)
-- Returns: per queue, how many dead jobs were refiled

local window = tonumber(ARGV[1])
local out = {}
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  local old = redis.call('ZRANGEBYSCORE', q.dead, '(0', '+inf', 'LIMIT', 0, window)
  for _, member in ipairs(old) do
    redis.call('ZREM', q.dead, member)
    redis.call('ZADD', q.dead, dead_score(redis.call('HGET', q.job .. member, 'priority')),
               dead_member(member))
  end
  out[#out + 1] = #old
end
return out
