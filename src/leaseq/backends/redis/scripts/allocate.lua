-- allocate (Redis Cluster only): the global half of an enqueue, run before the queues'
-- halves (enqueue.lua's cluster form). Hands out `n` new ids, files each in the id index
-- under its job's queue, and lists the queues. Until the queue's script has written the
-- job, an indexed id has no job hash, which every reader takes for "no such job"; a crash
-- in between leaves only such index entries behind.
--
-- KEYS[1] {P}:ids   KEYS[2] {P}:index   KEYS[3] {P}:queues
-- ARGV: the queue name of each new job, in batch order
-- Returns: the first id; the others follow it one by one, in ARGV order

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
