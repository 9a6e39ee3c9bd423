-- enqueue_step (Redis Cluster only): the last of the cluster's flow steps, in the next
-- job's queue slot (docs/design.md §45). Writes the job that follows a
-- completed flow step under the id flow_step.lua handed out for it, unless a job with
-- that id exists already: the id is the fence, handed out once per flow step, so
-- however often a handoff is finished only one job is written. With the completed
-- step's handoff key (same queue, same slot) it also ends that handoff.
--
-- KEYS[1..GROUP] the next job's queue GROUP   KEYS[GROUP + 1] (optional) the completed
-- step's {P:Q}:handoff
-- ARGV[1] id   ARGV[2] queue   ARGV[3] kind (optional)   ARGV[4] payload (JSON text)
-- ARGV[5] priority   ARGV[6] max_attempts   ARGV[7] delay (µs from now)
-- ARGV[8] lease (optional, seconds)   ARGV[9] headers (optional, JSON text)
-- ARGV[10] the completed step's job id (with its handoff key)
-- ARGV[11] tags (optional, JSON array text)
-- Publishes: the queue on P:wake when the job is due now (_common.lua)
-- Returns: 1 written now, 0 it existed

local q = queue_at(1)
local id = ARGV[1]
local key = q.job .. id
local written = 0
if redis.call('EXISTS', key) == 0 then
  local now = now_us()
  local at = int(now + tonumber(ARGV[7]))
  local kind, lease, headers = opt(ARGV[3]), opt(ARGV[8]), opt(ARGV[9])
  local set = {'id', id, 'queue', ARGV[2], 'payload', ARGV[4], 'priority', ARGV[5],
               'max_attempts', ARGV[6], 'state', 'available', 'attempts', '0',
               'lease_token', '0', 'available_at', at, 'created_at', int(now)}
  if kind then set[#set + 1] = 'kind'; set[#set + 1] = kind end
  if lease then set[#set + 1] = 'lease'; set[#set + 1] = lease end
  if headers then set[#set + 1] = 'headers'; set[#set + 1] = headers end
  local tags = ARGV[11] and opt(ARGV[11])
  if tags then set[#set + 1] = 'tags'; set[#set + 1] = tags end
  hset(key, set)
  redis.call('ZADD', q.jobs, id, id)
  make_available(q, id, at, ARGV[5], now)
  written = 1
end
if #KEYS > GROUP then redis.call('HDEL', KEYS[GROUP + 1], ARGV[10]) end
return written
