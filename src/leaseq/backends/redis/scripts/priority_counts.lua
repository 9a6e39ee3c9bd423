-- priority_counts: the available (due now) jobs of one queue per priority, pause
-- ignored. Read-only. The ready set holds due jobs under score -priority: one ZCOUNT per
-- distinct priority, found by skipping from one score to the next (at most PRIORITIES of
-- them). Due jobs that no claim has promoted from the delayed set yet are counted by
-- their hash's priority (few: every claim promotes them).
--
-- KEYS the queue's GROUP (_common.lua)
-- Returns: flat {priority, count, priority, count, ...}, highest priority first

local PRIORITIES = 100000
local q = queue_at(1)
local t = int(now_us())
local counts, order = {}, {}
local function add(priority, n)
  if not counts[priority] then
    counts[priority] = 0
    order[#order + 1] = priority
  end
  counts[priority] = counts[priority] + n
end

local score = '-inf'
for _ = 1, PRIORITIES do
  local top = redis.call('ZRANGEBYSCORE', q.ready, score, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if not top[1] then break end
  add(-tonumber(top[2]), redis.call('ZCOUNT', q.ready, top[2], top[2]))
  score = '(' .. top[2]
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', q.delayed, '-inf', t)) do
  add(tonumber(redis.call('HGET', q.job .. id, 'priority')), 1)
end
table.sort(order, function(a, b) return a > b end)
local out = {}
for _, priority in ipairs(order) do
  out[#out + 1] = int(priority)
  out[#out + 1] = counts[priority]
end
return out
