-- unreserve (Redis Cluster only): the last step of an enqueue with unique_scope="global"
-- whose job did not end up created under the id reserved for it (a twin of a live job of
-- its queue, refused by max_jobs, or voided): gives the key back to the holder it had
-- before, so it is not held by an id that never became a job (design.md §47). A
-- compare-and-set: a key that names another id by now (taken over) is left alone.
--
-- KEYS[1] {P}:global   KEYS[2] {P}:global_at
-- ARGV: per key: key, the reserved id, the previous holder and its reservation time
-- (both "" when there was none)
-- Returns: how many keys were given back
local n = 0
for i = 1, #ARGV, 4 do
  local key = ARGV[i]
  if redis.call('HGET', KEYS[1], key) == ARGV[i + 1] then
    if ARGV[i + 2] == '' then
      redis.call('HDEL', KEYS[1], key)
      redis.call('HDEL', KEYS[2], key)
    else
      redis.call('HSET', KEYS[1], key, ARGV[i + 2])
      if ARGV[i + 3] == '' then
        redis.call('HDEL', KEYS[2], key)
      else
        redis.call('HSET', KEYS[2], key, ARGV[i + 3])
      end
    end
    n = n + 1
  end
end
return n
