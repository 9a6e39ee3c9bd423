-- fail (nack): running -> available after `delay` (the attempt stays counted); -> dead
-- when attempts >= max_attempts (buries + 1); -> cancelled (history) when a cancel was
-- requested. failed_at = now. The error replaces the job's last error unless it is null.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] error (optional)   ARGV[3] delay (µs)
-- ARGV[4] the error as JSON (optional: error_detail)
-- Publishes: the queue on P:wake when the job is available now (delay 0)
-- Returns: the new state (available, scheduled, dead, cancelled), or "lost" when the
-- lease is not held, or "missing" when there is no such job (nothing changed). Repeated
-- by the lease a nack ended, while that lease is the job's last ended one: the state the
-- first call returned, and nothing changes (repeated in _common.lua).

local key, q = KEYS[1], queue_at(2)
local refused = not_held(key, ARGV[1])
if refused then return repeated(key, ARGV[1], 'nack') or refused end
local state = fail_held(q, key, ARGV[1], opt(ARGV[2]), tonumber(ARGV[3]), now_us(),
                        opt(ARGV[4]))
publish_finished()
return state
