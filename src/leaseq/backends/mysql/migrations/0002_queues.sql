-- Per-queue settings. A paused queue is skipped by every claim.
CREATE TABLE {prefix}queues (
    name       VARCHAR(200) NOT NULL,
    paused     TINYINT(1)   NOT NULL DEFAULT 0,
    updated_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
