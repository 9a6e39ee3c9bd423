-- renew (heartbeat): running -> running with lease_until = now + extend, when the
-- caller holds the lease. The caller raises JobCancelled when cancel was requested (the
-- lease is extended first, so the holder has time to give the job up).
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] extend (µs)
-- Returns: {lease_until, cancel_requested (1/0)}, or "lost" when the lease is not
-- held, or "missing" when there is no such job

local key, q = KEYS[1], queue_at(2)
local refused = not_held(key, ARGV[1])
if refused then return refused end
local lease_until = int(now_us() + tonumber(ARGV[2]))
redis.call('HSET', key, 'lease_until', lease_until)
redis.call('ZADD', q.running, lease_until, redis.call('HGET', key, 'id'))
local cancel = redis.call('HGET', key, 'cancel_requested') and 1 or 0
return {tonumber(lease_until), cancel}
