-- complete_handoff (Redis Cluster only; ack of a job in a chain or group): the first of
-- the cluster's flow steps (ops.complete_step_sliced; docs/design.md §45).
-- Completes the job as complete.lua does and, in the same script (the job's queue slot),
-- records a handoff: the promise that the flow learns of this completion and that what
-- follows is enqueued. flow_step.lua (the {P} slot) and enqueue_step.lua (the next
-- queue's slot) keep that promise, each idempotent; the client that acked runs them at
-- once, and reclaim runs them again for a handoff left behind by a crash. So the step
-- completes exactly once and its follow-up exists exactly once, as on one server, only
-- a moment later.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP   KEYS[2 + GROUP] {P:Q}:handoff
-- ARGV[1] lease token   ARGV[2] result (optional JSON text)   ARGV[3] the job's
-- leaseq-flow header (_core/flow.py: no spaces)
-- Publishes: the job's id on P:done (_common.lua)
-- Returns: {"ok"}: completed now, handoff recorded; {"again", result (optional)}: this
-- lease completed the job before (a repeated ack; its stored result); "lost" (lease not
-- held) or "missing" (no such job): nothing changed

local key, q = KEYS[1], queue_at(2)
local handoff = KEYS[2 + GROUP]
local refused = not_held(key, ARGV[1])
if refused == 'lost' and completed_by(key, ARGV[1]) then
  local stored = redis.call('HGET', key, 'result')
  return {'again', stored and ('+' .. stored) or ''}
end
if refused then return refused end
local now = now_us()
local id = redis.call('HGET', key, 'id')
complete_held(q, key, id, opt(ARGV[2]), now)
redis.call('HSET', handoff, id, int(now) .. ' ' .. ARGV[3] .. ' ' .. ARGV[2])
publish_finished()
return {'ok'}
