-- bury: running -> dead, with `reason` as its error (the last error when null),
-- buries + 1, at `priority` when given (a kick files it under that priority).
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] reason (optional)   ARGV[3] priority (optional)
-- ARGV[4] the error as JSON (optional: error_detail, stored with a reason)
-- Returns: "ok", or "lost" when the lease is not held, or "missing" when there is no
-- such job (nothing changed). Repeated by the lease a bury ended, while that lease is the
-- job's last ended one: "ok", and nothing changes (repeated in _common.lua).

local key, q, token = KEYS[1], queue_at(2), ARGV[1]
local refused = not_held(key, token)
if refused then
  if repeated(key, token, 'bury') then return 'ok' end
  return refused
end
local priority = opt(ARGV[3])
if priority then redis.call('HSET', key, 'priority', priority) end
to_dead(q, key, redis.call('HGET', key, 'id'), opt(ARGV[2]), now_us(), opt(ARGV[4]),
        {'ended_token', token, 'ended_as', 'bury:dead'})
publish_finished()
return 'ok'
