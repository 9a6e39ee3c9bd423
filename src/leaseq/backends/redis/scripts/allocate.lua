-- allocate (Redis Cluster only): the global half of an enqueue, run before the queues'
-- halves (enqueue.lua's cluster form). Hands out `n` new ids, files each in the id index
-- under its job's queue, and lists the queues. Until the queue's script has written the
-- job, an indexed id has no job hash, which every reader takes for "no such job"; a crash
-- in between leaves only such index entries behind.
--
-- It checks max_queues (configure_server) first, as enqueue.lua does off a cluster: a
-- batch that would add queues to {P}:queues beyond it gets {"queues", name, max_queues,
-- n}, and nothing is written (the queues' halves have not run yet).
--
-- KEYS[1] {P}:ids   KEYS[2] {P}:index   KEYS[3] {P}:queues   KEYS[4] {P}:server
-- ARGV: the queue name of each new job, in batch order
-- Returns: the first id; the others follow it one by one, in ARGV order
local cap = redis.call('HGET', KEYS[4], 'max_queues')
if cap then
  local new, seen = {}, {}
  for _, queue in ipairs(ARGV) do
    if not seen[queue] then
      seen[queue] = true
      if redis.call('SISMEMBER', KEYS[3], queue) == 0 then new[#new + 1] = queue end
    end
  end
  local known = redis.call('SCARD', KEYS[3])
  if #new > 0 and known + #new > tonumber(cap) then return {'queues', new[1], cap, known + 1} end
end

local last = redis.call('INCRBY', KEYS[1], #ARGV)
local first = last - #ARGV + 1
local entries = {}
local names = {}
for i, queue in ipairs(ARGV) do
  entries[#entries + 1] = int(first + i - 1)
  entries[#entries + 1] = queue
  names[queue] = true
  -- HSET in rounds: Lua's unpack takes a few thousand values at most.
  if #entries == 2000 or i == #ARGV then
    hset(KEYS[2], entries)
    entries = {}
  end
end
for queue in pairs(names) do redis.call('SADD', KEYS[3], queue) end
return first
