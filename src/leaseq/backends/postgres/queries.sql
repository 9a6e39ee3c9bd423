-- PostgreSQL queries. Writes run under READ COMMITTED; holder writes lock the row by
-- (id, lease_token, state) first, so a stale holder matches nothing.

-- name: insert_job
-- pg_notify wakes LISTENing workers at commit (identical notifications in one transaction
-- are delivered once), without a round trip of its own.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at::timestamptz, now() + make_interval(secs => :delay)))
RETURNING id, pg_notify(:channel, queue);

-- name: insert_jobs
-- The batch arrives as one JSON array of objects {q: queue, k: kind, p: payload,
-- pr: priority, ma: max_attempts, ra: run_at, d: delay} (ra and d left out when unset),
-- the payload embedded as the JSON text leaseq encoded. json_to_recordset parses each
-- object once into typed columns, and as type json (not jsonb) p keeps its text byte for
-- byte; one JSON parameter costs far less to send than seven arrays of text.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, available_at)
SELECT r.q, r.k, COALESCE(r.p::text, 'null'), r.pr, r.ma,
       COALESCE(r.ra, now() + make_interval(secs => COALESCE(r.d, 0)))
FROM ROWS FROM (json_to_recordset(:rows::json)
                AS (q text, k text, p json, pr integer, ma integer, ra timestamptz, d float8))
     WITH ORDINALITY AS r(q, k, p, pr, ma, ra, d, n)
ORDER BY r.n
RETURNING id, pg_notify(:channel, queue);

-- name: insert_unique_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at::timestamptz, now() + make_interval(secs => :delay)))
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id, pg_notify(:channel, queue);

-- name: find_unique
SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key;

