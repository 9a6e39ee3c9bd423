-- Job ids that never repeat (design §59): the identity of the server that last handed out
-- ids (its @@server_id) and the epoch, the number of times a new one was seen. A
-- connection that finds another identity bumps the epoch and moves the jobs' AUTO_INCREMENT
-- up to epoch << 40, once. No row yet: the first connection records its server at epoch 0.
CREATE TABLE {prefix}epoch (
    id         INT          NOT NULL,
    identity   VARCHAR(200) NOT NULL,
    epoch      INT          NOT NULL,
    updated_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
