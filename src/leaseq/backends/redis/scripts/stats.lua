-- stats: counts per queue, live and historical, at the server's now. Read-only.
-- Scheduled = available_at in the future; a due job still waiting in the delayed set
-- counts as available.
--
-- The oldest due job: the ready set orders by priority first, so its oldest job is the
-- oldest of the first member of each priority (one ZRANGEBYSCORE per distinct priority,
-- at most PRIORITIES of them), or the first of the delayed set when that one is due.
--
-- KEYS[1] {P}:configured   KEYS[2..] one GROUP of keys per queue (_common.lua); on Redis
-- Cluster one queue's GROUP alone (its settings-row flag is then 0: ops.py reads the
-- {P}:configured set in a call of its own)
-- ARGV: the queue names, in KEYS order
-- Returns: per queue, in KEYS order, {available, scheduled, running, dead, completed,
-- cancelled, discarded, paused (1/0), has a settings row (1/0), µs the oldest due job
-- has been due (nil when none is), µs when a timed pause in force ends (nil when none
-- is)}

local PRIORITIES = 1000
local now = now_us()
local t = int(now)

local function oldest_due(q)
  local oldest = false
  local first = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
  if first[1] and tonumber(first[2]) <= now then oldest = tonumber(first[2]) end
  local score = '-inf'
  for _ = 1, PRIORITIES do
    local top = redis.call('ZRANGEBYSCORE', q.ready, score, '+inf', 'WITHSCORES',
                           'LIMIT', 0, 1)
    if not top[1] then break end
    local at = tonumber(redis.call('HGET', q.job .. id_of_rank(top[1]), 'available_at'))
    if not oldest or at < oldest then oldest = at end
    score = '(' .. top[2]
  end
  return oldest and int(math.max(now - oldest, 0))
end

-- The end of a timed pause in force (µs text), or false (none, or paused until resume).
local function timed_end(q)
  local value = redis.call('GET', q.paused)
  if value == '1' then return false end
  return value or false
end

local head = #KEYS % GROUP  -- 1 with {P}:configured, 0 without
local out = {}
for first = head + 1, #KEYS, GROUP do
  local q = queue_at(first)
  local due = redis.call('ZCOUNT', q.delayed, '-inf', t)
  out[#out + 1] = {
    redis.call('ZCARD', q.ready) + due,
    redis.call('ZCARD', q.delayed) - due,
    redis.call('ZCARD', q.running),
    redis.call('ZCARD', q.dead),
    redis.call('ZCARD', q.completed),
    redis.call('ZCARD', q.cancelled),
    redis.call('ZCARD', q.discarded),
    redis.call('EXISTS', q.paused),
    head == 1 and redis.call('SISMEMBER', KEYS[1], ARGV[(first - 2) / GROUP + 1]) or 0,
    oldest_due(q),
    timed_end(q),
  }
end
return out