-- name: claim
-- One statement claims a batch. Per queue, a LATERAL probe walks the claim index in order
-- and locks what it takes, skipping rows other claimers hold; the probes' rows are merged
-- into the global order. MATERIALIZED keeps the planner from re-running the locking
-- subquery per updated row, which could claim more than :limit rows.
WITH picked AS MATERIALIZED (
    SELECT c.id
    FROM unnest(:queues::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, available_at FROM {prefix}jobs
        WHERE queue = q.name AND state = 'available' AND available_at <= now()
        ORDER BY priority DESC, available_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE NOT EXISTS (SELECT 1 FROM {prefix}queues AS p WHERE p.name = q.name AND p.paused)
    ORDER BY c.priority DESC, c.available_at, c.id
    LIMIT :limit
)
UPDATE {prefix}jobs AS j
SET state = 'running', attempts = j.attempts + 1, lease_token = j.lease_token + 1,
    worker_id = :worker_id, lease_until = now() + make_interval(secs => :lease),
    started_at = COALESCE(j.started_at, now())
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
          j.unique_key, j.lease_token, j.lease_until, j.worker_id, j.created_at,
          j.available_at;

-- name: renew
UPDATE {prefix}jobs SET lease_until = now() + make_interval(secs => :extend)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING lease_until, cancel_requested;

-- name: lock_held
SELECT attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: complete_held
-- Archive then delete in one statement: the DELETE is the fence.
WITH done AS (
    DELETE FROM {prefix}jobs WHERE id = :id AND lease_token = :token AND state = 'running'
    RETURNING *
)
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, 'completed', payload, :result, NULL, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at, now(), lease_token
FROM done
RETURNING id;

-- name: archive
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, :state::text, payload, :result::text,
       CASE WHEN :state::text = 'completed' THEN NULL
            ELSE COALESCE(:error::text, last_error) END,
       priority, attempts, max_attempts, unique_key, worker_id, created_at, started_at, now(), lease_token
FROM {prefix}jobs WHERE id = :id;

-- name: delete_job
DELETE FROM {prefix}jobs WHERE id = :id;

-- name: to_dead
UPDATE {prefix}jobs SET state = 'dead', lease_until = NULL,
       last_error = COALESCE(:error::text, last_error)
WHERE id = :id;

-- name: reschedule
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - :give_back,
    available_at = now() + make_interval(secs => :delay),
    last_error = COALESCE(:error::text, last_error)
WHERE id = :id;

-- name: kick
UPDATE {prefix}jobs SET state = 'available', attempts = 0, available_at = now()
WHERE id IN (SELECT id FROM {prefix}jobs WHERE queue = :queue AND state = 'dead'
             ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED);

-- name: retry_job
UPDATE {prefix}jobs
SET attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END, state = 'available',
    available_at = now()
WHERE id = :id AND (state = 'dead' OR (state = 'available' AND available_at > now()));

-- name: lock_idle
SELECT id FROM {prefix}jobs WHERE id = :id AND state IN ('available', 'dead') FOR UPDATE;

-- name: lock_live
SELECT state FROM {prefix}jobs WHERE id = :id FOR UPDATE;

-- name: request_cancel
UPDATE {prefix}jobs SET cancel_requested = true WHERE id = :id;

-- name: history_state
SELECT state FROM {prefix}history WHERE id = :id;

-- name: state_of
SELECT CASE WHEN state = 'available' AND available_at > now() THEN 'scheduled'
            ELSE state END
FROM {prefix}jobs WHERE id = :id
UNION ALL
SELECT state FROM {prefix}history WHERE id = :id;

-- name: get_live
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       available_at, lease_until, worker_id, created_at, started_at, NULL::timestamptz,
       NULL::text, last_error, cancel_requested, now()
FROM {prefix}jobs WHERE id = :id;

-- name: get_history
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL::timestamptz, NULL::timestamptz, worker_id, created_at, started_at, finished_at,
       result, error, false, now()
FROM {prefix}history WHERE id = :id;

-- name: live_counts
SELECT queue,
       CASE WHEN state = 'available' AND available_at > now() THEN 'scheduled'
            ELSE state END AS bucket,
       count(*)
FROM {prefix}jobs GROUP BY queue, bucket;

-- name: history_counts
SELECT queue, state, count(*) FROM {prefix}history GROUP BY queue, state;

-- name: expired_leases
SELECT id, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE state = 'running' AND lease_until <= now()
ORDER BY lease_until LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: reclaim_to_available
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, available_at = now(),
    last_error = 'lease expired'
WHERE id = ANY(:ids) AND state = 'running' AND lease_until <= now();

-- name: reclaim_to_dead
UPDATE {prefix}jobs SET state = 'dead', lease_until = NULL, last_error = :error
WHERE id = ANY(:ids) AND state = 'running' AND lease_until <= now();

-- name: prune
DELETE FROM {prefix}history
WHERE id IN (SELECT id FROM {prefix}history
             WHERE finished_at < now() - make_interval(secs => :age)
             LIMIT :limit);

-- name: migrate_lock
SELECT pg_advisory_xact_lock(hashtext(:key));

-- name: migrations_table
CREATE TABLE IF NOT EXISTS {prefix}migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_versions
SELECT version FROM {prefix}migrations;

-- name: record_version
INSERT INTO {prefix}migrations (version, name) VALUES (:version, :name);

-- name: set_paused
INSERT INTO {prefix}queues (name, paused) VALUES (:queue, :paused)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now();

-- name: paused_queues
SELECT name FROM {prefix}queues WHERE paused ORDER BY name;

-- name: list_live
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       available_at, lease_until, worker_id, created_at, started_at, NULL::timestamptz,
       NULL::text, last_error, cancel_requested, now()
FROM {prefix}jobs
WHERE id > :after AND (:queue::text IS NULL OR queue = :queue::text)
  AND (:state::text IS NULL OR :state::text =
       CASE WHEN state = 'available' AND available_at > now() THEN 'scheduled' ELSE state END)
ORDER BY id LIMIT :limit;

-- name: list_history
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL::timestamptz, NULL::timestamptz, worker_id, created_at, started_at, finished_at,
       result, error, false, now()
FROM {prefix}history
WHERE id > :after AND (:queue::text IS NULL OR queue = :queue::text)
  AND (:state::text IS NULL OR state = :state::text)
ORDER BY id LIMIT :limit;

-- name: complete_many
-- Per-job fencing in one statement: only rows still running under the presented token are
-- archived and removed; the ids returned are the jobs completed. The batch comes as one
-- JSON array of [id, token, result] with each result embedded as the JSON text leaseq
-- encoded (null: none), which is cheaper to send than three arrays.
WITH input AS (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token,
           NULLIF((e->2)::text, 'null') AS result
    FROM json_array_elements(:items::json) AS e
), done AS (
    DELETE FROM {prefix}jobs AS j USING input AS i
    WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
    RETURNING j.*, i.result AS new_result
)
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, 'completed', payload, new_result, NULL, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at, now(), lease_token
FROM done
RETURNING id;

-- name: renew_many
UPDATE {prefix}jobs AS j SET lease_until = now() + make_interval(secs => i.extend)
FROM unnest(:ids::bigint[], :tokens::bigint[], :extends::float8[]) AS i(id, token, extend)
WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
RETURNING j.id, j.lease_until, j.cancel_requested;

-- name: drop_tables
DROP TABLE IF EXISTS {prefix}history, {prefix}jobs, {prefix}queues, {prefix}migrations;

-- name: completed_tokens
-- Jobs already completed, with the token that completed them: a retried ack whose first
-- attempt committed finds its own token here and is a success, not a LeaseLost.
SELECT id, lease_token FROM {prefix}history WHERE id = ANY(:ids) AND state = 'completed';
