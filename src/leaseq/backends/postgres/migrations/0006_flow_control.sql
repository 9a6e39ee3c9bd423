-- Flow control (issue 13): limits enforced by every claim. NULL: no limit.
-- rate_tokens and rate_at are the token bucket: tokens left after the last claim that
-- spent any, and the database's clock then (NULL: never used, so full).
ALTER TABLE {prefix}queues
    ADD COLUMN concurrency_limit integer,
    ADD COLUMN rate_per_sec      double precision,
    ADD COLUMN rate_burst        integer,
    ADD COLUMN rate_tokens       double precision,
    ADD COLUMN rate_at           timestamptz;
