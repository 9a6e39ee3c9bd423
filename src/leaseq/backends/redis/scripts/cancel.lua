-- cancel: scheduled, available or dead -> cancelled (history, error "cancelled");
-- running -> running with cancel_requested, so its holder's next heartbeat reports it.
-- A finished job is left alone.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- Returns: the state after the call (cancelled, running, or the finished job's state),
-- or "missing" when there is no such job

local key, q = KEYS[1], queue_at(2)
local f = fields(key, 'id', 'state')
if not f.state then return 'missing' end
if f.state == 'running' then
  redis.call('HSET', key, 'cancel_requested', '1')
  return 'running'
end
if f.state ~= 'available' and f.state ~= 'dead' then return f.state end
archive(q, key, f.id, 'cancelled', false, 'cancelled', now_us())
publish_finished()
return 'cancelled'
