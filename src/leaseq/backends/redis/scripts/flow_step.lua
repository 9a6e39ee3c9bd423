-- flow_step (Redis Cluster only): the second of the cluster's flow steps, in the {P} slot
-- (docs/design.md §45). Applies one completed step (complete_handoff.lua
-- recorded it) to its flow hash, as complete_step.lua does on one server, and hands out
-- and indexes the id of the job that follows, which enqueue_step.lua then writes under
-- that id. Idempotent, keyed by the flow step: a chain's step idx is applied once
-- remaining < size - idx, a group's member once its r:<idx> is stored; applying it again
-- changes nothing and replies the same follow-up (id, spec and value) while that may
-- still need writing, so a repeat (a retried ack, reclaim finishing a handoff) can only
-- write the one job that id names.
--
-- KEYS[1] {P}:ids   KEYS[2] {P}:index   KEYS[3] {P}:queues   KEYS[4] {P}:flow:<id>
-- ARGV[1] chain | group   ARGV[2] the step's index in the flow   ARGV[3] its result
-- (optional JSON text)
-- Returns: {} (nothing follows, or it is known to exist); {id, spec, value}: the job
-- that follows, id, its spec (backends/_flows.py) and the JSON text to splice into it;
-- "noflow" (no flow stored, or it cannot have this step pending: nothing changed)

local ids, index, queues, flow = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local kind, idx, result = ARGV[1], tonumber(ARGV[2]), opt(ARGV[3])
local value = result or 'null'

local f = fields(flow, 'remaining', 'size', 'then', 'step', 'job_id')
if not f.remaining then return 'noflow' end
local remaining, size = tonumber(f.remaining), tonumber(f.size)

-- A group's results, in member order, as the callback receives them.
local function joined(mine)
  local parts = {}
  for i = 0, size - 1 do
    parts[#parts + 1] = (i == idx and mine) or redis.call('HGET', flow, 'r:' .. i) or 'null'
  end
  return '[' .. table.concat(parts, ',') .. ']'
end

if kind == 'chain' then
  if remaining < size - idx then
    -- Applied before. Its follow-up may still need writing while the flow names it as
    -- the step enqueued last; once a later step was applied, that one ran, so it exists.
    if tonumber(f.step) == idx + 1 then
      return {f.job_id, redis.call('HGET', flow, 's:' .. (idx + 1)), value}
    end
    return {}
  end
elseif redis.call('HEXISTS', flow, 'r:' .. idx) == 1 then
  if remaining == 0 and f['then'] and f.job_id then
    return {f.job_id, f['then'], joined(false)}
  end
  return {}
end
if remaining <= 0 then return 'noflow' end

local left = remaining - 1
local spec, step, follow
if kind == 'chain' then
  step = idx + 1
  spec = redis.call('HGET', flow, 's:' .. step)
  follow = value
elseif left == 0 and f['then'] then
  spec, step, follow = f['then'], 0, joined(value)
end
redis.call('HSET', flow, 'remaining', int(left))
if kind == 'group' then redis.call('HSET', flow, 'r:' .. idx, value) end
if not spec then return {} end
local queue = cjson.decode(spec).queue
local id = int(redis.call('INCR', ids))
redis.call('HSET', index, id, queue)
redis.call('SADD', queues, queue)
redis.call('HSET', flow, 'job_id', id, 'step', step)
return {id, spec, follow}
