-- leaseq schema v1 for SQLite 3.35+. Times are REAL unix seconds (UTC).
-- AUTOINCREMENT: ids are never reused, so a job id names one job in the live table and in
-- history for ever (without it SQLite hands out max(rowid)+1 again after a delete).
CREATE TABLE {prefix}jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    kind             TEXT,
    payload          TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL DEFAULT 'available',  -- available | running | dead
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    unique_key       TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_until      REAL,
    worker_id        TEXT,
    available_at     REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    last_error       TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);

-- The claim index: due jobs of one queue in claim order, and nothing else.
CREATE INDEX {prefix}jobs_claim ON {prefix}jobs (queue, priority DESC, available_at, id)
    WHERE state = 'available';

CREATE INDEX {prefix}jobs_lease ON {prefix}jobs (lease_until) WHERE state = 'running';

CREATE INDEX {prefix}jobs_dead ON {prefix}jobs (queue, id) WHERE state = 'dead';

-- The live table holds only live jobs, so a plain unique index is "unique among live jobs".
CREATE UNIQUE INDEX {prefix}jobs_unique ON {prefix}jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;

CREATE TABLE {prefix}history (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    kind         TEXT,
    state        TEXT    NOT NULL,  -- completed | cancelled | discarded
    payload      TEXT    NOT NULL,
    result       TEXT,
    error        TEXT,
    priority     INTEGER NOT NULL,
    attempts     INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    unique_key   TEXT,
    worker_id    TEXT,
    created_at   REAL    NOT NULL,
    started_at   REAL,
    finished_at  REAL    NOT NULL
);

CREATE INDEX {prefix}history_finished ON {prefix}history (finished_at);

CREATE INDEX {prefix}history_queue ON {prefix}history (queue, state);
