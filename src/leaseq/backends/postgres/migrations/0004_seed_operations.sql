-- Seed operations (issue 11): per-job lease, lease touches, counters, queue settings.
-- updated_at stays NULL until the job's first state change; readers show created_at then,
-- so inserts (the hot path) write nothing more than before.
ALTER TABLE {prefix}jobs
    ADD COLUMN lease      double precision,          -- the job's own lease, seconds
    ADD COLUMN touches    integer     NOT NULL DEFAULT 0,  -- extensions of this lease
    ADD COLUMN leased_at  timestamptz,               -- start of this lease
    ADD COLUMN touched_at timestamptz,               -- last extension of this lease
    ADD COLUMN reserves   integer     NOT NULL DEFAULT 0,
    ADD COLUMN timeouts   integer     NOT NULL DEFAULT 0,
    ADD COLUMN releases   integer     NOT NULL DEFAULT 0,
    ADD COLUMN buries     integer     NOT NULL DEFAULT 0,
    ADD COLUMN kicks      integer     NOT NULL DEFAULT 0,
    ADD COLUMN failed_at  timestamptz,
    ADD COLUMN updated_at timestamptz;

ALTER TABLE {prefix}history
    ADD COLUMN lease      double precision,
    ADD COLUMN reserves   integer     NOT NULL DEFAULT 0,
    ADD COLUMN timeouts   integer     NOT NULL DEFAULT 0,
    ADD COLUMN releases   integer     NOT NULL DEFAULT 0,
    ADD COLUMN buries     integer     NOT NULL DEFAULT 0,
    ADD COLUMN kicks      integer     NOT NULL DEFAULT 0,
    ADD COLUMN failed_at  timestamptz,
    ADD COLUMN updated_at timestamptz;

-- enqueue(..., unique_for=): the newest finished twin of a key.
CREATE INDEX {prefix}history_unique ON {prefix}history (queue, unique_key, finished_at)
    WHERE unique_key IS NOT NULL;

-- Queue settings (NULL: the default). Durations in seconds.
ALTER TABLE {prefix}queues
    ADD COLUMN max_attempts       integer,
    ADD COLUMN base_backoff       double precision,
    ADD COLUMN max_backoff        double precision,
    ADD COLUMN jitter             double precision,
    ADD COLUMN default_lease      double precision,
    ADD COLUMN max_lease          double precision,
    ADD COLUMN max_jobs           bigint,
    ADD COLUMN max_touches        integer,
    ADD COLUMN max_touch_duration double precision,
    ADD COLUMN min_touch_interval double precision,
    ADD COLUMN dead_retention     double precision;
