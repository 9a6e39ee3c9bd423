-- holders (Redis Cluster only): the first read of an enqueue with unique_scope="global"
-- (ops.enqueue_global; design.md §47). For each key: the id {P}:global names (its last
-- holder), when that holder reserved it ({P}:global_at), and the holder's queue from the
-- id index. The client then reads the holder's job in that queue's slot. Writes nothing.
--
-- KEYS[1] {P}:global   KEYS[2] {P}:global_at   KEYS[3] {P}:index
-- ARGV: the keys
-- Returns: {now (µs), then per key: holder id, reserved at (µs), queue}, each nil when
-- absent
local out = {int(now_us())}
for _, key in ipairs(ARGV) do
  local id = redis.call('HGET', KEYS[1], key)
  out[#out + 1] = id or false
  out[#out + 1] = redis.call('HGET', KEYS[2], key) or false
  out[#out + 1] = id and redis.call('HGET', KEYS[3], id) or false
end
return out
