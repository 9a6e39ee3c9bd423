-- kick: dead -> available now, with attempts reset to 0 and kicks + 1, for up to `limit`
-- dead jobs of one queue, oldest (lowest id) first. The driver calls it in rounds of at
-- most 1000.
--
-- KEYS the queue's GROUP (_common.lua)
-- ARGV[1] limit
-- Publishes: the queue on P:wake, once, when a job was kicked
-- Returns: how many jobs were kicked

local q = queue_at(1)
local now = now_us()
local at = int(now)
local ids = redis.call('ZRANGE', q.dead, 0, tonumber(ARGV[1]) - 1)
for _, id in ipairs(ids) do
  local key = q.job .. id
  redis.call('HSET', key, 'state', 'available', 'attempts', '0', 'available_at', at,
             'updated_at', at)
  redis.call('HINCRBY', key, 'kicks', 1)
  redis.call('ZREM', q.dead, id)
  redis.call('ZREM', q.buried, id)
  make_available(q, id, at, redis.call('HGET', key, 'priority'), now)
end
return #ids
