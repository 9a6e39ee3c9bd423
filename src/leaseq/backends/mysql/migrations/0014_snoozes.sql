-- Back-pressure from a handler (issue 33, item 5; docs/design.md §67). A job put back by
-- RetryAfter counts its snoozes (kept in history, as the other counters are) and gives
-- its attempt back; a queue's optional max_snoozes sends a job past it to dead. A queue's
-- pause may end by itself at paused_until (UTC, as every time here: an operator's
-- pause(until=), or a handler's RetryAfter(scope="queue"), which only moves it later);
-- paused stays the indefinite pause. Columns added last with constant defaults: an
-- instant change on MySQL 8.0.12+ and MariaDB 10.6; a copy on MySQL 8.0.1-8.0.11.
-- (0013 is taken by another branch's migration.)
ALTER TABLE {prefix}jobs ADD COLUMN snoozes INT NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN snoozes INT NOT NULL DEFAULT 0;
ALTER TABLE {prefix}queues
    ADD COLUMN max_snoozes  INT         NULL,
    ADD COLUMN paused_until DATETIME(6) NULL;
