-- void (Redis Cluster only): the fence of a takeover (ops.enqueue_global; design.md §47).
-- A key's holder is indexed but its job was never written, and its reservation is older
-- than the pending timeout: the client that wants the key voids the holder's id here, in
-- the holder's queue slot, before it reserves the key for itself. enqueue.lua's cluster
-- form refuses to write a voided id, so a producer that was only slow (paused, cut off)
-- cannot write its job after the takeover; it is told so and enqueues afresh.
--
-- KEYS[1] {P:Q}:job:<id>   KEYS[2] {P:Q}:void (id -> when it was voided, µs)
-- ARGV[1] the id
-- Returns: 1 voided (or voided before); 0 the job exists after all (nothing written)
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], int(now_us()))
return 1
