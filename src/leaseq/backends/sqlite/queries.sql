-- SQLite queries. Times are REAL unix seconds in UTC; "now" is the host clock read by SQLite
-- itself: (julianday('now') - 2440587.5) * 86400.0. Every write runs inside BEGIN IMMEDIATE,
-- so SQLite serialises writers and no row locks are needed.

-- name: insert_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, created_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at, (julianday('now') - 2440587.5) * 86400.0 + :delay),
        (julianday('now') - 2440587.5) * 86400.0);

-- name: insert_unique_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, created_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at, (julianday('now') - 2440587.5) * 86400.0 + :delay),
        (julianday('now') - 2440587.5) * 86400.0)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: find_unique
SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key;

-- name: claim_candidates
-- One queue's share of a claim (several queues: one UNION ALL of these, one branch each):
-- the job columns (lease_until and worker_id are about to be overwritten, so NULL) and the
-- clock, from which claim_ids sets the lease. A paused queue yields nothing.
SELECT id, queue, kind, payload, priority, attempts, max_attempts, unique_key,
       lease_token, NULL, NULL, created_at, available_at,
       (julianday('now') - 2440587.5) * 86400.0
FROM {prefix}jobs INDEXED BY {prefix}jobs_claim
WHERE queue = :queue AND state = 'available'
  AND available_at <= (julianday('now') - 2440587.5) * 86400.0
  AND NOT EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue AND paused = 1)
ORDER BY priority DESC, available_at, id
LIMIT :limit;

-- name: claim_ids
-- :until is :now (read by claim_candidates) plus the lease, added in Python as SQLite would
-- add them, so the claim returns the lease it stores without RETURNING.
UPDATE {prefix}jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    worker_id = :worker_id, lease_until = :until, started_at = COALESCE(started_at, :now)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'available';

-- name: jobs_by_ids
-- The claim's fallback, should claim_ids ever update other rows than it read.
SELECT id, queue, kind, payload, priority, attempts, max_attempts, unique_key,
       lease_token, lease_until, worker_id, created_at, available_at
FROM {prefix}jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND worker_id = :worker_id AND lease_until = :until;

-- name: renew
UPDATE {prefix}jobs SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :extend
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING lease_until, cancel_requested;

-- name: lease_of
SELECT lease_until, cancel_requested FROM {prefix}jobs WHERE id = :id;

-- name: lock_held
SELECT attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running';

-- name: archive
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, :state, payload, :result,
       CASE WHEN :state = 'completed' THEN NULL ELSE COALESCE(:error, last_error) END,
       priority, attempts, max_attempts, unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token
FROM {prefix}jobs WHERE id = :id;

-- name: delete_job
DELETE FROM {prefix}jobs WHERE id = :id;

-- name: to_dead
UPDATE {prefix}jobs SET state = 'dead', lease_until = NULL,
       last_error = COALESCE(:error, last_error)
WHERE id = :id;

-- name: reschedule
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - :give_back,
    available_at = (julianday('now') - 2440587.5) * 86400.0 + :delay,
    last_error = COALESCE(:error, last_error)
WHERE id = :id;

-- name: kick
UPDATE {prefix}jobs
SET state = 'available', attempts = 0,
    available_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id IN (SELECT id FROM {prefix}jobs WHERE queue = :queue AND state = 'dead'
             ORDER BY id LIMIT :limit);

-- name: retry_job
UPDATE {prefix}jobs
SET attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END, state = 'available',
    available_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = :id AND (state = 'dead' OR
      (state = 'available' AND available_at > (julianday('now') - 2440587.5) * 86400.0));

-- name: lock_idle
SELECT id FROM {prefix}jobs WHERE id = :id AND state IN ('available', 'dead');

-- name: lock_live
SELECT state FROM {prefix}jobs WHERE id = :id;

-- name: request_cancel
UPDATE {prefix}jobs SET cancel_requested = 1 WHERE id = :id;

-- name: history_state
SELECT state FROM {prefix}history WHERE id = :id;

-- name: state_of
SELECT CASE WHEN state = 'available'
             AND available_at > (julianday('now') - 2440587.5) * 86400.0
            THEN 'scheduled' ELSE state END
FROM {prefix}jobs WHERE id = :id
UNION ALL
SELECT state FROM {prefix}history WHERE id = :id;

-- name: get_live
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       available_at, lease_until, worker_id, created_at, started_at, NULL, NULL,
       last_error, cancel_requested, (julianday('now') - 2440587.5) * 86400.0
