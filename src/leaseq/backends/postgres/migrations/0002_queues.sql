-- Per-queue settings. A paused queue is skipped by every claim.
CREATE TABLE {prefix}queues (
    name       text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);
