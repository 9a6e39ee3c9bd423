-- renew (heartbeat): running -> running with lease_until = now + min(extend, max_lease),
-- when the caller holds the lease and the queue's touch limits allow it (touch() in
-- _common.lua: max_touches, max_touch_duration refuse; within min_touch_interval of the
-- last extension nothing is written). The caller raises JobCancelled when a cancel was
-- requested (the lease is extended first, so the holder has time to give the job up).
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2..] the job's queue GROUP (_common.lua)
-- ARGV[1] lease token   ARGV[2] extend (µs)   ARGV[3] job id
-- Returns: {lease_until, cancel_requested (1/0)}; {"max_touches", touches} or
-- {"max_touch_duration", µs since the lease began, setting} when a touch limit refused
-- (nothing changed); "lost" when the lease is not held; "missing" when there is no such job

local q = queue_at(2)
return touch(q, KEYS[1], ARGV[3], ARGV[1], tonumber(ARGV[2]), now_us(), touch_limits(q))
