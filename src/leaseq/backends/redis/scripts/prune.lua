-- prune: deletes history jobs that finished more than `age` ago (the job hash, its
-- entries in the history and jobs sets, its id index entry), up to `batch` per call;
-- the driver calls again while a call fills its batch. Live jobs are never touched.
--
-- KEYS[1] {P}:index   KEYS[2..] one GROUP of keys per queue (_common.lua)
-- ARGV[1] age (µs)   ARGV[2] batch
-- Returns: how many jobs were deleted

local cutoff = '(' .. int(now_us() - tonumber(ARGV[1]))
local left = tonumber(ARGV[2])
local deleted = 0
for first = 2, #KEYS, GROUP do
  local q = queue_at(first)
  for _, set in ipairs({q.completed, q.cancelled, q.discarded}) do
    if left <= 0 then return deleted end
    local ids = redis.call('ZRANGEBYSCORE', set, '-inf', cutoff, 'LIMIT', 0, left)
    for _, id in ipairs(ids) do
      redis.call('DEL', q.job .. id)
      redis.call('HDEL', KEYS[1], id)
      redis.call('ZREM', set, id)
      redis.call('ZREM', q.jobs, id)
    end
    deleted = deleted + #ids
    left = left - #ids
  end
end
return deleted
