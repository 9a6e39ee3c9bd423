-- fail (nack): running -> available after `delay` (the attempt stays counted); -> dead
-- when attempts >= max_attempts; -> cancelled (history) when a cancel was requested.
-- The error replaces the job's last error unless it is null.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] error (optional)   ARGV[3] delay (µs)
-- Publishes: the queue on P:wake when the job is available now (delay 0)
-- Returns: the new state (available, scheduled, dead, cancelled), or "lost" when the
-- lease is not held, or "missing" when there is no such job (nothing changed)

local key, q = KEYS[1], queue_at(2)
local refused = not_held(key, ARGV[1])
if refused then return refused end
local f = fields(key, 'id', 'attempts', 'max_attempts', 'cancel_requested')
local err, delay, now = opt(ARGV[2]), tonumber(ARGV[3]), now_us()
if f.cancel_requested then
  archive(q, key, f.id, 'cancelled', false, err, now)
  return 'cancelled'
end
if tonumber(f.attempts) >= tonumber(f.max_attempts) then
  to_dead(q, key, f.id, err)
  return 'dead'
end
reschedule(q, key, f.id, now, delay, err)
if delay > 0 then return 'scheduled' end
return 'available'
