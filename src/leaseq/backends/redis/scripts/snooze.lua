-- snooze (RetryAfter): running -> available after `delay` with the attempt given back,
-- snoozes + 1 (not a release: releases and failed_at are left alone, and so is the last
-- error); -> dead when the job's snoozes reached its queue's max_snoozes setting (error
-- "snoozed N times ...", buries + 1); -> cancelled (history) when a cancel was requested.
-- With scope "queue", first pauses the job's queue until now + delay (extend_pause: only
-- ever later), whatever becomes of the job; one script, so the pause and the job's move
-- are one atomic write.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua); with scope
-- "queue" on a single server, then {P}:queues and {P}:configured (the queue gets a
-- settings row, as a SQL queues row; on Redis Cluster register.lua lists it before)
-- ARGV[1] lease token   ARGV[2] delay (µs)   ARGV[3] scope: "job" or "queue"
-- Publishes: the queue on P:wake when the job is available now (delay 0) and its queue is
-- not paused; the job's id on P:done when it went dead or was cancelled
-- Returns: the new state (available, scheduled, dead, cancelled), or "lost" when the lease
-- is not held, or "missing" when there is no such job (nothing changed). Repeated by the
-- lease a snooze ended, while that lease is the job's last ended one: the state the first
-- call returned, and nothing changes, the pause included (repeated in _common.lua).

local key, q, token = KEYS[1], queue_at(2), ARGV[1]
local refused = not_held(key, token)
if refused then return repeated(key, token, 'snooze') or refused end
local f = fields(key, 'id', 'queue', 'cancel_requested', 'attempts', 'snoozes')
local delay, now = tonumber(ARGV[2]), now_us()
if ARGV[3] == 'queue' then
  if #KEYS > GROUP + 1 then
    redis.call('SADD', KEYS[GROUP + 2], f.queue)
    redis.call('SADD', KEYS[GROUP + 3], f.queue)
  end
  extend_pause(q, now + delay, now)
end
if f.cancel_requested then
  redis.call('HSET', key, 'ended_token', token, 'ended_as', 'snooze:cancelled')
  archive(q, key, f.id, 'cancelled', false, false, now)
  publish_finished()
  return 'cancelled'
end
local snoozes = tonumber(f.snoozes or '0')
local cap = redis.call('HGET', q.settings, 'max_snoozes')
if cap and snoozes >= tonumber(cap) then
  to_dead(q, key, f.id, 'snoozed ' .. int(snoozes) .. " times, the queue's max_snoozes="
          .. cap .. '; not again', now, false, {'ended_token', token, 'ended_as', 'snooze:dead'})
  publish_finished()
  return 'dead'
end
local state = 'available'
if delay > 0 then state = 'scheduled' end
reschedule(q, key, f.id, now, delay, false,
           {'attempts', int(tonumber(f.attempts) - 1), 'snoozes', int(snoozes + 1),
            'ended_token', token, 'ended_as', 'snooze:' .. state}, false)
return state
