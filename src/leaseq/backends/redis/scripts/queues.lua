-- queues: every queue name that ever held a job (stats, reclaim and prune visit them).
-- Read-only.
--
-- KEYS[1] {P}:queues
-- Returns: the names, unordered

return redis.call('SMEMBERS', KEYS[1])
