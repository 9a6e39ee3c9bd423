-- Statements every SQL dialect writes alike (PostgreSQL, MySQL/MariaDB, SQLite): loaded
-- with each dialect's queries.sql (plan.load_queries), which may use their names and
-- fragments but not define them again. A statement that comes to differ in one dialect
-- moves back into the three files.

-- name: delete_job
DELETE FROM {prefix}jobs WHERE id = :id;

-- name: history_state
SELECT state FROM {prefix}history WHERE id = :id;

-- name: get_live
-- The JobInfo row (ops.info): 19 columns, then the counters, failed_at, updated_at (the
-- creation until the first state change), the job's own lease and its headers.
SELECT {_live_row}
FROM {prefix}jobs WHERE id = :id;

-- name: get_history
-- get_live's columns as history keeps them (rows archived before migration 0004 have no
-- updated_at: their finish is their last change).
SELECT {_history_row}
FROM {prefix}history WHERE id = :id;

-- name: applied_versions
SELECT version FROM {prefix}migrations;

-- name: queue_configs
SELECT name, max_attempts, base_backoff, max_backoff, jitter, default_lease, max_lease,
       max_jobs, max_touches, max_touch_duration, min_touch_interval, dead_retention,
       concurrency_limit, rate_per_sec, rate_burst, max_snoozes
FROM {prefix}queues ORDER BY name;

-- name: insert_flow_part
INSERT INTO {prefix}flow_parts (flow_id, idx, spec, result)
VALUES (:flow_id, :idx, :spec, :result);

-- name: count_down_flow
UPDATE {prefix}flows SET remaining = remaining - 1 WHERE id = :id;

-- name: flow_spec
SELECT spec FROM {prefix}flow_parts WHERE flow_id = :flow_id AND idx = :idx;

-- name: set_flow_job
UPDATE {prefix}flows SET job_id = :job_id, step = :step WHERE id = :id;

-- name: get_flow
SELECT id, kind, size, remaining, step, job_id FROM {prefix}flows WHERE id = :id;

-- name: queue_in_use
-- A queue not counted yet that holds jobs, history or settings already (made while no cap
-- was set, or by a client that had not read the cap yet): counted without refusal.
SELECT CASE WHEN EXISTS (SELECT 1 FROM {prefix}jobs WHERE queue = :queue)
              OR EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue)
              OR EXISTS (SELECT 1 FROM {prefix}history WHERE queue = :queue)
            THEN 1 ELSE 0 END;

-- name: queue_counted
SELECT 1 FROM {prefix}queue_names WHERE name = :queue;

-- name: count_queues
SELECT COUNT(*) FROM {prefix}queue_names;

-- name: clear_queue_names
DELETE FROM {prefix}queue_names;

-- name: fill_queue_names
-- configure_server(max_queues=N): the queues that count, from what the database holds.
INSERT INTO {prefix}queue_names (name)
SELECT queue FROM {prefix}jobs
UNION SELECT queue FROM {prefix}history
UNION SELECT name FROM {prefix}queues;

-- name: server_config
SELECT max_queues, (SELECT COUNT(*) FROM {prefix}queue_names) FROM {prefix}server WHERE id = 1;
