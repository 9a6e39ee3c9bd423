-- reclaim, two duties over the given queues:
--
-- 1. running with lease_until <= now -> available now (the attempt stays counted, error
--    "lease expired"); -> dead when attempts are used up; -> cancelled (history) when a
--    cancel was requested. timeouts + 1 and failed_at = now in each case. Up to
--    `expired` jobs, the longest-expired first.
-- 2. dead -> discarded (history, error kept) for dead jobs of queues whose dead_retention
--    setting is set and that went dead (buried set) more than dead_retention ago. Up to
--    `old` jobs, the longest-dead first.
--
-- The driver calls it in rounds of at most 1000 jobs of each.
--
-- KEYS: one GROUP of keys per queue (_common.lua)
-- ARGV[1] expired (limit)   ARGV[2] old (limit)
-- Publishes: each queue that got a job back as available, once, on P:wake
-- Returns: {jobs reclaimed, dead jobs discarded}

local now = now_us()
local t = int(now)
local limit, old_limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local expired, old = {}, {}
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  if limit > 0 then
    local found = redis.call('ZRANGEBYSCORE', q.running, '-inf', t,
                             'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #found, 2 do
      expired[#expired + 1] = {tonumber(found[i + 1]), found[i], q}
    end
  end
  local retention = old_limit > 0 and redis.call('HGET', q.settings, 'dead_retention')
  if retention then
    local cutoff = '(' .. int(now - seconds_us(retention))
    local found = redis.call('ZRANGEBYSCORE', q.buried, '-inf', cutoff,
                             'WITHSCORES', 'LIMIT', 0, old_limit)
    for i = 1, #found, 2 do
      old[#old + 1] = {tonumber(found[i + 1]), found[i], q}
    end
  end
end
local function by_time(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return tonumber(a[2]) < tonumber(b[2])
end
table.sort(expired, by_time)
table.sort(old, by_time)

local count = math.min(limit, #expired)
for i = 1, count do
  local id, q = expired[i][2], expired[i][3]
  local key = q.job .. id
  local f = fields(key, 'attempts', 'max_attempts', 'cancel_requested', 'lease_token')
  -- The lease ends here, expired: no earlier lease's nack, release or bury is a repeat
  -- any more (repeated in _common.lua).
  redis.call('HSET', key, 'failed_at', t, 'ended_token', f.lease_token, 'ended_as', 'expired')
  redis.call('HINCRBY', key, 'timeouts', 1)
  if f.cancel_requested then
    archive(q, key, id, 'cancelled', false, 'lease expired', now)
  elseif tonumber(f.attempts) >= tonumber(f.max_attempts) then
    to_dead(q, key, id, 'lease expired', now)
  else
    reschedule(q, key, id, now, 0, 'lease expired')
  end
end

local discarded = math.min(old_limit, #old)
for i = 1, discarded do
  local id, q = old[i][2], old[i][3]
  archive(q, q.job .. id, id, 'discarded', false, false, now)
end
publish_finished()
return {count, discarded}