FROM {prefix}jobs WHERE id = :id;

-- name: get_history
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL, NULL, worker_id, created_at, started_at, finished_at, result, error, 0,
       (julianday('now') - 2440587.5) * 86400.0
FROM {prefix}history WHERE id = :id;

-- name: live_counts
SELECT queue,
       CASE WHEN state = 'available'
             AND available_at > (julianday('now') - 2440587.5) * 86400.0
            THEN 'scheduled' ELSE state END AS bucket,
       COUNT(*)
FROM {prefix}jobs GROUP BY queue, bucket;

-- name: history_counts
SELECT queue, state, COUNT(*) FROM {prefix}history GROUP BY queue, state;

-- name: expired_leases
SELECT id, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE state = 'running' AND lease_until <= (julianday('now') - 2440587.5) * 86400.0
ORDER BY lease_until LIMIT :limit;

-- name: reclaim_to_available
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL,
    available_at = (julianday('now') - 2440587.5) * 86400.0,
    last_error = 'lease expired'
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND lease_until <= (julianday('now') - 2440587.5) * 86400.0;

-- name: reclaim_to_dead
UPDATE {prefix}jobs SET state = 'dead', lease_until = NULL, last_error = :error
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND lease_until <= (julianday('now') - 2440587.5) * 86400.0;

-- name: prune
DELETE FROM {prefix}history
WHERE id IN (SELECT id FROM {prefix}history
             WHERE finished_at < (julianday('now') - 2440587.5) * 86400.0 - :age
             LIMIT :limit);

-- name: migrations_table
CREATE TABLE IF NOT EXISTS {prefix}migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

-- name: applied_versions
SELECT version FROM {prefix}migrations;

-- name: record_version
INSERT INTO {prefix}migrations (version, name) VALUES (:version, :name);

-- name: set_paused
INSERT INTO {prefix}queues (name, paused) VALUES (:queue, :paused)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
    updated_at = (julianday('now') - 2440587.5) * 86400.0;

-- name: paused_queues
SELECT name FROM {prefix}queues WHERE paused ORDER BY name;

-- name: list_live
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       available_at, lease_until, worker_id, created_at, started_at, NULL, NULL,
       last_error, cancel_requested, (julianday('now') - 2440587.5) * 86400.0
FROM {prefix}jobs
WHERE id > :after AND (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR :state =
       CASE WHEN state = 'available'
             AND available_at > (julianday('now') - 2440587.5) * 86400.0
            THEN 'scheduled' ELSE state END)
ORDER BY id LIMIT :limit;

-- name: list_history
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL, NULL, worker_id, created_at, started_at, finished_at, result, error, 0,
       (julianday('now') - 2440587.5) * 86400.0
FROM {prefix}history
WHERE id > :after AND (:queue IS NULL OR queue = :queue) AND (:state IS NULL OR state = :state)
ORDER BY id LIMIT :limit;

-- name: archive_held_many
-- ack_many: history rows for the jobs still held under the presented tokens (:pairs is a
-- JSON array of [id, lease_token]).
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, 'completed', payload, NULL, NULL, priority, attempts, max_attempts,
       unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token
FROM {prefix}jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (id, lease_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:pairs))
  AND state = 'running';

-- name: archive_held
-- archive_held_many for one job that has a result.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, 'completed', payload, :result, NULL, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token
FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running';

-- name: delete_held_many
-- The same fence as the archive statements: exactly the rows they copied.
DELETE FROM {prefix}jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (id, lease_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:pairs))
  AND state = 'running';

-- name: renew_held_many
UPDATE {prefix}jobs SET lease_until = (julianday('now') - 2440587.5) * 86400.0 + :extend
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (id, lease_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:pairs))
  AND state = 'running'
RETURNING id, lease_token, lease_until, cancel_requested;

-- name: drop_history
DROP TABLE IF EXISTS {prefix}history;

-- name: drop_jobs
DROP TABLE IF EXISTS {prefix}jobs;

-- name: drop_queues
DROP TABLE IF EXISTS {prefix}queues;

-- name: drop_migrations
DROP TABLE IF EXISTS {prefix}migrations;

-- name: completed_tokens
-- Jobs already completed, with the token that completed them: a retried ack whose first
-- attempt committed finds its own token here and is a success, not a LeaseLost.
SELECT id, lease_token FROM {prefix}history WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'completed';
