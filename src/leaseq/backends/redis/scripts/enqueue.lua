-- enqueue: nothing -> available or scheduled, for a batch of jobs, atomically. A job
-- whose (queue, unique_key) is held by a live job is not written: that job's id comes
-- back with created = 0. Twins inside one batch are one job. With unique_for, a job of
-- the same key that finished (any terminal state) less than unique_for ago counts as a
-- twin too, when no live one exists.
--
-- max_jobs (a queue setting) is checked for every queue of the batch, here, where it
-- costs one HGET per queue: when a queue's live jobs (ready + delayed + running + dead)
-- plus the jobs this batch would create in it exceed max_jobs, nothing is written. So the
-- script decides everything first (pass 1) and writes after (pass 2).
--
-- max_queues (configure_server) is checked here too, for one HGET: a batch that would add
-- queues to {P}:queues beyond it is refused ({"queues", name, max_queues}), nothing written.
--
-- KEYS[1] {P}:ids   KEYS[2] {P}:index   KEYS[3] {P}:queues   KEYS[4] {P}:server
-- KEYS[5] {P}:global, only when a job of the batch has unique_scope="global"
-- KEYS[5 or 6..] one GROUP of keys per distinct queue of the batch (_common.lua)
-- ARGV: 14 values per job, in batch order:
--   group (1-based number of the job's queue group), queue name, kind (optional),
--   payload (JSON text), priority, max_attempts, unique_key (optional),
--   delay (µs from now), run_at (optional, µs since the epoch; wins over delay),
--   lease (optional, seconds), unique_for (optional, µs), headers (optional, JSON text),
--   tags (optional, JSON array text), global ("1": unique_scope="global", else "0")
--
-- Global keys: {P}:global maps a key to the id of the last job enqueued with it under
-- unique_scope="global". No finishing script touches it: the key is held while that job
-- is live (its hash says available, running or dead), so it is freed lazily, at no cost to
-- acks. That job's hash, in its own queue's slot, is read by a name built here (Redis
-- allows it outside cluster mode; on a cluster ops.py reads it and reserves the key with
-- allocate.lua, see the cluster form below).
--
-- CLUSTER FORM (Redis Cluster, where the {P} keys live in another slot): KEYS is one
-- queue's GROUP alone; ARGV[1] is "1" for a dry run (decide, write nothing, reply {} or
-- the "full" refusal) or "0"; then 15 values per job: the 14 above (group always 1) and
-- the job's id, handed out and indexed beforehand by allocate.lua. A job that turns out
-- a twin leaves its id unused (ops.py removes it from the index again).
-- There the global value says what ops.py decided from the {P} slot (design.md §47):
-- "0" not global; "=H" a twin of job H, unless a live job holds the key in this queue;
-- "1" its key is reserved for this job's id in {P}:global: it is created unless a live job
-- holds the key in this queue, or another producer took the reservation over as abandoned
-- and voided the id ({P:Q}:void, void.lua): then nothing is written for it, the void entry
-- is consumed and its created flag is 2 (ops.py enqueues it afresh).
-- Publishes: each queue that got a job due now, once, on P:wake (_common.lua)
-- Returns: {id1, created1, id2, created2, ...} (created: 1 new, 0 existing twin, 2 voided:
-- cluster form only, above); or
-- {"full", group, max_jobs} when a queue would exceed its max_jobs (nothing written)

local lead = #KEYS % GROUP  -- the {P} keys before the groups: 0 (cluster), 4 or 5
local cluster = lead == 0
local global = lead == 5 and KEYS[5]
local base = lead + 1  -- KEYS index of the first queue GROUP
local first_arg = cluster and 2 or 1  -- ARGV index of the first job's values
local N = cluster and 15 or 14
local now = now_us()
local created_at = int(now)

local groups = {}
local function group(number)
  local q = groups[number]
  if not q then
    q = queue_at(base + (tonumber(number) - 1) * GROUP)
    groups[number] = q
  end
  return q
end

-- The newest job of this key that finished less than `window` µs ago, or false.
local function recent_twin(q, unique_key, window)
  if not window then return false end
  local id = redis.call('HGET', q.finished, unique_key)
  if not id then return false end
  -- Read from the job itself: a pruned job is no twin, whatever the record says.
  local finished_at = redis.call('HGET', q.job .. id, 'finished_at')
  if finished_at and tonumber(finished_at) > now - tonumber(window) then return id end
  return false
end

