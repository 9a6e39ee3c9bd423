-- prune: deletes history jobs that finished more than `age` ago (the job hash, its
-- entries in the history and jobs sets, its id index entry, and its unique key's
-- finished record when that names it), up to `batch` per call; the driver calls again
-- while a call fills its batch. Live jobs are never touched.
--
-- KEYS[1] {P}:index   KEYS[2..] one GROUP of keys per queue (_common.lua); on Redis
-- Cluster one queue's GROUP alone: the index entries are then left to the caller
-- (ops.py deletes them after this script, so a crash in between leaves index entries
-- that name no job, which readers take for "no such job")
-- ARGV[1] age (µs)   ARGV[2] batch
-- Returns: how many jobs were deleted; on Redis Cluster, their ids

local cutoff = '(' .. int(now_us() - tonumber(ARGV[1]))
local left = tonumber(ARGV[2])
local head = #KEYS % GROUP  -- 1 with {P}:index, 0 without
local deleted = 0
local gone = {}
local function done()
  if head == 1 then return deleted end
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
      if records then
        local unique_key = redis.call('HGET', key, 'unique_key')
        if unique_key and redis.call('HGET', q.finished, unique_key) == id then
          redis.call('HDEL', q.finished, unique_key)
        end
      end
      redis.call('DEL', key)
      if head == 1 then redis.call('HDEL', KEYS[1], id) else gone[#gone + 1] = id end
      redis.call('ZREM', set, id)
      redis.call('ZREM', q.jobs, id)
    end
    deleted = deleted + #ids
    left = left - #ids
  end
end
return done()
