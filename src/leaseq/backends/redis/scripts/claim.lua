-- claim: available -> running for up to `limit` due jobs of one or more queues, in one
-- global order: priority desc, then available_at, then id. Each job gets attempts + 1,
-- a fresh lease token, worker_id, lease_until = now + lease, and started_at on its
-- first claim.
--
-- Paused queues are skipped. Due jobs in a queue's delayed set are first promoted to its
-- ready set, oldest first, at most max(limit, 1000) per queue per call, so one call never
-- blocks the server for long yet can always fill its limit. (After a burst of more due
-- jobs than that, a later-due job of higher priority may wait for the next calls.)
--
-- The lease token is max(previous token + 1, now in µs): strictly increasing per job,
-- and still fresh after a server restart that lost the last writes (docs/redis.md).
--
-- KEYS: one GROUP of keys per queue (_common.lua); several groups = several queues
-- ARGV[1] worker_id   ARGV[2] lease (µs)   ARGV[3] limit
-- Returns: one HGETALL reply (field, value, ...) per claimed job, in claim order

local now = now_us()
local worker, lease, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local promote = math.max(limit, 1000)

local candidates = {}
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  if redis.call('EXISTS', q.paused) == 0 then
    local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', int(now), 'LIMIT', 0, promote)
    for _, id in ipairs(due) do
      local f = fields(q.job .. id, 'priority', 'available_at')
      redis.call('ZADD', q.ready, int(-tonumber(f.priority)), rank(f.available_at, id))
    end
    if #due > 0 then redis.call('ZREMRANGEBYRANK', q.delayed, 0, #due - 1) end
    local top = redis.call('ZRANGE', q.ready, 0, limit - 1, 'WITHSCORES')
    for i = 1, #top, 2 do
      candidates[#candidates + 1] = {tonumber(top[i + 1]), top[i], q}
    end
  end
end
if #KEYS > GROUP then
  -- Each queue's candidates are in order already; merge them into the global order.
  table.sort(candidates, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end

local lease_until = int(now + lease)
local out = {}
for i = 1, math.min(limit, #candidates) do
  local member, q = candidates[i][2], candidates[i][3]
  local id = id_of_rank(member)
  local key = q.job .. id
  local token = math.max(tonumber(redis.call('HGET', key, 'lease_token')) + 1, now)
  redis.call('ZREM', q.ready, member)
  redis.call('HINCRBY', key, 'attempts', 1)
  redis.call('HSET', key, 'state', 'running', 'lease_token', int(token),
             'worker_id', worker, 'lease_until', lease_until)
  redis.call('HSETNX', key, 'started_at', int(now))
  redis.call('ZADD', q.running, lease_until, id)
  out[#out + 1] = redis.call('HGETALL', key)
end
return out
