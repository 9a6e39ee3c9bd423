-- reclaim: running with lease_until <= now -> available now (the attempt stays
-- counted, error "lease expired"); -> dead when attempts are used up; -> cancelled
-- (history) when a cancel was requested. Up to `limit` jobs over the given queues, the
-- longest-expired first. The driver calls it in rounds of at most 1000 jobs.
--
-- KEYS: one GROUP of keys per queue (_common.lua)
-- ARGV[1] limit
-- Publishes: each queue that got a job back as available, once, on P:wake
-- Returns: how many jobs were reclaimed

local now = now_us()
local limit = tonumber(ARGV[1])
local expired = {}
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  local found = redis.call('ZRANGEBYSCORE', q.running, '-inf', int(now),
                           'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #found, 2 do
    expired[#expired + 1] = {tonumber(found[i + 1]), found[i], q}
  end
end
table.sort(expired, function(a, b) return a[1] < b[1] end)

local count = math.min(limit, #expired)
for i = 1, count do
  local id, q = expired[i][2], expired[i][3]
  local key = q.job .. id
  local f = fields(key, 'attempts', 'max_attempts', 'cancel_requested')
  if f.cancel_requested then
    archive(q, key, id, 'cancelled', false, 'lease expired', now)
  elseif tonumber(f.attempts) >= tonumber(f.max_attempts) then
    to_dead(q, key, id, 'lease expired')
  else
    reschedule(q, key, id, now, 0, 'lease expired')
  end
end
return count
