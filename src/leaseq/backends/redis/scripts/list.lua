-- list: jobs of the given queues, live and historical, with id > `after`, in id order,
-- optionally only those in one state (scheduled and available are told apart by the
-- server's now), of one kind, with one unique key (exact matches) and carrying one tag
-- (its quoted text in the job's tags, a JSON array whose tags hold no quote). Read-only.
--
-- Each call reads at most `scan` ids per queue. Ids past the lowest id at which some
-- queue's read stopped are left for the next call, since that queue may hold smaller
-- ones; the reply says where to go on from.
--
-- KEYS: one GROUP of keys per queue (_common.lua)
-- ARGV[1] after (id)   ARGV[2] limit   ARGV[3] state (optional)   ARGV[4] scan
-- ARGV[5] kind (optional)   ARGV[6] unique_key (optional)   ARGV[7] tag (optional)
-- Returns: {next after (0 when every queue was read to its end), now (µs),
--           {HGETALL reply, ...}}

local after, limit, state = ARGV[1], tonumber(ARGV[2]), opt(ARGV[3])
local scan = tonumber(ARGV[4])
local kind, unique_key = opt(ARGV[5]), opt(ARGV[6])
local tag = ARGV[7] and opt(ARGV[7])
local quoted = tag and ('"' .. tag .. '"')
local now = now_us()
local candidates = {}
local frontier = false
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  local ids = redis.call('ZRANGEBYSCORE', q.jobs, '(' .. after, '+inf', 'LIMIT', 0, scan)
  for _, id in ipairs(ids) do
    candidates[#candidates + 1] = {tonumber(id), q.job .. id}
  end
  if #ids == scan then
    local last = tonumber(ids[#ids])
    if not frontier or last < frontier then frontier = last end
  end
end
table.sort(candidates, function(a, b) return a[1] < b[1] end)

local function state_of(f)
  if f.state == 'available' and tonumber(f.available_at) > now then return 'scheduled' end
  return f.state
end

local out = {}
for _, c in ipairs(candidates) do
  if frontier and c[1] > frontier then break end
  local f = fields(c[2], 'state', 'available_at', 'kind', 'unique_key', 'tags')
  if f.state and (not state or state_of(f) == state)
      and (not kind or f.kind == kind) and (not unique_key or f.unique_key == unique_key)
      and (not quoted or (f.tags and string.find(f.tags, quoted, 1, true))) then
    out[#out + 1] = redis.call('HGETALL', c[2])
    if #out == limit then return {c[1], now, out} end
  end
end
return {frontier or 0, now, out}
