-- kick: dead -> available now, with attempts and snoozes reset to 0 and kicks + 1, for up
-- to `limit` dead jobs of one queue, by priority (highest first), then oldest (lowest id)
-- first: the dead set's order. The driver calls it in rounds of at most 1000.
--
-- KEYS the queue's GROUP (_common.lua)
-- ARGV[1] limit
-- Publishes: the queue on P:wake, once, when a job was kicked
-- Returns: how many jobs were kicked

local q = queue_at(1)
local now = now_us()
local at = int(now)
local members = redis.call('ZRANGE', q.dead, 0, tonumber(ARGV[1]) - 1)
for _, member in ipairs(members) do
  local id = int(tonumber(member))
  local key = q.job .. id
  redis.call('HSET', key, 'state', 'available', 'attempts', '0', 'available_at', at,
             'updated_at', at)
  redis.call('HINCRBY', key, 'kicks', 1)
  redis.call('HDEL', key, 'snoozes')
  redis.call('ZREM', q.dead, member)
  redis.call('ZREM', q.buried, id)
  make_available(q, id, at, redis.call('HGET', key, 'priority'), now)
end
return #members
