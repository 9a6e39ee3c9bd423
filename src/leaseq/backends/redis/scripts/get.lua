-- get: reads one job, live or historical, with the server's time (the caller tells
-- scheduled from available by comparing available_at with it). Read-only.
--
-- KEYS[1] {P:Q}:job:<id>
-- Returns: {now (µs), HGETALL reply}, or "missing" when there is no such job

local job = redis.call('HGETALL', KEYS[1])
if #job == 0 then return 'missing' end
return {now_us(), job}
