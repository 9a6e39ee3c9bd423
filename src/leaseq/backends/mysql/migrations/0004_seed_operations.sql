-- Seed operations (issue 11): per-job lease, lease touches, counters, queue settings.
-- updated_at stays NULL until the job's first state change; readers show created_at then,
-- so inserts (the hot path) write nothing more than before.
ALTER TABLE {prefix}jobs
    ADD COLUMN lease      DOUBLE      NULL,               -- the job's own lease, seconds
    ADD COLUMN touches    INT         NOT NULL DEFAULT 0, -- extensions of this lease
    ADD COLUMN leased_at  DATETIME(6) NULL,               -- start of this lease
    ADD COLUMN touched_at DATETIME(6) NULL,               -- last extension of this lease
    ADD COLUMN reserves   INT         NOT NULL DEFAULT 0,
    ADD COLUMN timeouts   INT         NOT NULL DEFAULT 0,
    ADD COLUMN releases   INT         NOT NULL DEFAULT 0,
    ADD COLUMN buries     INT         NOT NULL DEFAULT 0,
    ADD COLUMN kicks      INT         NOT NULL DEFAULT 0,
    ADD COLUMN failed_at  DATETIME(6) NULL,
    ADD COLUMN updated_at DATETIME(6) NULL;

ALTER TABLE {prefix}history
    ADD COLUMN lease      DOUBLE      NULL,
    ADD COLUMN reserves   INT         NOT NULL DEFAULT 0,
    ADD COLUMN timeouts   INT         NOT NULL DEFAULT 0,
    ADD COLUMN releases   INT         NOT NULL DEFAULT 0,
    ADD COLUMN buries     INT         NOT NULL DEFAULT 0,
    ADD COLUMN kicks      INT         NOT NULL DEFAULT 0,
    ADD COLUMN failed_at  DATETIME(6) NULL,
    ADD COLUMN updated_at DATETIME(6) NULL,
    -- enqueue(..., unique_for=): the newest finished twin of a key.
    ADD KEY {prefix}history_unique (queue, unique_key, finished_at);

-- Queue settings (NULL: the default). Durations in seconds.
ALTER TABLE {prefix}queues
    ADD COLUMN max_attempts       INT    NULL,
    ADD COLUMN base_backoff       DOUBLE NULL,
    ADD COLUMN max_backoff        DOUBLE NULL,
    ADD COLUMN jitter             DOUBLE NULL,
    ADD COLUMN default_lease      DOUBLE NULL,
    ADD COLUMN max_lease          DOUBLE NULL,
    ADD COLUMN max_jobs           BIGINT NULL,
    ADD COLUMN max_touches        INT    NULL,
    ADD COLUMN max_touch_duration DOUBLE NULL,
    ADD COLUMN min_touch_interval DOUBLE NULL,
    ADD COLUMN dead_retention     DOUBLE NULL;
