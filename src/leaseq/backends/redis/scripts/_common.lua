-- leaseq on Redis: helpers shared by every script. The loader (driver.py) prepends this
-- file to each scripts/<operation>.lua, so every EVALSHA body is self-contained and the
-- helpers exist once.
--
-- KEY SCHEMA. P is Settings.table_prefix ([a-z0-9_]), Q a queue name ([A-Za-z0-9_.-]):
-- both are validated before a key is built (keys.py), so neither holds braces, colons,
-- quotes or glob characters. Everything else a caller gives (unique keys, kinds,
-- payloads, errors, worker ids) is stored as hash fields and values, never in key names.
--
--   {P}:ids                STRING  the last job id handed out (INCR); ids are never reused
--   {P}:index              HASH    job id -> queue name, for live and historical jobs
--   {P}:queues             SET     every queue name that ever held a job or was paused
--   {P:Q}:job:<id>         HASH    one job, live or historical (fields below)
--   {P:Q}:jobs             ZSET    every job of the queue, live or historical: score id
--   {P:Q}:ready            ZSET    available jobs known to be due: score -priority,
--                                  member rank(available_at, id) (see rank below)
--   {P:Q}:delayed          ZSET    available jobs not yet promoted to ready:
--                                  score available_at, member id
--   {P:Q}:running          ZSET    leased jobs: score lease_until, member id
--   {P:Q}:dead             ZSET    dead jobs: score id (kick takes the oldest), member id
--   {P:Q}:completed        ZSET    history by terminal state:
--   {P:Q}:cancelled                  score finished_at, member id
--   {P:Q}:discarded
--   {P:Q}:unique           HASH    unique_key -> id of the live job that holds it
--   {P:Q}:paused           STRING  "1" while the queue is paused (claims skip it)
--
-- The {P:Q} hash tag puts all of one queue's keys in one Redis Cluster slot; the {P}
-- keys share another (docs/redis.md says what that means for Cluster).
--
-- WAKE CHANNEL (pub/sub, not a key): P:wake. A script that puts jobs of queue Q into its
-- ready set (make_available of a due job, resume) PUBLISHes Q there, once per queue per
-- call, unless Q is paused; listening workers (worker/listen.py) then claim at once
-- instead of at their next poll. Delayed jobs publish nothing (the poll finds them), nor
-- does claim's own promotion of due delayed jobs. keys.py (Keys.wake) builds the same
-- name; wake() below takes P and Q from the queue's "{P:Q}:job:" key prefix, since
-- neither may hold ":" or "}". The PUBLISH is a hint: it goes through redis.pcall, so
-- a user whose ACL denies the channel still has every script work, and is only woken
-- by polling.
--
-- JOB HASH FIELDS: id, queue, kind?, payload (JSON text), priority, max_attempts,
-- unique_key?, state (available | running | dead | completed | cancelled | discarded;
-- "scheduled" is available with available_at in the future), attempts, lease_token,
-- available_at, created_at, lease_until?, worker_id?, started_at?, error?,
-- cancel_requested? ("1"), finished_at?, result? (JSON text). "?" = absent when null.
--
-- TIMES are integer microseconds since the Unix epoch, written as decimal text, and
-- "now" is always the server's TIME, never the client's clock. Integers travel as
-- text (int() below): Lua's tostring would print 1.7e+15 and lose digits.
--
-- KEYS of one queue arrive as a GROUP, in the order of PARTS below (keys.py builds
-- them in the same order; a test holds the two lists equal): the job-key prefix
-- "{P:Q}:job:" first, then the queue's other keys.
--
-- OPTIONAL ARGV values (kind, unique_key, run_at, error, reason, result) are "" for
-- null and "+" followed by the value otherwise, so an empty string stays distinct.
--
-- Every script reads and checks before its first write, so a refusal writes nothing.

local PARTS = {'job', 'jobs', 'ready', 'delayed', 'running', 'dead', 'completed',
               'cancelled', 'discarded', 'unique', 'paused'}
local GROUP = #PARTS

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Exact decimal text of an integer-valued number.
local function int(n)
  return string.format('%.0f', n)
end

local function opt(value)
  if value == '' then return false end
  return string.sub(value, 2)
end

-- The keys of the queue whose GROUP starts at KEYS[first], by part name.
local function queue_at(first)
  local q = {}
  for i, part in ipairs(PARTS) do q[part] = KEYS[first + i - 1] end
  return q
end

-- HMGET into a table by field name; absent fields are false.
local function fields(key, ...)
  local names = {...}
  local values = redis.call('HMGET', key, unpack(names))
  local out = {}
  for i, name in ipairs(names) do out[name] = values[i] end
  return out
end

local function pad(digits, width)
  return string.rep('0', width - #digits) .. digits
end

local function nines(digit)
  return tostring(9 - tonumber(digit))
end

-- The member of a job in its queue's ready set. Members with equal scores (= equal
-- priority) sort bytewise, so the member orders by available_at, then id: fixed-width
-- digits, negative times (before 1970) as a nines' complement behind "n" < "p". Done on
-- the text, because times past 2^53 µs do not survive Lua's doubles exactly.
local function rank(at, id)
  if string.sub(at, 1, 1) == '-' then
    return 'n' .. string.gsub(pad(string.sub(at, 2), 20), '%d', nines) .. ':' .. pad(id, 20)
  end
  return 'p' .. pad(at, 20) .. ':' .. pad(id, 20)
