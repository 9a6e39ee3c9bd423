-- retry: dead -> available now with attempts and snoozes reset to 0 and kicks + 1;
-- scheduled -> available now with its attempts kept.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- Publishes: the queue on P:wake when the job was retried
-- Returns: "ok"; "missing" when there is no such job; otherwise the job's state, which
-- does not allow a retry (nothing changed)

local key, q = KEYS[1], queue_at(2)
local f = fields(key, 'id', 'state', 'available_at', 'priority')
if not f.state then return 'missing' end
local now = now_us()
if f.state == 'dead' then
  redis.call('HSET', key, 'attempts', '0')
  redis.call('HINCRBY', key, 'kicks', 1)
  redis.call('HDEL', key, 'snoozes')
  redis.call('ZREM', q.dead, dead_member(f.id), f.id)
  redis.call('ZREM', q.buried, f.id)
elseif f.state == 'available' and tonumber(f.available_at) > now then
  redis.call('ZREM', q.delayed, f.id)
else
  return f.state
end
local at = int(now)
redis.call('HSET', key, 'state', 'available', 'available_at', at, 'updated_at', at)
make_available(q, f.id, at, f.priority, now)
return 'ok'
