-- discard: dead, scheduled or available -> discarded (history), with `reason` as its
-- error (the last error when null).
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] reason (optional)
-- Returns: "ok"; "missing" when there is no such job; otherwise the job's state, which
-- does not allow a discard (nothing changed)

local key, q = KEYS[1], queue_at(2)
local f = fields(key, 'id', 'state')
if not f.state then return 'missing' end
if f.state ~= 'available' and f.state ~= 'dead' then return f.state end
archive(q, key, f.id, 'discarded', false, opt(ARGV[1]), now_us())
publish_finished()
return 'ok'