end

local function id_of_rank(member)
  return int(tonumber(string.sub(member, -20)))
end

-- Queues (by their job-key prefix) this call already woke or found paused: a batch of
-- 1,000 due jobs publishes once per queue, not once per job.
local WOKEN = {}

-- Tells listening workers that queue q has a job due now (WAKE CHANNEL above). The claim
-- a message prompts runs only after this script has returned, so where in a script it is
-- sent does not matter: that claim sees every write of the call.
local function wake(q)
  if WOKEN[q.job] then return end
  WOKEN[q.job] = true
  if redis.call('EXISTS', q.paused) == 1 then return end  -- claims skip it: no one to wake
  local prefix, queue = string.match(q.job, '^{([^:}]+):([^:}]+)}:')
  -- keys.py always builds a matching name; still, a hint must never fail a script that
  -- has already written.
  if prefix then redis.pcall('PUBLISH', prefix .. ':wake', queue) end
end

-- An available job goes to ready when due, else to delayed (claim promotes it later).
local function make_available(q, id, at, priority, now)
  if tonumber(at) <= now then
    redis.call('ZADD', q.ready, int(-tonumber(priority)), rank(at, id))
    wake(q)
  else
    redis.call('ZADD', q.delayed, at, id)
  end
end

-- Why the caller does not hold the job under lease `token`: "missing" (no such job
-- hash), "lost" (not running, or running under another token), or false when it does.
local function not_held(key, token)
  local f = fields(key, 'state', 'lease_token')
  if not f.state then return 'missing' end
  if f.state ~= 'running' or f.lease_token ~= token then return 'lost' end
  return false
end

-- True when the job is in history as completed by lease `token`: an ack that this very
-- lease repeats (its first reply was lost) is a success, not a stale write.
local function completed_by(key, token)
  local f = fields(key, 'state', 'lease_token')
  return f.state == 'completed' and f.lease_token == token
end

-- running -> available after `delay` µs (error kept unless a new one is given).
local function reschedule(q, key, id, now, delay, err)
  local priority = redis.call('HGET', key, 'priority')
  local at = int(now + delay)
  redis.call('ZREM', q.running, id)
  redis.call('HDEL', key, 'lease_until')
  redis.call('HSET', key, 'state', 'available', 'available_at', at)
  if err then redis.call('HSET', key, 'error', err) end
  make_available(q, id, at, priority, now)
end

-- running -> dead (error kept unless a new one is given).
local function to_dead(q, key, id, err)
  redis.call('ZREM', q.running, id)
  redis.call('HDEL', key, 'lease_until')
  redis.call('HSET', key, 'state', 'dead')
  if err then redis.call('HSET', key, 'error', err) end
  redis.call('ZADD', q.dead, id, id)
end

-- Any live state -> history as `state` (completed, cancelled or discarded): the job
-- leaves every live set, frees its unique key, and joins its history set. A completed
-- job keeps its result and no error; the others keep `err`, else their last error.
local function archive(q, key, id, state, result, err, now)
  local f = fields(key, 'available_at', 'unique_key')
  redis.call('ZREM', q.ready, rank(f.available_at, id))
  redis.call('ZREM', q.delayed, id)
  redis.call('ZREM', q.running, id)
  redis.call('ZREM', q.dead, id)
  if f.unique_key and redis.call('HGET', q.unique, f.unique_key) == id then
    redis.call('HDEL', q.unique, f.unique_key)
  end
  redis.call('HDEL', key, 'lease_until', 'cancel_requested', 'result')
  redis.call('HSET', key, 'state', state, 'finished_at', int(now))
  if state == 'completed' then
    redis.call('HDEL', key, 'error')
    if result then redis.call('HSET', key, 'result', result) end
  elseif err then
    redis.call('HSET', key, 'error', err)
  end
  redis.call('ZADD', q[state], int(now), id)
end

-- running -> completed, for a job whose lease the caller has just checked: only the
-- running set can hold it, so the hot path of every ack skips archive()'s search of the
-- other sets (half the commands per job).
local function complete_held(q, key, id, result, now)
  local unique_key = redis.call('HGET', key, 'unique_key')
  redis.call('ZREM', q.running, id)
  if unique_key and redis.call('HGET', q.unique, unique_key) == id then
    redis.call('HDEL', q.unique, unique_key)
  end
  redis.call('HDEL', key, 'lease_until', 'cancel_requested', 'result', 'error')
  if result then
    redis.call('HSET', key, 'state', 'completed', 'finished_at', int(now), 'result', result)
  else
    redis.call('HSET', key, 'state', 'completed', 'finished_at', int(now))
  end
  redis.call('ZADD', q.completed, int(now), id)
end

-- ---------------------------------------------------------------------------------------
