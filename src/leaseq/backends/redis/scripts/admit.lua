-- admit: a chain's or group's queues counted against max_queues (configure_server) before
-- the flow writes anything (ops.start_flow), its later steps' and callback's included, so
-- a flow started never meets the cap halfway. The same count as enqueue.lua's; only the
-- {P} keys, so one slot on a cluster too.
--
-- KEYS[1] {P}:queues   KEYS[2] {P}:server
-- ARGV: the flow's queue names, distinct
-- Returns: {} (the new names are now listed in {P}:queues), or the refusal
-- {"queues", name, max_queues, n} with nothing written

local cap = redis.call('HGET', KEYS[2], 'max_queues')
if not cap then return {} end  -- no cap: enqueue.lua lists each queue when it gets a job
local new = {}
for i = 1, #ARGV do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 0 then new[#new + 1] = ARGV[i] end
end
local known = redis.call('SCARD', KEYS[1])
if #new > 0 and known + #new > tonumber(cap) then
  return {'queues', new[1], cap, known + 1}
end
if #new > 0 then redis.call('SADD', KEYS[1], unpack(new)) end
return {}
