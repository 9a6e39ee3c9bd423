-- complete (ack): running -> completed, in history with its result; the live job and
-- its unique key are gone. Repeated by the lease that completed the job, it is a no-op
-- that succeeds.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] result (optional JSON text)
-- Returns: "ok", or "lost" when the lease is not held, or "missing" when there is no
-- such job (nothing changed)

local key, q = KEYS[1], queue_at(2)
local refused = not_held(key, ARGV[1])
if refused == 'lost' and completed_by(key, ARGV[1]) then return 'ok' end
if refused then return refused end
complete_held(q, key, redis.call('HGET', key, 'id'), opt(ARGV[2]), now_us())
publish_finished()
return 'ok'
