-- Settings of the whole database (configure_server): one row. max_queues NULL: no cap.
CREATE TABLE {prefix}server (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    max_queues INTEGER NULL,
    updated_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
INSERT INTO {prefix}server (id) VALUES (1);
-- The queues counted against max_queues, kept only while it is set: configure_server
-- fills it from the jobs, the history and the queue settings; an enqueue into a queue not
-- listed adds it (BEGIN IMMEDIATE serialises the writers).
CREATE TABLE {prefix}queue_names (
    name TEXT PRIMARY KEY
);
