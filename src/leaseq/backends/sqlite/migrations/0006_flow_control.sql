-- Flow control (issue 13): limits enforced by every claim. NULL: no limit.
-- rate_tokens and rate_at are the token bucket: tokens left after the last claim that
-- spent any, and the database's clock then, in seconds since the epoch (NULL: never used,
-- so full).
ALTER TABLE {prefix}queues ADD COLUMN concurrency_limit INTEGER;
ALTER TABLE {prefix}queues ADD COLUMN rate_per_sec REAL;
ALTER TABLE {prefix}queues ADD COLUMN rate_burst INTEGER;
ALTER TABLE {prefix}queues ADD COLUMN rate_tokens REAL;
ALTER TABLE {prefix}queues ADD COLUMN rate_at REAL;