-- The live job that holds a global key, or false (see the header).
local function global_holder(unique_key)
  local id = redis.call('HGET', global, unique_key)
  if not id then return false end
  local queue = redis.call('HGET', KEYS[2], id)
  if not queue then return false end
  local prefix = string.sub(KEYS[1], 2, #KEYS[1] - 5)  -- "{P}:ids" -> P
  local state = redis.call('HGET', '{' .. prefix .. ':' .. queue .. '}:job:' .. id, 'state')
  if state == 'available' or state == 'running' or state == 'dead' then return id end
  return false
end

-- A global key's last holder, finished less than `window` µs ago, or false.
local function recent_global(unique_key, window)
  if not window then return false end
  local id = redis.call('HGET', global, unique_key)
  local queue = id and redis.call('HGET', KEYS[2], id)
  if not queue then return false end
  local prefix = string.sub(KEYS[1], 2, #KEYS[1] - 5)
  local finished_at = redis.call('HGET', '{' .. prefix .. ':' .. queue .. '}:job:' .. id,
                                 'finished_at')
  if finished_at and tonumber(finished_at) > now - tonumber(window) then return id end
  return false
end

-- Pass 1: decide, writing nothing. For the job whose values start at ARGV[i], twin[i] is
-- the id of an existing twin, same[i] the number (1-based) of an earlier job of this batch
-- that it duplicates.
local twin, same, creates, first_of, voided = {}, {}, {}, {}, {}
for i = first_arg, #ARGV, N do
  local g, unique_key = ARGV[i], opt(ARGV[i + 6])
  if unique_key then
    local q = group(g)
    local flag = ARGV[i + 13]
    local shared = (global or cluster) and flag ~= '0'
    -- group digits never hold ':'; 'G' stands for every queue
    local mine = (shared and 'G' or g) .. ':' .. unique_key
    local live = redis.call('HGET', q.unique, unique_key)
      or (shared and not cluster and global_holder(unique_key))
    if live then
      twin[i] = live
    elseif cluster and shared and flag ~= '1' then
      twin[i] = string.sub(flag, 2)  -- "=H": the {P} slot named the holder
    elseif first_of[mine] then
      same[i] = first_of[mine]
    elseif cluster and shared then
      local void = string.sub(q.job, 1, #q.job - 4) .. 'void'  -- "{P:Q}:job:" -> "{P:Q}:void"
      if redis.call('HEXISTS', void, ARGV[i + 14]) == 1 then
        voided[i] = void
      else
        first_of[mine] = (i - first_arg) / N + 1
      end
    elseif shared then
      twin[i] = recent_global(unique_key, opt(ARGV[i + 10])) or nil
      if not twin[i] then first_of[mine] = (i - first_arg) / N + 1 end
    else
      twin[i] = recent_twin(q, unique_key, opt(ARGV[i + 10])) or nil
      if not twin[i] then first_of[mine] = (i - first_arg) / N + 1 end
    end
  end
  if not twin[i] and not same[i] and not voided[i] then creates[g] = (creates[g] or 0) + 1 end
end

if not cluster then  -- on a cluster, allocate.lua checks max_queues
  local refused = over_max_queues(KEYS[3], KEYS[4], ARGV, first_arg + 1, N)  -- the names
  if refused then return refused end
end

for g, count in pairs(creates) do
  local q = group(g)
  local cap = redis.call('HGET', q.settings, 'max_jobs')
  if cap then
    local live = redis.call('ZCARD', q.ready) + redis.call('ZCARD', q.delayed)
      + redis.call('ZCARD', q.running) + redis.call('ZCARD', q.dead)
    if live + count > tonumber(cap) then return {'full', g, cap} end
  end
end

if cluster and ARGV[1] == '1' then return {} end

-- Pass 2: write.
local out = {}
for i = first_arg, #ARGV, N do
  if twin[i] then
    out[#out + 1] = tonumber(twin[i])
    out[#out + 1] = 0
  elseif same[i] then
    out[#out + 1] = out[2 * same[i] - 1]  -- that job's id: ids and flags alternate
    out[#out + 1] = 0
  elseif voided[i] then
    redis.call('HDEL', voided[i], ARGV[i + 14])  -- its producer now knows: never written
    out[#out + 1] = tonumber(ARGV[i + 14])
    out[#out + 1] = 2
  else
    local q = group(ARGV[i])
    local queue, kind, payload = ARGV[i + 1], opt(ARGV[i + 2]), ARGV[i + 3]
    local priority, unique_key = ARGV[i + 4], opt(ARGV[i + 6])
    local run_at, lease, headers = opt(ARGV[i + 8]), opt(ARGV[i + 9]), opt(ARGV[i + 11])
    local tags = opt(ARGV[i + 12])
    local id = cluster and ARGV[i + 14] or int(redis.call('INCR', KEYS[1]))
    local at = run_at or int(now + tonumber(ARGV[i + 7]))
    local key = q.job .. id
    local set = {'id', id, 'queue', queue, 'payload', payload, 'priority', priority,
                 'max_attempts', ARGV[i + 5], 'state', 'available', 'attempts', '0',
                 'lease_token', '0', 'available_at', at, 'created_at', created_at}
    if kind then set[#set + 1] = 'kind'; set[#set + 1] = kind end
    if lease then set[#set + 1] = 'lease'; set[#set + 1] = lease end
    if headers then set[#set + 1] = 'headers'; set[#set + 1] = headers end
    if tags then set[#set + 1] = 'tags'; set[#set + 1] = tags end
    if unique_key then
      set[#set + 1] = 'unique_key'; set[#set + 1] = unique_key
      redis.call('HSET', q.unique, unique_key, id)
      if global and ARGV[i + 13] == '1' then redis.call('HSET', global, unique_key, id) end
    end
    hset(key, set)
    redis.call('ZADD', q.jobs, id, id)
    make_available(q, id, at, priority, now)
    if not cluster then
      redis.call('HSET', KEYS[2], id, queue)
      redis.call('SADD', KEYS[3], queue)
    end
    out[#out + 1] = tonumber(id)
    out[#out + 1] = 1
  end
end
return out
