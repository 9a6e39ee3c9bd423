-- next_due: seconds until a job of one or more queues may next become claimable without
-- anything else happening (Backend.next_due). Per queue that is not paused until resume:
-- its earliest job is due now when its ready set holds any, else at its delayed set's
-- lowest score (due jobs not yet promoted count as due now); then limits.next_start
-- (_common.lua) with the queue's running count and its rate bucket's tokens now, and
-- after_pause with what is left of a timed pause. The least over the queues wins.
-- Read-only: the bucket is not written, nor jobs promoted.
--
-- With ARGV[1] "due" (Backend.due_now) it answers instead whether a job of a queue that
-- is not paused (of either kind) is due now, whatever the queue's limits: "1", or nil.
--
-- KEYS: one GROUP of keys per queue (_common.lua); several groups = several queues
-- ARGV[1] "due" (optional)
-- Returns: the seconds as decimal text (<= 0: a job could be claimed now), or nil when
-- nothing tells (no jobs waiting, or due jobs held back by concurrency_limit)

local now = now_us()
local best = nil
local due_only = ARGV[1] == 'due'
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  local left = pause_left(q, now)
  if left ~= false and not (due_only and left) then
    local earliest = nil
    if redis.call('ZCARD', q.ready) > 0 then
      earliest = 0
    else
      local head = redis.call('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
      if #head > 0 then earliest = (tonumber(head[2]) - now) / 1000000 end
    end
    if due_only then
      if earliest and earliest <= 0 then return '1' end
    elseif earliest then
      local s = fields(q.settings, unpack(LIMIT_FIELDS))
      local cap = s.concurrency_limit and tonumber(s.concurrency_limit)
      local rate = s.rate_per_sec and tonumber(s.rate_per_sec)
      local running = cap and redis.call('ZCARD', q.running) or 0
      local tokens = rate and bucket_tokens(s, now)
      local wait = after_pause(next_start(earliest, running, cap, rate, tokens), left)
      if wait and (not best or wait < best) then best = wait end
    end
  end
end
if best then return decimal(best) end
return nil
