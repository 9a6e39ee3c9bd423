-- Chains and groups (issue 15, docs/workflows.md). One row per flow, made when the flow
-- is enqueued; the flow id is made by the client (32 hex digits). remaining counts steps
-- or members not completed yet; a chain's job_id and step name the step enqueued last,
-- a group's job_id its callback once enqueued. callback: the group callback's spec.
CREATE TABLE {prefix}flows (
    id         VARCHAR(64)  NOT NULL,
    kind       VARCHAR(16)  NOT NULL,
    size       INT          NOT NULL,
    remaining  INT          NOT NULL,
    step       INT          NOT NULL DEFAULT 0,
    job_id     BIGINT       NULL,
    callback   LONGTEXT     NULL,
    created_at DATETIME(6)  NOT NULL,  -- UTC_TIMESTAMP(6), written by insert_flow
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A chain's steps after the first (spec, written with the flow), and a group's member
-- results (result, written by each member's completion: a member completes once, so a
-- second row for one member would be a bug, and the primary key refuses it).
CREATE TABLE {prefix}flow_parts (
    flow_id VARCHAR(64) NOT NULL,
    idx     INT         NOT NULL,
    spec    LONGTEXT    NULL,
    result  LONGTEXT    NULL,
    PRIMARY KEY (flow_id, idx)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
