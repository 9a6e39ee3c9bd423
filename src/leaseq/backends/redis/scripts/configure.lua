-- configure: stores settings of one queue (names from QUEUE_SETTINGS, values as Python
-- wrote them), leaving the others as they are; "" deletes a setting (its default again).
-- The queue gets a settings row (is listed by queue_configs and stats) even when every
-- setting is at its default.
--
-- KEYS[1] {P}:queues   KEYS[2] {P}:configured   KEYS[3] {P:Q}:settings; on Redis Cluster
-- KEYS[1] {P:Q}:settings alone (register.lua listed the queue before)
-- ARGV[1] queue name   ARGV[2..] pairs: setting name, value ("" to delete)
-- Returns: the stored settings, an HGETALL reply

local settings = KEYS[#KEYS]
if #KEYS == 3 then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[1])
end
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', settings, ARGV[i])
  else
    redis.call('HSET', settings, ARGV[i], ARGV[i + 1])
  end
end
return redis.call('HGETALL', settings)
