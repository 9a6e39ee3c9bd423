-- admit: a chain's or group's queues counted against max_queues (configure_server) before
-- the flow writes anything (ops.start_flow), its later steps' and callback's included, so
-- a flow started never meets the cap halfway. The same count as enqueue.lua's
-- (over_max_queues, _common.lua); only the {P} keys, so one slot on a cluster too.
--
-- KEYS[1] {P}:queues   KEYS[2] {P}:server
-- ARGV: the flow's queue names, distinct
-- Returns: {} (the new names are now listed in {P}:queues), or the refusal
-- {"queues", name, max_queues, n} with nothing written

local refused, new = over_max_queues(KEYS[1], KEYS[2], ARGV, 1, 1)
if refused then return refused end
-- No cap (new is nil): enqueue.lua lists each queue when it gets a job.
if new and #new > 0 then redis.call('SADD', KEYS[1], unpack(new)) end
return {}
