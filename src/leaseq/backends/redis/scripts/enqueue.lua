-- enqueue: nothing -> available or scheduled, for a batch of jobs, atomically. A job
-- whose (queue, unique_key) is held by a live job is not written: that job's id comes
-- back with created = 0. Twins inside one batch are one job.
--
-- KEYS[1] {P}:ids   KEYS[2] {P}:index   KEYS[3] {P}:queues
-- KEYS[4..] one GROUP of keys per distinct queue of the batch (_common.lua)
-- ARGV: 9 values per job, in batch order:
--   group (1-based number of the job's queue group), queue name, kind (optional),
--   payload (JSON text), priority, max_attempts, unique_key (optional),
--   delay (µs from now), run_at (optional, µs since the epoch; wins over delay)
-- Publishes: each queue that got a job due now, once, on P:wake (_common.lua)
-- Returns: {id1, created1, id2, created2, ...} (created: 1 new, 0 existing twin)

local now = now_us()
local created_at = int(now)
local out = {}
for i = 1, #ARGV, 9 do
  local q = queue_at(4 + (tonumber(ARGV[i]) - 1) * GROUP)
  local queue, kind, payload = ARGV[i + 1], opt(ARGV[i + 2]), ARGV[i + 3]
  local priority, max_attempts, unique_key = ARGV[i + 4], ARGV[i + 5], opt(ARGV[i + 6])
  local run_at = opt(ARGV[i + 8])
  local twin = unique_key and redis.call('HGET', q.unique, unique_key)
  if twin then
    out[#out + 1] = tonumber(twin)
    out[#out + 1] = 0
  else
    local id = int(redis.call('INCR', KEYS[1]))
    local at = run_at or int(now + tonumber(ARGV[i + 7]))
    local key = q.job .. id
    redis.call('HSET', key, 'id', id, 'queue', queue, 'payload', payload,
               'priority', priority, 'max_attempts', max_attempts, 'state', 'available',
               'attempts', '0', 'lease_token', '0', 'available_at', at,
               'created_at', created_at)
    if kind then redis.call('HSET', key, 'kind', kind) end
    if unique_key then
      redis.call('HSET', key, 'unique_key', unique_key)
      redis.call('HSET', q.unique, unique_key, id)
    end
    redis.call('ZADD', q.jobs, id, id)
    make_available(q, id, at, priority, now)
    redis.call('HSET', KEYS[2], id, queue)
    redis.call('SADD', KEYS[3], queue)
    out[#out + 1] = tonumber(id)
    out[#out + 1] = 1
  end
end
return out
