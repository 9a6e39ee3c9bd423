-- prune: deletes history jobs that finished more than `age` ago (the job hash, its
-- entries in the history and jobs sets, its id index entry, its unique key's finished
-- record when that names it, and the global key it held under unique_scope="global"),
-- up to `batch` per call; the driver calls again while a call fills its batch. Live jobs
-- are never touched.
--
-- KEYS[1] {P}:index   KEYS[2] {P}:global   KEYS[3..] one GROUP of keys per queue
-- (_common.lua); on Redis Cluster one queue's GROUP alone: the index entries and global
-- keys are then left to the caller (ops.py deletes them after this script, so a crash in
-- between leaves index entries that name no job, which readers take for "no such job",
-- and global keys held by no job, which enqueue.lua takes for free)
-- ARGV[1] age (µs)   ARGV[2] batch
-- Returns: how many jobs were deleted; on Redis Cluster, per deleted job its id and its
-- unique key ("" for none)

local cutoff = '(' .. int(now_us() - tonumber(ARGV[1]))
local left = tonumber(ARGV[2])
local head = #KEYS % GROUP  -- 2 with {P}:index and {P}:global, 0 without
local deleted = 0
local gone = {}
-- Only a prefix that ever used a global key pays for it: a look-up per pruned keyed job.
local globals = head == 2 and redis.call('EXISTS', KEYS[2]) == 1
local function done()
  if head == 2 then return deleted end
  return gone
end
for first = head + 1, #KEYS, GROUP do
  local q = queue_at(first)
  -- Only queues that finished keyed jobs pay a read per pruned job.
  local records = redis.call('EXISTS', q.finished) == 1
  for _, set in ipairs({q.completed, q.cancelled, q.discarded}) do
    if left <= 0 then return done() end
    local ids = redis.call('ZRANGEBYSCORE', set, '-inf', cutoff, 'LIMIT', 0, left)
    for _, id in ipairs(ids) do
      local key = q.job .. id
      local unique_key = false
      -- records: this call began with finished keyed jobs in the queue. Once pruning
      -- empties q.finished a later call no longer reads keys, unless globals: a global
      -- key must still go with its holder.
      if records or globals then
        unique_key = redis.call('HGET', key, 'unique_key')
      end
      if records and unique_key and redis.call('HGET', q.finished, unique_key) == id then
        redis.call('HDEL', q.finished, unique_key)
      end
      if globals and unique_key and redis.call('HGET', KEYS[2], unique_key) == id then
        redis.call('HDEL', KEYS[2], unique_key)
      end
      redis.call('DEL', key)
      if head == 2 then
        redis.call('HDEL', KEYS[1], id)
      else
        gone[#gone + 1] = id
        gone[#gone + 1] = unique_key or ''
      end
      redis.call('ZREM', set, id)
      redis.call('ZREM', q.jobs, id)
    end
    deleted = deleted + #ids
    left = left - #ids
  end
end
return done()
