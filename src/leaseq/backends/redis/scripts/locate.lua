-- locate: the queue a job id belongs to, from the id index. Read-only. Ops by id read
-- this first, then run their script on that queue's keys (a job never changes queue).
--
-- KEYS[1] {P}:index
-- ARGV[1] job id
-- Returns: the queue name, or nil when no live or historical job has that id

return redis.call('HGET', KEYS[1], ARGV[1])
