-- heads (Redis Cluster only): the jobs claim.lua would take from one queue now, in claim
-- order, changing nothing. A claim over several queues, whose keys lie in different
-- slots, asks each queue this first, merges the answers into the one global order in
-- Python and then claims from each queue as many jobs as it has among the first `limit`
-- (ops.py). The same candidates as claim.lua: the ready set's first `limit` and the due
-- jobs still in the delayed set (at most max(limit, 1000)), cut to the queue's
-- allowance under its concurrency_limit and rate bucket; nothing of a paused queue.
--
-- KEYS the queue's GROUP (_common.lua)
-- ARGV[1] limit
-- Returns: {score, member, score, member, ...}: the ready-set score (-priority) and
-- member (rank(available_at, id)) of each candidate, in claim order

local q = queue_at(1)
local limit = tonumber(ARGV[1])
if redis.call('EXISTS', q.paused) == 1 then return {} end
local now = now_us()
local candidates = {}
local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', int(now), 'LIMIT', 0,
                       math.max(limit, 1000))
for _, id in ipairs(due) do
  local f = fields(q.job .. id, 'priority', 'available_at')
  candidates[#candidates + 1] = {-tonumber(f.priority), rank(f.available_at, id)}
end
local top = redis.call('ZRANGE', q.ready, 0, limit - 1, 'WITHSCORES')
for i = 1, #top, 2 do
  candidates[#candidates + 1] = {tonumber(top[i + 1]), top[i]}
end
if #candidates == 0 then return {} end

local take = limit
local s = fields(q.settings, unpack(LIMIT_FIELDS))
if s.concurrency_limit or s.rate_per_sec then
  local cap = s.concurrency_limit and tonumber(s.concurrency_limit)
  local rate = s.rate_per_sec and tonumber(s.rate_per_sec)
  local running = cap and redis.call('ZCARD', q.running) or 0
  take = allowance(limit, cap, running, rate, rate and bucket_tokens(s, now))
end
table.sort(candidates, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end)
local out = {}
for i = 1, math.min(take, #candidates) do
  out[#out + 1] = int(candidates[i][1])
  out[#out + 1] = candidates[i][2]
end
return out
