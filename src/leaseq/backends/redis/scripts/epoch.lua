-- epoch: job ids that never repeat (design §59). Run once by every new connection before
-- its first command (epoch.py, redis-py's connect hook), never per job. The server's
-- identity is its master_replid, which a promoted replica draws afresh (so may a restarted
-- server, whose INCRs of the last second an everysec AOF can lose: a bump is right there
-- too). On a change the epoch goes up by one and {P}:ids moves up to epoch << 40, never
-- down, in this one script: atomic, no lock. On a cluster the keys' slot sends it to the
-- master that holds the counter; other nodes answer MOVED, which the caller ignores.
--
-- KEYS[1] {P}:epoch (HASH: identity, epoch)   KEYS[2] {P}:ids
-- ARGV[1] the shift (40)   ARGV[2] the last epoch whose ids stay below 2^53 (8191)
-- Returns: {identity, epoch} in force; {"replica", -1} on a replica, which takes no writes;
-- {"", -2} where INFO is refused (ids are then not guarded; docs/redis.md says so)

if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 5: INFO may not precede writes otherwise
end
local info = redis.pcall('INFO', 'replication')
if type(info) ~= 'string' then
    return {'', -2}  -- INFO refused (an ACL, a managed service): nothing to compare with
end
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
