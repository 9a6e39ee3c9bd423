-- pause / resume: sets or clears a queue's pause. Claims skip a paused queue; enqueueing
-- into it still works. Either gives the queue a settings row (as a SQL backend's queues
-- row), so stats and queue_configs show it even while it holds no job. Each replaces the
-- pause in force, whichever kind (a handler's extend_pause only ever extends one).
--
-- KEYS[1] {P}:queues   KEYS[2] {P}:configured   KEYS[3..] the queue's GROUP (_common.lua);
-- on Redis Cluster the queue's GROUP alone (register.lua listed the queue before)
-- ARGV[1] queue name   ARGV[2] "1" to pause, "0" to resume
-- ARGV[3] when the pause ends, µs since the epoch (optional)   ARGV[4] or µs from now
-- (optional); neither: until resume. The end is rounded up to a whole ms (PXAT's unit):
-- the key then expires by itself, by the server's clock.
-- Publishes: the queue on P:wake when the queue is no longer paused and was (jobs may
-- have become due meanwhile)
-- Returns: "ok"

local q = queue_at(#KEYS - GROUP + 1)
if #KEYS > GROUP then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[1])
end
local at, after = opt(ARGV[3] or ''), opt(ARGV[4] or '')
if ARGV[2] == '1' and not at and not after then
  redis.call('SET', q.paused, '1')
  return 'ok'
end
if ARGV[2] == '1' then
  local now = now_us()
  local ms = math.ceil((at and tonumber(at) or now + tonumber(after)) / 1000)
  if ms * 1000 > now then
    redis.call('SET', q.paused, int(ms * 1000), 'PXAT', int(ms))
    return 'ok'
  end
end
-- resume, or a pause whose end has passed already: not paused
if redis.call('DEL', q.paused) == 1 then
  wake(q)
end
return 'ok'
