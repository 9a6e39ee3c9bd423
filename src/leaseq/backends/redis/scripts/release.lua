-- release: running -> available after `delay` with the attempt given back (not a
-- failure: failed_at is left alone, and the last error is kept unless a note is given),
-- releases + 1, at `priority` when given (the ready set's score follows it); ->
-- cancelled (history) when a cancel was requested.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] delay (µs)   ARGV[3] priority (optional)
-- ARGV[4] a note stored as the last error (optional)   ARGV[5] its JSON (error_detail)
-- Publishes: the queue on P:wake when the job is available now (delay 0)
-- Returns: the new state (available, scheduled, cancelled), or "lost" when the lease is
-- not held, or "missing" when there is no such job (nothing changed). Repeated by the
-- lease a release ended, while that lease is the job's last ended one: the state the
-- first call returned, and nothing changes (repeated in _common.lua).

local key, q, token = KEYS[1], queue_at(2), ARGV[1]
local refused = not_held(key, token)
if refused then return repeated(key, token, 'release') or refused end
local f = fields(key, 'id', 'cancel_requested', 'attempts', 'releases')
local delay, now, priority = tonumber(ARGV[2]), now_us(), opt(ARGV[3])
if f.cancel_requested then
  redis.call('HSET', key, 'ended_token', token, 'ended_as', 'release:cancelled')
  archive(q, key, f.id, 'cancelled', false, false, now)
  publish_finished()
  return 'cancelled'
end
local state = 'available'
if delay > 0 then state = 'scheduled' end
-- reschedule() reads the priority it files the job under: set it first.
if priority then redis.call('HSET', key, 'priority', priority) end
reschedule(q, key, f.id, now, delay, opt(ARGV[4]) or false,
           {'attempts', int(tonumber(f.attempts) - 1),
            'releases', int(tonumber(f.releases or '0') + 1),
            'ended_token', token, 'ended_as', 'release:' .. state}, opt(ARGV[5]))
return state
