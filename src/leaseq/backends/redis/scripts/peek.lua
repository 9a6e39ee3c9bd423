-- peek: up to `limit` live jobs of one queue in one state, changing nothing. Read-only.
--   available  due jobs in claim order (priority desc, available_at, id), pause ignored:
--              the ready set's first `limit`, merged with the due jobs still in the
--              delayed set, oldest first, as many as a claim would promote
--              (max(limit, 1000)): what the next claim would take
--   scheduled  jobs not yet due, by (available_at, id)
--   dead       in the order kick takes them: priority desc, then oldest (lowest id)
--
-- KEYS the queue's GROUP (_common.lua)
-- ARGV[1] state   ARGV[2] limit
-- Returns: {now (µs), {HGETALL reply, ...}}

local q = queue_at(1)
local state, limit = ARGV[1], tonumber(ARGV[2])
local now = now_us()
local t = int(now)
local ids = {}

if state == 'available' then
  local candidates = {}
  local top = redis.call('ZRANGE', q.ready, 0, limit - 1, 'WITHSCORES')
  for i = 1, #top, 2 do candidates[#candidates + 1] = {tonumber(top[i + 1]), top[i]} end
  local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', t, 'LIMIT', 0,
                         math.max(limit, 1000))
  for _, id in ipairs(due) do
    local f = fields(q.job .. id, 'priority', 'available_at')
    candidates[#candidates + 1] = {-tonumber(f.priority), rank(f.available_at, id)}
  end
  table.sort(candidates, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  for i = 1, math.min(limit, #candidates) do ids[i] = id_of_rank(candidates[i][2]) end
elseif state == 'scheduled' then
  -- Members of equal score sort as text ("10" < "9"), not by id: read every job that
  -- shares the last score too, then order by (time, id) here.
  local found = redis.call('ZRANGEBYSCORE', q.delayed, '(' .. t, '+inf', 'WITHSCORES',
                           'LIMIT', 0, limit)
  local seen, jobs = {}, {}
  for i = 1, #found, 2 do
    seen[found[i]] = true
    jobs[#jobs + 1] = {tonumber(found[i + 1]), tonumber(found[i]), found[i]}
  end
  if #found > 0 then
    local last = found[#found]
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', q.delayed, last, last)) do
      if not seen[id] then jobs[#jobs + 1] = {tonumber(last), tonumber(id), id} end
    end
  end
  table.sort(jobs, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  for i = 1, math.min(limit, #jobs) do ids[i] = jobs[i][3] end
else
  for i, member in ipairs(redis.call('ZRANGE', q.dead, 0, limit - 1)) do
    ids[i] = int(tonumber(member))
  end
end

local out = {}
for _, id in ipairs(ids) do out[#out + 1] = redis.call('HGETALL', q.job .. id) end
return {now, out}
