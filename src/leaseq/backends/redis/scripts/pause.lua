-- pause / resume: sets or clears a queue's paused flag. Claims skip a paused queue;
-- enqueueing into it still works. Either gives the queue a settings row (as a SQL
-- backend's queues row), so stats and queue_configs show it even while it holds no job.
--
-- KEYS[1] {P}:queues   KEYS[2] {P}:configured   KEYS[3..] the queue's GROUP (_common.lua);
-- on Redis Cluster the queue's GROUP alone (register.lua listed the queue before)
-- ARGV[1] queue name   ARGV[2] "1" to pause, "0" to resume
-- Publishes: the queue on P:wake when a resume clears the flag (jobs may have become due
-- meanwhile)
-- Returns: "ok"

local q = queue_at(#KEYS - GROUP + 1)
if #KEYS > GROUP then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[1])
end
if ARGV[2] == '1' then
  redis.call('SET', q.paused, '1')
elseif redis.call('DEL', q.paused) == 1 then
  wake(q)
end
return 'ok'
