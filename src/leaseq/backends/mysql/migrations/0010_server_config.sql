-- Settings of the whole database (configure_server): one row. max_queues NULL: no cap.
CREATE TABLE {prefix}server (
    id         INT         NOT NULL,
    max_queues INT         NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id)
) ENGINE=InnoDB;
INSERT INTO {prefix}server (id) VALUES (1);
-- The queues counted against max_queues, kept only while it is set: configure_server
-- fills it from the jobs, the history and the queue settings; an enqueue into a queue not
-- listed adds it under the server row's lock.
CREATE TABLE {prefix}queue_names (
    name VARCHAR(200) NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
