-- leaseq on Redis: helpers shared by every script. The loader (driver.py) prepends this
-- file to each scripts/<operation>.lua, so every EVALSHA body is self-contained and the
-- helpers exist once.
--
-- KEY SCHEMA. P is Settings.table_prefix ([a-z0-9_]), Q a queue name ([A-Za-z0-9_.-]):
-- both are validated before a key is built (keys.py), so neither holds braces, colons,
-- quotes or glob characters. Everything else a caller gives (unique keys, kinds,
-- payloads, errors, worker ids) is stored as hash fields and values, never in key names.
--
--   {P}:ids                STRING  the last job id handed out (INCR); ids are never reused,
--                                  a failover included: see {P}:epoch
--   {P}:epoch              HASH    identity (the master_replid that last handed out ids),
--                                  epoch (bumps; ids move past epoch << 40; epoch.lua)
--   {P}:index              HASH    job id -> queue name, for live and historical jobs
--   {P}:queues             SET     every queue name that ever held a job, was paused or
--                                  was configured
--   {P}:configured         SET     every queue with a settings row: configured or ever
--                                  paused (queue_configs lists them; stats shows them)
--   {P}:flows              ZSET    every chain and group: score = when it was enqueued (µs),
--                                  member its id (prune reads the oldest)
--   {P}:flow:<id>          HASH    one chain or group (fields: complete_step.lua)
--   {P}:server             HASH    settings of the whole prefix (field max_queues: the most
--                                  queues {P}:queues may hold; enqueue.lua, allocate.lua)
--   {P}:global             HASH    unique_key -> id of the last job enqueued with it under
--                                  unique_scope="global" (held while that job is live:
--                                  enqueue.lua; on Redis Cluster reserved by allocate.lua)
--   {P}:global_at          HASH    Redis Cluster only: unique_key -> when {P}:global's holder
--                                  reserved it (µs; a reservation without its job that is
--                                  older than ops.GLOBAL_PENDING counts as abandoned)
--   {P:Q}:job:<id>         HASH    one job, live or historical (fields below)
--   {P:Q}:jobs             ZSET    every job of the queue, live or historical: score id
--   {P:Q}:ready            ZSET    available jobs known to be due: score -priority,
--                                  member rank(available_at, id) (see rank below)
--   {P:Q}:delayed          ZSET    available jobs not yet promoted to ready:
--                                  score available_at, member id
--   {P:Q}:running          ZSET    leased jobs: score lease_until, member id
--   {P:Q}:dead             ZSET    dead jobs in kick order: score -priority - 2^31 (<= 0),
--                                  member the id as 20 digits (dead_member), so equal
--                                  priorities sort oldest first. A leaseq before issue 24
--                                  filed score id, member id: migrate (order_dead.lua)
--                                  refiles those, and removals name both forms
--   {P:Q}:completed        ZSET    history by terminal state:
--   {P:Q}:cancelled                  score finished_at, member id
--   {P:Q}:discarded
--   {P:Q}:unique           HASH    unique_key -> id of the live job that holds it
--   {P:Q}:paused           STRING  present while the queue is paused (claims skip it): "1"
--                                  until resume, or the µs (a whole ms) a timed pause ends,
--                                  when the key expires by itself (PXAT: the server's
--                                  clock ends the pause; next_due.lua reads the end)
--   {P:Q}:settings         HASH    the queue's settings (QUEUE_SETTINGS names -> the value
--                                  as Python wrote it: durations in seconds); absent = default;
--                                  and the rate bucket of a queue with rate_per_sec:
--                                  rate_tokens (decimal text) and rate_at (µs), written by
--                                  the claims that spend tokens (FLOW CONTROL below)
--   {P:Q}:finished         HASH    unique_key -> id of the newest finished job that held
--                                  it (enqueue's unique_for window); pruned with history
--   {P:Q}:buried           ZSET    dead jobs again: score = when they went dead (µs),
--                                  member id (reclaim's dead_retention reads the oldest)
--   {P:Q}:handoff          HASH    Redis Cluster only, outside the GROUP: job id -> "<µs>
--                                  <leaseq-flow header> <optional result>" of each completed
--                                  flow step whose follow-up is not known to be enqueued
--                                  yet (complete_handoff.lua; docs/design.md §45)
--   {P:Q}:void             HASH    Redis Cluster only, outside the GROUP: job id -> µs, ids
--                                  whose abandoned global key reservation was taken over
--                                  (void.lua); enqueue.lua never writes them
--
-- The {P:Q} hash tag puts all of one queue's keys in one Redis Cluster slot; the {P}
-- keys share another (docs/redis.md says what that means for Cluster). On a cluster a
-- script may touch one slot only: the scripts that take {P} keys and queue keys together
-- on a single server (enqueue, stats, prune, pause, configure) also take a cluster form
-- without the {P} keys, told apart by #KEYS, whose {P} half ops.py runs as a script of its
-- own (allocate, register) or a plain command; multi-queue scripts get one queue per call.
--
-- WAKE CHANNEL (pub/sub, not a key): P:wake. A script that puts jobs of queue Q into its
-- ready set (make_available of a due job, resume) PUBLISHes Q there, once per queue per
-- call, unless Q is paused; listening workers (worker/listen.py) then claim at once
-- instead of at their next poll. A delayed job publishes only when it becomes the
-- queue's earliest scheduled job, so idle workers asleep until a later one (next_due)
-- wake, find nothing due and re-arm for it; claim's own promotion publishes nothing.
-- keys.py (Keys.wake) builds the same name; wake() below takes P and Q from the queue's "{P:Q}:job:" key prefix, since
-- neither may hold ":" or "}". The PUBLISH is a hint: it goes through redis.pcall, so
-- a user whose ACL denies the channel still has every script work, and is only woken
-- by polling.
--
-- DONE CHANNEL (pub/sub, not a key): P:done. The helpers that finish a job (archive,
-- complete_held, to_dead: completed, cancelled, discarded, dead) note its id, and the
-- scripts that call them end with publish_finished(), which PUBLISHes the ids noted,
-- comma-separated, in one message per call (a batch of 500 acks sends one), through
-- redis.pcall as the wake-up does. Waiters on results (_results.py) subscribe. A script
-- that finishes jobs through these helpers must call publish_finished() before it returns
-- (its waiters would otherwise only poll).
--
-- JOB HASH FIELDS: id, queue, kind?, payload (JSON text), priority, max_attempts,
-- unique_key?, state (available | running | dead | completed | cancelled | discarded;
-- "scheduled" is available with available_at in the future), attempts, lease_token,
-- available_at, created_at, lease_until?, worker_id?, started_at?, error?,
-- cancel_requested? ("1"), finished_at?, result? (JSON text), lease? (the job's own lease,
-- seconds as Python wrote them), leased_at? (start of the current lease), touched_at?
-- (its last extension; the claim writes leased_at), touches? (extensions of this lease),
-- reserves?, timeouts?, releases?, buries?, kicks? (counters), failed_at?, updated_at?
-- (last state change; readers show created_at until then), headers? (JSON text, written
-- by enqueue and never changed), error_detail? (the last error as the JSON object nack
-- was given; written and cleared with error, absent when the text says it all), tags?
-- (JSON array text, written by enqueue and never changed; list.lua finds a tag by its
-- quoted text in it), ended_token? and ended_as? (the token of the job's last ended lease
-- and how it ended, _core/ended.py: "nack:scheduled", "bury:dead", "snooze:scheduled",
-- "expired", ...; written where a nack, release, snooze, bury or reclaim ends a lease,
-- left alone by claims, kept in history; repeated() reads them), snoozes? (times put
-- back by RetryAfter since enqueued or last kicked: snooze.lua; kick and retry delete it).
-- "?" = absent when null, and
-- an absent counter is 0: enqueue, the hot path, writes none of them.
--
-- TIMES are integer microseconds since the Unix epoch, written as decimal text, and
-- "now" is always the server's TIME, never the client's clock. Integers travel as
-- text (int() below): Lua's tostring would print 1.7e+15 and lose digits.
--
-- KEYS of one queue arrive as a GROUP, in the order of PARTS below (keys.py builds
-- them in the same order; a test holds the two lists equal): the job-key prefix
-- "{P:Q}:job:" first, then the queue's other keys.
--
-- OPTIONAL ARGV values (kind, unique_key, run_at, error, reason, result, lease, ...) are
-- "" for null and "+" followed by the value otherwise, so an empty string stays distinct.
--
-- SECONDS (job leases, queue settings) are kept as the decimal text Python wrote, so they
-- read back exactly; scripts turn them into µs (seconds_us) where they compute with them.
--
-- Every script reads and checks before its first write, so a refusal writes nothing.

local PARTS = {'job', 'jobs', 'ready', 'delayed', 'running', 'dead', 'completed',
               'cancelled', 'discarded', 'unique', 'paused', 'settings', 'finished',
               'buried'}
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

-- Seconds, as decimal text, in whole µs: rounded to the nearest, as ops.us() rounds
-- (exact halves aside, where Python rounds to even).
local function seconds_us(text)
  return math.floor(tonumber(text) * 1000000 + 0.5)
end

-- One HSET of a list of field, value, field, value, ...: one command, however many.
local function hset(key, list)
  redis.call('HSET', key, unpack(list))
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

-- The member of a dead job in its queue's dead set (KEY SCHEMA), and its score.
local function dead_member(id)
  return pad(int(tonumber(id)), 20)
end

local function dead_score(priority)
  return int(-tonumber(priority) - 2147483648)
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

-- Ids of the jobs this call finished, and how many (DONE CHANNEL). The helpers append
-- inline, without a function call: complete_many runs it 500 times per call.
local FINISHED, FINISHED_N = {}, 0

-- One message with every id noted, at the end of a script that finishes jobs. Every such
-- script's KEYS[1] is a job key or a job-key prefix, "{P:Q}:job:...", which names P.
local function publish_finished()
  if FINISHED_N == 0 then return end
  local prefix = string.match(KEYS[1], '^{([^:}]+):')
  if prefix then redis.pcall('PUBLISH', prefix .. ':done', table.concat(FINISHED, ',')) end
end

-- An available job goes to ready when due, else to delayed (claim promotes it later).
local function make_available(q, id, at, priority, now)
  if tonumber(at) <= now then
    redis.call('ZADD', q.ready, int(-tonumber(priority)), rank(at, id))
    wake(q)
  else
    redis.call('ZADD', q.delayed, at, id)
    -- The new earliest scheduled job: idle workers sleeping toward a later one re-arm.
    if redis.call('ZRANGE', q.delayed, 0, 0)[1] == tostring(id) then wake(q) end
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

-- For a `verb` (nack, release, bury) by lease `token` that no longer holds the job: the
-- state the call of that verb that ended the lease returned, when that lease is still
-- the job's last ended one (a repeat after a lost reply: answered, nothing written);
-- else nil. A completed job's last lease is the one that acked it. (_core/ended.py.)
local function repeated(key, token, verb)
  local f = fields(key, 'state', 'ended_token', 'ended_as')
  if f.state == 'completed' or f.ended_token ~= token or not f.ended_as then return nil end
  local done, state = string.match(f.ended_as, '^(%a+):(%a+)$')
  if done == verb then return state end
  return nil
end

-- A new error `err` replaces the last one with its JSON `detail` (false: none, and any
-- earlier detail goes); no error keeps both.
local function set_error(key, set, err, detail)
  if not err then return end
  set[#set + 1] = 'error'; set[#set + 1] = err
  if detail then
    set[#set + 1] = 'error_detail'; set[#set + 1] = detail
  else
    redis.call('HDEL', key, 'error_detail')
  end
end

-- running -> available after `delay` µs (error kept unless a new one is given); also
-- writes the pairs in `more` (counters, failed_at) in the same HSET.
local function reschedule(q, key, id, now, delay, err, more, detail)
  local priority = redis.call('HGET', key, 'priority')
  local at = int(now + delay)
  redis.call('ZREM', q.running, id)
  redis.call('HDEL', key, 'lease_until')
  local set = {'state', 'available', 'available_at', at, 'updated_at', int(now)}
  set_error(key, set, err, detail)
  for _, v in ipairs(more or {}) do set[#set + 1] = v end
  hset(key, set)
  make_available(q, id, at, priority, now)
end

-- running -> dead (error kept unless a new one is given), buries + 1; indexed in buried
-- by the time it went dead, for dead_retention. Also writes the pairs in `more` (the
-- ended lease) in the same HSET.
local function to_dead(q, key, id, err, now, detail, more)
  redis.call('ZREM', q.running, id)
  redis.call('HDEL', key, 'lease_until')
  local set = {'state', 'dead', 'updated_at', int(now)}
  set_error(key, set, err, detail)
  for _, v in ipairs(more or {}) do set[#set + 1] = v end
  hset(key, set)
  redis.call('HINCRBY', key, 'buries', 1)
  redis.call('ZADD', q.dead, dead_score(redis.call('HGET', key, 'priority')), dead_member(id))
  redis.call('ZADD', q.buried, int(now), id)
  FINISHED_N = FINISHED_N + 1
  FINISHED[FINISHED_N] = id
end

-- RetryAfter(scope="queue"): queue q paused until `until_us` (rounded up to a whole ms,
-- the unit of PXAT), only ever later: an indefinite pause ("1") stays, and so does a
-- timed one that ends later. A time already past pauses nothing.
local function extend_pause(q, until_us, now)
  local ms = math.ceil(until_us / 1000)
  if ms * 1000 <= now then return end
  local current = redis.call('GET', q.paused)  -- nil once a timed pause has expired
  if current == '1' or (current and tonumber(current) >= ms * 1000) then return end
  redis.call('SET', q.paused, int(ms * 1000), 'PXAT', int(ms))
end

-- The seconds until queue q's timed pause ends, from its paused key's value; nil when
-- the queue is not paused, false when it is paused until resume.
local function pause_left(q, now)
  local value = redis.call('GET', q.paused)
  if not value then return nil end
  if value == '1' then return false end
  return (tonumber(value) - now) / 1000000
end

-- A finished job that held a unique key frees it, and becomes the key's newest finished
-- job (enqueue's unique_for window looks there).
-- max_queues (configure_server), one check for enqueue.lua, allocate.lua and admit.lua:
-- the queue names at list[first], list[first + step], ... (repeats allowed) against the
-- cap in `server` ({P}:server) and the queues listed in `queues` ({P}:queues). Returns
-- the refusal {"queues", name, max_queues, n} when they would add queues beyond the cap;
-- else false and the names not listed yet (nil without a cap). Reads only.
local function over_max_queues(queues, server, list, first, step)
  local cap = redis.call('HGET', server, 'max_queues')
  if not cap then return false, nil end
  local new, seen = {}, {}
  for i = first, #list, step do
    local queue = list[i]
    if not seen[queue] then
      seen[queue] = true
      if redis.call('SISMEMBER', queues, queue) == 0 then new[#new + 1] = queue end
    end
  end
  local known = redis.call('SCARD', queues)
  if #new > 0 and known + #new > tonumber(cap) then
    return {'queues', new[1], cap, known + 1}, new
  end
  return false, new
end

local function free_unique(q, id, unique_key)
  if not unique_key then return end
  if redis.call('HGET', q.unique, unique_key) == id then
    redis.call('HDEL', q.unique, unique_key)
  end
  redis.call('HSET', q.finished, unique_key, id)
end

-- Any live state -> history as `state` (completed, cancelled or discarded): the job
-- leaves every live set, frees its unique key, and joins its history set. A completed
-- job keeps its result and no error; the others keep `err`, else their last error. The
-- counters stay in the hash; updated_at is the finishing time.
local function archive(q, key, id, state, result, err, now, detail)
  local f = fields(key, 'available_at', 'unique_key')
  redis.call('ZREM', q.ready, rank(f.available_at, id))
  redis.call('ZREM', q.delayed, id)
  redis.call('ZREM', q.running, id)
  redis.call('ZREM', q.dead, dead_member(id), id)
  redis.call('ZREM', q.buried, id)
  free_unique(q, id, f.unique_key)
  redis.call('HDEL', key, 'lease_until', 'cancel_requested', 'result')
  redis.call('HSET', key, 'state', state, 'finished_at', int(now), 'updated_at', int(now))
  if state == 'completed' then
    redis.call('HDEL', key, 'error', 'error_detail')
    if result then redis.call('HSET', key, 'result', result) end
  elseif err then
    local set = {}
    set_error(key, set, err, detail)
    hset(key, set)
  end
  redis.call('ZADD', q[state], int(now), id)
  FINISHED_N = FINISHED_N + 1
  FINISHED[FINISHED_N] = id
end

-- running -> completed, for a job whose lease the caller has just checked: only the
-- running set can hold it, so the hot path of every ack skips archive()'s search of the
-- other sets (half the commands per job).
local function complete_held(q, key, id, result, now)
  local unique_key = redis.call('HGET', key, 'unique_key')
  redis.call('ZREM', q.running, id)
  free_unique(q, id, unique_key)
  redis.call('HDEL', key, 'lease_until', 'cancel_requested', 'result', 'error',
             'error_detail')
  local t = int(now)
  if result then
    redis.call('HSET', key, 'state', 'completed', 'finished_at', t, 'updated_at', t,
               'result', result)
  else
    redis.call('HSET', key, 'state', 'completed', 'finished_at', t, 'updated_at', t)
  end
  redis.call('ZADD', q.completed, t, id)
  FINISHED_N = FINISHED_N + 1
  FINISHED[FINISHED_N] = id
end

-- fail (nack) of a job that lease `token` holds, as the caller has just checked: ->
-- cancelled (history) when a cancel was requested, -> dead when its attempts are used
-- up, else -> available after `delay` µs. failed_at = now in every case, and the lease
-- recorded as ended by this nack with the state after, which it returns.
local function fail_held(q, key, token, err, delay, now, detail)
  local f = fields(key, 'id', 'attempts', 'max_attempts', 'cancel_requested')
  local state = 'available'
  if f.cancel_requested then
    state = 'cancelled'
  elseif tonumber(f.attempts) >= tonumber(f.max_attempts) then
    state = 'dead'
  elseif delay > 0 then
    state = 'scheduled'
  end
  redis.call('HSET', key, 'failed_at', int(now), 'ended_token', token,
             'ended_as', 'nack:' .. state)
  if state == 'cancelled' then
    archive(q, key, f.id, 'cancelled', false, err, now, detail)
  elseif state == 'dead' then
    to_dead(q, key, f.id, err, now, detail)
  else
    reschedule(q, key, f.id, now, delay, err, nil, detail)
  end
  return state
end

-- The touch limits of queue q (its settings), in µs where they are durations; false
-- where unset. Read once per queue per call.
local function touch_limits(q)
  local s = fields(q.settings, 'max_lease', 'max_touches', 'max_touch_duration',
                   'min_touch_interval')
  return {
    max_lease = s.max_lease and seconds_us(s.max_lease),
    max_touches = s.max_touches and tonumber(s.max_touches),
    max_touch_duration = s.max_touch_duration,
    max_duration_us = s.max_touch_duration and seconds_us(s.max_touch_duration),
    min_interval_us = s.min_touch_interval and seconds_us(s.min_touch_interval),
  }
end

-- renew (heartbeat) of job `id` under lease `token` by `extend` µs, within the queue's
-- touch limits (`limits`, from touch_limits). Replies:
--   "missing" / "lost"                     no such job / the lease is not held
--   {"max_touches", touches}               refused: this lease was extended that often
--   {"max_touch_duration", µs, setting}    refused: the lease began that long ago
--   {lease_until, cancel_requested (1/0)}  held: extended to min(extend, max_lease) from
--                                          now, or left as it is within min_touch_interval
--                                          of the last extension (no write, not counted)
-- A refusal writes nothing: the lease runs out as it stands.
local function touch(q, key, id, token, extend, now, limits)
  -- The hot path (no time limits) reads only what it needs: every field read scans the
  -- job's hash, which grew with the counters.
  local f = fields(key, 'state', 'lease_token', 'touches', 'touched_at', 'cancel_requested')
  if not f.state then return 'missing' end
  if f.state ~= 'running' or f.lease_token ~= token then return 'lost' end
  local touches = tonumber(f.touches or '0')
  if limits.max_touches and touches >= limits.max_touches then
    return {'max_touches', touches}
  end
  -- A lease handed out before leased_at existed has neither time: as in SQL, where the
  -- comparisons with NULL are not true, neither time limit applies to it.
  if limits.max_duration_us then
    local began = redis.call('HGET', key, 'leased_at')
    if began and now - tonumber(began) > limits.max_duration_us then
      return {'max_touch_duration', int(now - tonumber(began)), limits.max_touch_duration}
    end
  end
  local cancel = f.cancel_requested and 1 or 0
  -- The claim writes touched_at = leased_at, so touched_at alone is "the last extension
  -- or the lease's start".
  if f.touched_at and limits.min_interval_us
      and now - tonumber(f.touched_at) < limits.min_interval_us then
    return {redis.call('HGET', key, 'lease_until'), cancel}
  end
  if limits.max_lease and limits.max_lease < extend then extend = limits.max_lease end
  local lease_until = int(now + extend)
  redis.call('HSET', key, 'lease_until', lease_until, 'touches', int(touches + 1),
             'touched_at', int(now))
  redis.call('ZADD', q.running, lease_until, id)
  return {lease_until, cancel}
end

-- ---------------------------------------------------------------------------------------
-- FLOW CONTROL: _core/limits.py in Lua, step for step (tests/test_redis_limits.py holds
-- the two equal). A queue's bucket is rate_tokens as of rate_at; with neither stored (no
-- claim has spent yet) it is full.

-- The settings fields flow control reads, in one HMGET with whatever else a script needs.
local LIMIT_FIELDS = {'concurrency_limit', 'rate_per_sec', 'rate_burst', 'rate_tokens',
                      'rate_at'}

-- Decimal text that reads back as the same double (Python's float() and Lua's tonumber).
local function decimal(x)
  return string.format('%.17g', x)
end

-- limits.tokens_now: tokens `elapsed` seconds after the bucket held `tokens` (nil: full).
local function tokens_now(rate, burst, tokens, elapsed)
  local size = burst or 1
  if not tokens or not elapsed then return size end
  return math.min(size, tokens + math.max(0, elapsed) * rate)
end

-- The tokens now (µs) in the bucket described by settings `s` (fields of LIMIT_FIELDS).
local function bucket_tokens(s, now)
  local elapsed = s.rate_at and (now - tonumber(s.rate_at)) / 1000000
  return tokens_now(tonumber(s.rate_per_sec), s.rate_burst and tonumber(s.rate_burst),
                    s.rate_tokens and tonumber(s.rate_tokens), elapsed)
end

-- limits.allowance: how many jobs one claim may start in a queue.
local function allowance(limit, concurrency_limit, running, rate, tokens)
  local n = limit
  if concurrency_limit then n = math.min(n, concurrency_limit - running) end
  if rate and tokens then
    -- A hair below a whole token counts as one: tokens refill by float arithmetic.
    n = math.min(n, math.floor(tokens + 1e-9))
  end
  return math.max(0, n)
end

-- limits.token_wait: seconds until a bucket holding `tokens` now holds a whole one.
local function token_wait(rate, tokens)
  return math.max(0, (1 - tokens) / rate)
end

-- limits.after_pause: a queue paused for `left` more seconds starts nothing before then.
local function after_pause(wait, left)
  if not wait or not left or left <= 0 then return wait end
  return math.max(wait, left)
end

-- limits.next_start: seconds until one of a queue's jobs may next be claimable, or nil.
local function next_start(earliest, running, concurrency_limit, rate, tokens)
  if not earliest then return nil end
  if earliest > 0 then
    local wait = earliest
    if rate and tokens then wait = math.max(wait, token_wait(rate, tokens)) end  -- both
    return wait
  end
  if concurrency_limit and running >= concurrency_limit then return nil end
  if rate and tokens then return token_wait(rate, tokens) end
  return 0
end

-- ---------------------------------------------------------------------------------------
