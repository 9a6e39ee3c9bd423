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
-- With unique_scope="global" jobs in the batch it also reserves their keys (design.md
-- §47): after the queue names come, per key, the job's 1-based position in the batch, the
-- key, and the holder the client read (ops.enqueue_global; "" for none). If any key's
-- holder in {P}:global is another by now, nothing is written and the reply is {"moved",
-- key}: the client reads again. Else each key names its job's new id, and {P}:global_at
-- records when (the server's µs), so that a reservation whose job never appears can be
-- told abandoned once it is old.
--
-- KEYS[1] {P}:ids   KEYS[2] {P}:index   KEYS[3] {P}:queues   KEYS[4] {P}:server
-- KEYS[5] {P}:global   KEYS[6] {P}:global_at, only with reservations
-- ARGV: the queue name of each new job, in batch order; with reservations, ARGV[1] is
-- the number of jobs n, ARGV[2..n+1] their queue names, then (position, key, holder)
-- per reserved key
-- Returns: the first id; the others follow it one by one, in ARGV order
local reserving = #KEYS == 6
local names = ARGV
local reserve_at = #ARGV + 1
if reserving then
  local n = tonumber(ARGV[1])
  names = {}
  for i = 1, n do names[i] = ARGV[i + 1] end
  reserve_at = n + 2
end

local refused = over_max_queues(KEYS[3], KEYS[4], names, 1, 1)
if refused then return refused end

for i = reserve_at, #ARGV, 3 do
  if (redis.call('HGET', KEYS[5], ARGV[i + 1]) or '') ~= ARGV[i + 2] then
    return {'moved', ARGV[i + 1]}
  end
end
local now = reserving and int(now_us())  -- read before the first write, as every script

local last = redis.call('INCRBY', KEYS[1], #names)
local first = last - #names + 1
local entries = {}
local listed = {}
for i, queue in ipairs(names) do
  entries[#entries + 1] = int(first + i - 1)
  entries[#entries + 1] = queue
  listed[queue] = true
  -- HSET in rounds: Lua's unpack takes a few thousand values at most.
  if #entries == 2000 or i == #names then
    hset(KEYS[2], entries)
    entries = {}
  end
end
for queue in pairs(listed) do redis.call('SADD', KEYS[3], queue) end
if reserving then
  for i = reserve_at, #ARGV, 3 do
    local id = int(first + tonumber(ARGV[i]) - 1)
    redis.call('HSET', KEYS[5], ARGV[i + 1], id)
    redis.call('HSET', KEYS[6], ARGV[i + 1], now)
  end
end
return first
