-- Seed operations (issue 11): per-job lease, lease touches, counters, queue settings.
-- SQLite adds one column per ALTER TABLE. updated_at stays NULL until the job's first
-- state change; readers show created_at then, so inserts write nothing more than before.
ALTER TABLE {prefix}jobs ADD COLUMN lease REAL;
ALTER TABLE {prefix}jobs ADD COLUMN touches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN leased_at REAL;
ALTER TABLE {prefix}jobs ADD COLUMN touched_at REAL;
ALTER TABLE {prefix}jobs ADD COLUMN reserves INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN timeouts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN releases INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN buries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN kicks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}jobs ADD COLUMN failed_at REAL;
ALTER TABLE {prefix}jobs ADD COLUMN updated_at REAL;

ALTER TABLE {prefix}history ADD COLUMN lease REAL;
ALTER TABLE {prefix}history ADD COLUMN reserves INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN timeouts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN releases INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN buries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN kicks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}history ADD COLUMN failed_at REAL;
ALTER TABLE {prefix}history ADD COLUMN updated_at REAL;

-- enqueue(..., unique_for=): the newest finished twin of a key.
CREATE INDEX {prefix}history_unique ON {prefix}history (queue, unique_key, finished_at)
    WHERE unique_key IS NOT NULL;

-- Queue settings (NULL: the default). Durations in seconds.
ALTER TABLE {prefix}queues ADD COLUMN max_attempts INTEGER;
ALTER TABLE {prefix}queues ADD COLUMN base_backoff REAL;
ALTER TABLE {prefix}queues ADD COLUMN max_backoff REAL;
ALTER TABLE {prefix}queues ADD COLUMN jitter REAL;
ALTER TABLE {prefix}queues ADD COLUMN default_lease REAL;
ALTER TABLE {prefix}queues ADD COLUMN max_lease REAL;
ALTER TABLE {prefix}queues ADD COLUMN max_jobs INTEGER;
ALTER TABLE {prefix}queues ADD COLUMN max_touches INTEGER;
ALTER TABLE {prefix}queues ADD COLUMN max_touch_duration REAL;
ALTER TABLE {prefix}queues ADD COLUMN min_touch_interval REAL;
ALTER TABLE {prefix}queues ADD COLUMN dead_retention REAL;
