-- Chains and groups (issue 15, docs/workflows.md). One row per flow, made when the flow
-- is enqueued; the flow id is made by the client (32 hex digits). remaining counts steps
-- or members not completed yet; a chain's job_id and step name the step enqueued last,
-- a group's job_id its callback once enqueued. callback: the group callback's spec.
CREATE TABLE {prefix}flows (
    id         text        PRIMARY KEY,
    kind       text        NOT NULL,
    size       integer     NOT NULL,
    remaining  integer     NOT NULL,
    step       integer     NOT NULL DEFAULT 0,
    job_id     bigint      NULL,
    callback   text        NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- A chain's steps after the first (spec, written with the flow), and a group's member
-- results (result, written by each member's completion: a member completes once, so a
-- second row for one member would be a bug, and the primary key refuses it).
CREATE TABLE {prefix}flow_parts (
    flow_id text    NOT NULL,
    idx     integer NOT NULL,
    spec    text    NULL,
    result  text    NULL,
    PRIMARY KEY (flow_id, idx)
);
