-- bury: running -> dead, with `reason` as its error (the last error when null),
-- buries + 1, at `priority` when given (a kick files it under that priority).
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] reason (optional)   ARGV[3] priority (optional)
-- ARGV[4] the error as JSON (optional: error_detail, stored with a reason)
-- Returns: "ok", or "lost" when the lease is not held, or "missing" when there is no
-- such job (nothing changed)

local key, q = KEYS[1], queue_at(2)
local refused = not_held(key, ARGV[1])
if refused then return refused end
local priority = opt(ARGV[3])
if priority then redis.call('HSET', key, 'priority', priority) end
to_dead(q, key, redis.call('HGET', key, 'id'), opt(ARGV[2]), now_us(), opt(ARGV[4]))
publish_finished()
return 'ok'
