-- index_dead (migrate): files dead jobs that went dead under a leaseq older than the
-- buried set into it, scored by when they last changed (updated_at, else created_at), so
-- dead_retention covers them too. A queue whose dead and buried sets are the same size
-- is skipped at once; otherwise a window of its dead set, by rank, is read per call (the
-- driver moves the window on while a call reads a full one).
--
-- KEYS: one GROUP of keys per queue (_common.lua)
-- ARGV[1] window (most dead jobs read per queue)   ARGV[2..] per queue, its start rank
-- Returns: per queue, how many dead jobs were read (0 when its sets already agree)

local window = tonumber(ARGV[1])
local out = {}
for first = 1, #KEYS, GROUP do
  local q = queue_at(first)
  local n = #out + 1
  out[n] = 0
  if redis.call('ZCARD', q.dead) ~= redis.call('ZCARD', q.buried) then
    local start = tonumber(ARGV[n + 1])
    local ids = redis.call('ZRANGE', q.dead, start, start + window - 1)
    for i, member in ipairs(ids) do ids[i] = int(tonumber(member)) end
    if #ids > 0 then
      local scores = redis.call('ZMSCORE', q.buried, unpack(ids))
      for i, id in ipairs(ids) do
        if not scores[i] then
          local f = fields(q.job .. id, 'updated_at', 'created_at')
          redis.call('ZADD', q.buried, f.updated_at or f.created_at, id)
        end
      end
    end
    out[n] = #ids
  end
end
return out
