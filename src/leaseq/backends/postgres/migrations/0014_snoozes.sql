-- Back-pressure from a handler (issue 33, item 5; docs/design.md §67). A job put back by
-- RetryAfter counts its snoozes (kept in history, as the other counters are) and gives
-- its attempt back; a queue's optional max_snoozes sends a job past it to dead. A queue's
-- pause may end by itself at paused_until (an operator's pause(until=), or a handler's
-- RetryAfter(scope="queue"), which only moves it later); paused stays the indefinite
-- pause. Constant defaults and nullable columns: catalog changes only, no table rewrite.
-- (0013 is taken by another branch's migration.)
ALTER TABLE {prefix}jobs ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
ALTER TABLE {prefix}queues
    ADD COLUMN max_snoozes  integer,
    ADD COLUMN paused_until timestamptz;
