-- Job ids that never repeat (design §59). Run by every new connection before its first
-- command (epoch.py), never per job.
-- KEYS: {P}:epoch (HASH: identity, epoch), {P}:ids. ARGV: shift (40), the last epoch.
-- The server's identity is its master_replid, which a promoted replica draws afresh (so
-- does a restarted server: its INCRs of the last second may be lost with an everysec
-- AOF, and a bump is right there too). On a change the epoch goes up by one and {P}:ids
-- moves up to epoch << 40 (never down), in this one script: atomic, no lock needed. On a
-- cluster the keys' slot sends the script to the master that holds the counter; other
-- nodes answer MOVED, which the caller ignores. A replica answers {'replica', -1}.
if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 5: INFO may not precede writes otherwise
end
local info = redis.call('INFO', 'replication')
if string.match(info, 'role:(%a+)') ~= 'master' then
    return {'replica', -1}
end
local server = string.match(info, 'master_replid:(%w+)')
local stored = redis.call('HGET', KEYS[1], 'identity')
if not stored then
    redis.call('HSET', KEYS[1], 'identity', server, 'epoch', 0)
    return {server, 0}
end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
if stored == server then
    return {server, epoch}
end
epoch = epoch + 1
if epoch > tonumber(ARGV[2]) then
    return redis.error_reply('job ids: epoch ' .. epoch .. ' would pass ' .. ARGV[2] ..
        ', the last whose ids stay below 2^53 (design 59)')
end
local first = epoch * 2 ^ tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last < first then
    redis.call('SET', KEYS[2], string.format('%.0f', first - 1))  -- INCR gives first
end
redis.call('HSET', KEYS[1], 'identity', server, 'epoch', epoch)
return {server, epoch}
