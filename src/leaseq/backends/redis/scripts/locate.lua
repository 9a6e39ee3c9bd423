-- locate: the queue each job id belongs to, from the id index. Read-only. Calls on jobs
-- read this first, then run their script on those queues' keys (a job never changes
-- queue, so the answer cannot go stale while the job exists).
--
-- KEYS[1] {P}:index
-- ARGV: job ids
-- Returns: one queue name per id, nil where no live or historical job has that id

return redis.call('HMGET', KEYS[1], unpack(ARGV))
