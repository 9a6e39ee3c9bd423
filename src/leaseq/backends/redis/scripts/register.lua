-- register (Redis Cluster only): the global half of pause and configure, run before the
-- queue's own script: lists the queue among all queues and among those with a settings
-- row. A crash in between leaves a listed queue with its settings at their defaults.
--
-- KEYS[1] {P}:queues   KEYS[2] {P}:configured
-- ARGV[1] queue name
-- Returns: "ok"

redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 'ok'
