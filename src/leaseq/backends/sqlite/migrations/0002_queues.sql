-- Per-queue settings. A paused queue is skipped by every claim.
CREATE TABLE {prefix}queues (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
