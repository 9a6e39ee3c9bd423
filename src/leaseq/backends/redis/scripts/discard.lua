-- discard: dead, scheduled or available -> discarded (history), with `reason` as its
-- error and {"message": reason, "previous": <the last error's detail>} as its detail,
-- as validate.discard_record makes it for the other backends (no "previous" without a
-- last error); without a reason the last error stays.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] reason (optional)
-- Returns: "ok"; "missing" when there is no such job; otherwise the job's state, which
-- does not allow a discard (nothing changed)

local key, q = KEYS[1], queue_at(2)
local f = fields(key, 'id', 'state', 'error', 'error_detail')
if not f.state then return 'missing' end
if f.state ~= 'available' and f.state ~= 'dead' then return f.state end
local reason, detail = opt(ARGV[1]), false
if reason then
  -- The stored detail is JSON text already: spliced in as it is, not re-encoded.
  local previous = f.error_detail or (f.error and cjson.encode({message = f.error}))
  detail = '{"message":' .. cjson.encode(reason)
           .. (previous and (',"previous":' .. previous) or '') .. '}'
end
archive(q, key, f.id, 'discarded', false, reason, now_us(), detail)
publish_finished()
return 'ok'
