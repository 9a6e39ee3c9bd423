-- Settings of the whole database (configure_server): one row. max_queues NULL: no cap.
CREATE TABLE {prefix}server (
    id         integer     PRIMARY KEY CHECK (id = 1),
    max_queues integer,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {prefix}server (id) VALUES (1);
-- The queues counted against max_queues, kept only while it is set: configure_server
-- fills it from the jobs, the history and the queue settings; an enqueue into a queue not
-- listed adds it under the server row's lock.
CREATE TABLE {prefix}queue_names (
    name text PRIMARY KEY
);
