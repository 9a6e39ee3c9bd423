-- Flow control (issue 13): limits enforced by every claim. NULL: no limit.
-- rate_tokens and rate_at are the token bucket: tokens left after the last claim that
-- spent any, and the database's clock then (NULL: never used, so full).
ALTER TABLE {prefix}queues
    ADD COLUMN concurrency_limit INT         NULL,
    ADD COLUMN rate_per_sec      DOUBLE      NULL,
    ADD COLUMN rate_burst        INT         NULL,
    ADD COLUMN rate_tokens       DOUBLE      NULL,
    ADD COLUMN rate_at           DATETIME(6) NULL;
