-- claim: available -> running for up to `limit` due jobs of one or more queues, in one
-- global order: priority desc, then available_at, then id. Each job gets attempts + 1,
-- reserves + 1, a fresh lease token, worker_id, started_at on its first claim, and a new
-- lease: leased_at = touched_at = now, touches = 0, lease_until = now + its lease.
--
-- A job's lease is the `lease` argument when given, else the job's own lease, else its
-- queue's default_lease setting, else the `default_lease` argument; always capped by the
-- queue's max_lease setting. (Seconds as text: the winner is returned as it was written,
-- so Python reads back exactly the number it stored.)
--
-- Paused queues are skipped. Due jobs in a queue's delayed set are first promoted to its
-- ready set, oldest first, at most max(limit, 1000) per queue per call, so one call never
-- blocks the server for long yet can always fill its limit. (After a burst of more due
-- jobs than that, a later-due job of higher priority may wait for the next calls.)
--
-- The lease token is max(previous token + 1, now in µs): strictly increasing per job,
-- and still fresh after a server restart that lost the last writes (docs/redis.md).
--
-- Flow control (Backend.claim): a queue takes at most allowance() of its candidates,
-- the room under its concurrency_limit (its running set's size) and the whole tokens of
-- its rate bucket (bucket_tokens). Each queue that spent tokens stores what is left
-- (rate_tokens) and when (rate_at) in its settings hash. The script is atomic, so racing
-- claimers see each other's spending and can never exceed a limit. The limits come in
-- the one HMGET of the settings that a queue with candidates made already for its
-- leases: a queue without limits sends no more commands than before, and an empty one
-- (an idle worker's poll) reads no settings at all. (Reading them before the ZRANGE, to
-- fetch only the allowance, cost idle polls about a quarter of their throughput.)
--
-- KEYS: one GROUP of keys per queue (_common.lua); several groups = several queues
-- ARGV[1] worker_id   ARGV[2] lease (optional, seconds)   ARGV[3] limit
-- ARGV[4] default_lease (seconds)
-- Returns: per claimed job, in claim order, {id, queue, kind, payload, priority,
-- attempts, max_attempts, unique_key, lease_token, lease_until, created_at, lease
-- (seconds, the one applied), headers, available_at, reserves (this lease included),
-- releases, timeouts, tags, snoozes}; kind, unique_key, headers and tags nil when absent

local now = now_us()
local t = int(now)
local worker, lease, limit = ARGV[1], opt(ARGV[2]), tonumber(ARGV[3])
local promote = math.max(limit, 1000)

local candidates = {}
local spending = {}  -- the rate-limited queues, with their bucket's tokens now
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  if redis.call('EXISTS', q.paused) == 0 then
    local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', t, 'LIMIT', 0, promote)
    for _, id in ipairs(due) do
      local f = fields(q.job .. id, 'priority', 'available_at')
      redis.call('ZADD', q.ready, int(-tonumber(f.priority)), rank(f.available_at, id))
    end
    if #due > 0 then redis.call('ZREMRANGEBYRANK', q.delayed, 0, #due - 1) end
    local top = redis.call('ZRANGE', q.ready, 0, limit - 1, 'WITHSCORES')
    if #top > 0 then
      local s = fields(q.settings, 'default_lease', 'max_lease', unpack(LIMIT_FIELDS))
      q.default_lease = s.default_lease or ARGV[4]
      q.max_lease = s.max_lease
      local take = limit
      if s.concurrency_limit or s.rate_per_sec then
        local cap = s.concurrency_limit and tonumber(s.concurrency_limit)
        local rate = s.rate_per_sec and tonumber(s.rate_per_sec)
        local running = cap and redis.call('ZCARD', q.running) or 0
        local tokens = rate and bucket_tokens(s, now)
        take = allowance(limit, cap, running, rate, tokens)
        if rate then
          q.claimed = 0
          spending[#spending + 1] = {q, tokens}
        end
      end
      for i = 1, math.min(#top, 2 * take), 2 do
        candidates[#candidates + 1] = {tonumber(top[i + 1]), top[i], q}
      end
    end
  end
end
if #KEYS > GROUP then
  -- Each queue's candidates are in order already; merge them into the global order.
  table.sort(candidates, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end

local out = {}
for i = 1, math.min(limit, #candidates) do
  local member, q = candidates[i][2], candidates[i][3]
  local id = id_of_rank(member)
  local key = q.job .. id
  local f = fields(key, 'queue', 'kind', 'payload', 'priority', 'attempts', 'max_attempts',
                   'unique_key', 'lease_token', 'created_at', 'lease', 'reserves',
                   'started_at', 'headers', 'available_at', 'releases', 'timeouts', 'tags',
                   'snoozes')
  local seconds = lease or f.lease or q.default_lease
  local lease_us = seconds_us(seconds)
  if q.max_lease and seconds_us(q.max_lease) < lease_us then
    seconds, lease_us = q.max_lease, seconds_us(q.max_lease)
  end
  local lease_until = int(now + math.max(lease_us, 1))
  local token = int(math.max(tonumber(f.lease_token) + 1, now))
  local attempts = int(tonumber(f.attempts) + 1)
  local reserves = int(tonumber(f.reserves or '0') + 1)
  local set = {'state', 'running', 'lease_token', token, 'worker_id', worker,
               'lease_until', lease_until, 'attempts', attempts,
               'reserves', reserves, 'leased_at', t,
               'touched_at', t, 'touches', '0', 'updated_at', t}
  if not f.started_at then set[#set + 1] = 'started_at'; set[#set + 1] = t end
  redis.call('ZREM', q.ready, member)
  hset(key, set)
  redis.call('ZADD', q.running, lease_until, id)
  out[#out + 1] = {id, f.queue, f.kind, f.payload, f.priority, attempts, f.max_attempts,
                   f.unique_key, token, lease_until, f.created_at, seconds, f.headers,
                   f.available_at, reserves, f.releases or '0', f.timeouts or '0', f.tags,
                   f.snoozes or '0'}
  if q.claimed then q.claimed = q.claimed + 1 end
end
-- Only a claim that started jobs spends: one that found none leaves the bucket's clock
-- alone, so the refill since the last spending is never lost.
for _, spent in ipairs(spending) do
  local q, tokens = spent[1], spent[2]
  if q.claimed > 0 then
    redis.call('HSET', q.settings, 'rate_tokens', decimal(tokens - q.claimed), 'rate_at', t)
  end
end
return out
