-- complete_step (ack of a job in a chain or group, docs/workflows.md): complete, and in
-- the same script what follows from it. A chain's next step is enqueued with the result
-- spliced in as its first argument; a group member's result is stored, and the member
-- that completes the group enqueues the callback with every member's result, in member
-- order. So a step's follow-up exists exactly when the step is completed: a stale lease
-- (another worker re-ran the job) changes nothing, and a repeat by the lease that
-- completed the job succeeds without doing anything again.
--
-- FLOW HASH {P}:flow:<id> (written by ops.start_flow): kind (chain | group), size,
-- remaining (steps or members not completed), step and job_id (chain: the step enqueued
-- last; group: job_id is the callback's once enqueued), then (group: the callback's
-- spec), s:<i> (chain: step i's spec, i >= 1), r:<i> (group: member i's result, JSON
-- text). A spec is a JSON object of strings (backends/_flows.py): queue, head, rest,
-- priority, max_attempts, delay (seconds), kind?, lease?, headers?, tags?; the payload is
-- head .. value .. rest, spliced as text, so no JSON is re-encoded here.
--
-- Not on Redis Cluster, where the job's queue, the {P} keys, the flow and the next queue
-- lie in different slots: there complete_handoff.lua, flow_step.lua and enqueue_step.lua
-- do this in three calls (docs/design.md §45).
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP
-- then {P}:ids, {P}:index, {P}:queues, {P}:flow:<id>, and the GROUP of the queue of the
-- job that may follow (absent when none can)
-- ARGV[1] lease token   ARGV[2] result (optional JSON text)   ARGV[3] chain | group
-- ARGV[4] the job's index in the flow
-- Publishes: the follow-up's queue on P:wake when it is due now, and the job's id on
-- P:done (_common.lua)
-- Returns: "ok"; "lost" (lease not held) or "missing" (no such job), nothing changed;
-- "noflow" (the flow is not stored or already complete: nothing changed)

local key, q = KEYS[1], queue_at(2)
local base = 2 + GROUP
local ids, index, queues, flow = KEYS[base], KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
local nq = #KEYS >= base + 4 + GROUP - 1 and queue_at(base + 4) or nil
local token, result, kind, idx = ARGV[1], opt(ARGV[2]), ARGV[3], tonumber(ARGV[4])

local refused = not_held(key, token)
if refused == 'lost' and completed_by(key, token) then return 'ok' end
if refused then return refused end

-- Read and decide before the first write.
local f = fields(flow, 'remaining', 'size', 'then')
if not f.remaining or tonumber(f.remaining) <= 0 then return 'noflow' end
local left = tonumber(f.remaining) - 1
local value = result or 'null'
local spec, step
if kind == 'chain' then
  step = idx + 1
  spec = redis.call('HGET', flow, 's:' .. step)
elseif left == 0 and f['then'] then
  local parts = {}
  for i = 0, tonumber(f.size) - 1 do
    -- This member's result is not stored yet; every other member's is (remaining says
    -- so: each member stores its result in the script that counts it down).
    parts[#parts + 1] = (i == idx) and value or (redis.call('HGET', flow, 'r:' .. i) or 'null')
  end
  spec, value, step = f['then'], '[' .. table.concat(parts, ',') .. ']', 0
end
local s
if spec then
  s = cjson.decode(spec)
  local prefix = string.match(ids, '^{([^}]+)}:ids$')
  if not nq or nq.job ~= '{' .. prefix .. ':' .. s.queue .. '}:job:' then
    return redis.error_reply('complete_step: the follow-up queue keys do not match its spec')
  end
end

local now = now_us()
complete_held(q, key, redis.call('HGET', key, 'id'), result, now)
redis.call('HSET', flow, 'remaining', int(left))
if kind == 'group' then redis.call('HSET', flow, 'r:' .. idx, result or 'null') end
if s then
  local id = int(redis.call('INCR', ids))
  local at = int(now + seconds_us(s.delay))
  local set = {'id', id, 'queue', s.queue, 'payload', s.head .. value .. s.rest,
               'priority', s.priority, 'max_attempts', s.max_attempts, 'state', 'available',
               'attempts', '0', 'lease_token', '0', 'available_at', at,
               'created_at', int(now)}
  if s.kind then set[#set + 1] = 'kind'; set[#set + 1] = s.kind end
  if s.lease then set[#set + 1] = 'lease'; set[#set + 1] = s.lease end
  if s.headers then set[#set + 1] = 'headers'; set[#set + 1] = s.headers end
  if s.tags then set[#set + 1] = 'tags'; set[#set + 1] = s.tags end
  hset(nq.job .. id, set)
  redis.call('ZADD', nq.jobs, id, id)
  make_available(nq, id, at, s.priority, now)
  redis.call('HSET', index, id, s.queue)
  redis.call('SADD', queues, s.queue)
  redis.call('HSET', flow, 'job_id', id, 'step', step)
end
publish_finished()  -- waiters on this job's result (DONE CHANNEL, _common.lua)
return 'ok'
