-- leaseq schema v1 for MySQL 8.0.1+ and MariaDB 10.6+ (one text for both).
-- Times are DATETIME(6) in UTC, written with UTC_TIMESTAMP(6) so the session time zone
-- never matters. Text uses utf8mb4_bin, so 'A' <> 'a' as on the other backends; unique keys
-- are VARBINARY because utf8mb4_bin still ignores trailing spaces ('k' = 'k ') and no NO PAD
-- collation has the same name on MySQL 8 and MariaDB.
CREATE TABLE {prefix}jobs (
    id               BIGINT       NOT NULL AUTO_INCREMENT,
    queue            VARCHAR(200) NOT NULL,
    kind             VARCHAR(200) NULL,
    payload          LONGTEXT     NOT NULL,
    priority         INT          NOT NULL DEFAULT 0,
    -- The claim order is priority DESC, available_at, id. MariaDB before 10.8 ignores DESC
    -- in an index, and a filesort under FOR UPDATE locks every row it reads, so the index
    -- orders by this negated copy instead, all ascending.
    sort_priority    BIGINT AS (0 - CAST(priority AS SIGNED)) STORED,
    state            VARCHAR(16)  NOT NULL DEFAULT 'available',
    attempts         INT          NOT NULL DEFAULT 0,
    max_attempts     INT          NOT NULL,
    unique_key       VARBINARY(1020) NULL,  -- 255 characters of up to 4 bytes
    lease_token      BIGINT       NOT NULL DEFAULT 0,
    lease_until      DATETIME(6)  NULL,
    worker_id        VARCHAR(200) NULL,
    available_at     DATETIME(6)  NOT NULL,
    created_at       DATETIME(6)  NOT NULL,
    started_at       DATETIME(6)  NULL,
    last_error       MEDIUMTEXT   NULL,
    cancel_requested TINYINT(1)   NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    -- The claim index; it covers the candidate query, so the locking read touches only
    -- the rows it returns.
    KEY {prefix}jobs_claim (queue, state, sort_priority, available_at, id),
    KEY {prefix}jobs_lease (state, lease_until),
    -- The live table holds only live jobs, and a unique key allows many NULLs, so this
    -- is "unique among live jobs".
    UNIQUE KEY {prefix}jobs_unique (queue, unique_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE {prefix}history (
    id           BIGINT       NOT NULL,
    queue        VARCHAR(200) NOT NULL,
    kind         VARCHAR(200) NULL,
    state        VARCHAR(16)  NOT NULL,
    payload      LONGTEXT     NOT NULL,
    result       LONGTEXT     NULL,
    error        MEDIUMTEXT   NULL,
    priority     INT          NOT NULL,
    attempts     INT          NOT NULL,
    max_attempts INT          NOT NULL,
    unique_key   VARCHAR(255) NULL,
    worker_id    VARCHAR(200) NULL,
    created_at   DATETIME(6)  NOT NULL,
    started_at   DATETIME(6)  NULL,
    finished_at  DATETIME(6)  NOT NULL,
    PRIMARY KEY (id),
    KEY {prefix}history_finished (finished_at),
    KEY {prefix}history_queue (queue, state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
