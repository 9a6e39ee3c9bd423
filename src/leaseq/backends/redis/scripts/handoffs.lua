-- handoffs (Redis Cluster only): the handoffs of one queue that a crash may have left
-- unfinished (complete_handoff.lua records them; reclaim finishes them: ops.py
-- finish_handoffs). Reads only.
--
-- KEYS[1] {P:Q}:handoff
-- ARGV[1] age (µs): only handoffs recorded at least this long ago   ARGV[2] most to return
-- Returns: {job id, header, result (optional ARGV form), ...}

local cutoff = now_us() - tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local at, header, result = string.match(all[i + 1], '^(%d+) (%S+) (.*)$')
  if at and tonumber(at) <= cutoff then
    out[#out + 1] = all[i]
    out[#out + 1] = header
    out[#out + 1] = result
    if #out >= 3 * limit then break end
  end
end
return out
