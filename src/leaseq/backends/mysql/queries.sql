-- MySQL 8.0.1+ / MariaDB 10.6+ queries, one text for both. Sessions run READ COMMITTED
-- (no gap locks on the claim path). "now" is UTC_TIMESTAMP(6); durations arrive as whole
-- microseconds. No UPDATE ... RETURNING here: a claim returns what its locking read saw,
-- updated as claim_ids updates it; a batch renewal re-reads the rows it holds.

-- name: insert_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          lease_token, available_at, created_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :tag,
        COALESCE(:run_at, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)),
        UTC_TIMESTAMP(6));

-- name: batch_ids
SELECT id FROM {prefix}jobs WHERE id >= :first AND lease_token = :tag ORDER BY id;

-- name: insert_unique_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          lease_token, available_at, created_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :tag,
        COALESCE(:run_at, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)),
        UTC_TIMESTAMP(6));

-- name: find_unique
-- A locking read sees the newest committed twin even in the caller's REPEATABLE READ.
SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key
LOCK IN SHARE MODE;

-- name: claim_starts
-- Where each queue's claimable jobs begin in the claim index, by a plain read (one UNION
-- ALL branch per queue). A paused queue, or one with nothing due, yields no row.
SELECT queue, sort_priority, available_at, id
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue AND paused = 1)
ORDER BY sort_priority, available_at, id
LIMIT 1;

-- name: claim_candidates
-- One queue's share of a claim (several queues: one UNION ALL of these, one branch each).
-- It locks what it returns and returns what the claim needs: the job columns (lease_until
-- and worker_id are about to be overwritten, so NULL) and the database's clock, from which
-- claim_ids sets the lease, so no re-read is needed without UPDATE ... RETURNING.
-- It starts at claim_starts' row: the index entries before it are mostly those of jobs
-- already claimed and not yet purged, and a locking read pays a lock check on each (a plain
-- read skips them cheaply), which had made this read the slowest statement of a drain.
-- The paused check is a plain read too: it locks no queues row. FORCE INDEX: as a UNION
-- branch MariaDB otherwise plans a full scan and a filesort, and a filesort under
-- FOR UPDATE locks every row it reads.
SELECT id, queue, kind, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), lease_token, NULL, NULL, created_at,
       available_at, UTC_TIMESTAMP(6)
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at <= UTC_TIMESTAMP(6)
  AND (sort_priority > :from_priority
       OR (sort_priority = :from_priority
           AND (available_at > :from_at OR (available_at = :from_at AND id >= :from_id))))
  AND NOT EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue AND paused = 1)
ORDER BY sort_priority, available_at, id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: claim_ids
-- Only rows claim_candidates locked in this transaction; :now and :until derive from its
-- UTC_TIMESTAMP(6), so the lease returned is the lease stored.
UPDATE {prefix}jobs FORCE INDEX (PRIMARY)
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    worker_id = :worker_id, lease_until = :until, started_at = COALESCE(started_at, :now)
WHERE id IN :ids AND state = 'available';

-- name: jobs_by_ids
-- The claim's fallback, should claim_ids ever update other rows than it read.
SELECT id, queue, kind, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), lease_token, lease_until, worker_id, created_at,
       available_at
FROM {prefix}jobs
WHERE id IN :ids AND state = 'running' AND worker_id = :worker_id AND lease_until = :until;

-- name: renew
UPDATE {prefix}jobs
SET lease_until = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :extend MICROSECOND)
WHERE id = :id AND lease_token = :token AND state = 'running';

-- name: lease_of
SELECT lease_until, cancel_requested FROM {prefix}jobs WHERE id = :id;

-- name: lock_held
SELECT attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: archive
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, :state, payload, :result,
       CASE WHEN :state = 'completed' THEN NULL ELSE COALESCE(:error, last_error) END,
       priority, attempts, max_attempts, CONVERT(unique_key USING utf8mb4), worker_id,
       created_at, started_at, UTC_TIMESTAMP(6), lease_token
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
    available_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND),
    last_error = COALESCE(:error, last_error)
WHERE id = :id;

-- name: kick
UPDATE {prefix}jobs SET state = 'available', attempts = 0, available_at = UTC_TIMESTAMP(6)
WHERE queue = :queue AND state = 'dead'
ORDER BY id LIMIT :limit;

-- name: retry_job
-- MySQL applies SET assignments left to right, so attempts is set before state changes.
UPDATE {prefix}jobs
SET attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END, state = 'available',
    available_at = UTC_TIMESTAMP(6)
WHERE id = :id
  AND (state = 'dead' OR (state = 'available' AND available_at > UTC_TIMESTAMP(6)));

-- name: lock_idle
SELECT id FROM {prefix}jobs WHERE id = :id AND state IN ('available', 'dead') FOR UPDATE;

-- name: lock_live
SELECT state FROM {prefix}jobs WHERE id = :id FOR UPDATE;

-- name: request_cancel
UPDATE {prefix}jobs SET cancel_requested = 1 WHERE id = :id;

-- name: history_state
SELECT state FROM {prefix}history WHERE id = :id;

-- name: state_of
SELECT CASE WHEN state = 'available' AND available_at > UTC_TIMESTAMP(6) THEN 'scheduled'
            ELSE state END
FROM {prefix}jobs WHERE id = :id
UNION ALL
SELECT state FROM {prefix}history WHERE id = :id;

-- name: get_live
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), available_at, lease_until, worker_id, created_at,
       started_at, NULL, NULL,
       last_error, cancel_requested, UTC_TIMESTAMP(6)
FROM {prefix}jobs WHERE id = :id;

-- name: get_history
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL, NULL, worker_id, created_at, started_at, finished_at, result, error, 0,
       UTC_TIMESTAMP(6)
FROM {prefix}history WHERE id = :id;

-- name: live_counts
SELECT queue,
       CASE WHEN state = 'available' AND available_at > UTC_TIMESTAMP(6) THEN 'scheduled'
            ELSE state END AS bucket,
       COUNT(*)
FROM {prefix}jobs GROUP BY queue, bucket;

-- name: history_counts
SELECT queue, state, COUNT(*) FROM {prefix}history GROUP BY queue, state;

-- name: expired_leases
SELECT id, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE state = 'running' AND lease_until <= UTC_TIMESTAMP(6)
ORDER BY lease_until LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: reclaim_to_available
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, available_at = UTC_TIMESTAMP(6),
    last_error = 'lease expired'
WHERE id IN :ids AND state = 'running' AND lease_until <= UTC_TIMESTAMP(6);

-- name: reclaim_to_dead
UPDATE {prefix}jobs SET state = 'dead', lease_until = NULL, last_error = :error
WHERE id IN :ids AND state = 'running' AND lease_until <= UTC_TIMESTAMP(6);

-- name: prune
DELETE FROM {prefix}history
WHERE finished_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL :age MICROSECOND)
ORDER BY finished_at LIMIT :limit;

-- name: migrate_lock
SELECT GET_LOCK(:key, 60);

-- name: migrate_unlock
SELECT RELEASE_LOCK(:key);

-- name: migrations_table
CREATE TABLE IF NOT EXISTS {prefix}migrations (
    version    INT          NOT NULL PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB;

-- name: applied_versions
SELECT version FROM {prefix}migrations;

-- name: record_version
INSERT INTO {prefix}migrations (version, name, applied_at)
VALUES (:version, :name, UTC_TIMESTAMP(6));

-- name: set_paused
INSERT INTO {prefix}queues (name, paused, updated_at) VALUES (:queue, :paused, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE paused = :paused, updated_at = UTC_TIMESTAMP(6);

-- name: paused_queues
SELECT name FROM {prefix}queues WHERE paused = 1 ORDER BY name;

-- name: list_live
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), available_at, lease_until, worker_id, created_at,
       started_at, NULL, NULL, last_error, cancel_requested, UTC_TIMESTAMP(6)
FROM {prefix}jobs
WHERE id > :after AND (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR :state =
       CASE WHEN state = 'available' AND available_at > UTC_TIMESTAMP(6) THEN 'scheduled'
            ELSE state END)
ORDER BY id LIMIT :limit;

-- name: list_history
SELECT id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL, NULL, worker_id, created_at, started_at, finished_at, result, error, 0,
       UTC_TIMESTAMP(6)
FROM {prefix}history
WHERE id > :after AND (:queue IS NULL OR queue = :queue) AND (:state IS NULL OR state = :state)
ORDER BY id LIMIT :limit;

-- name: archive_held_many
-- ack_many: history rows for the jobs still held under the presented tokens. FOR UPDATE
-- makes this a locking read (under READ COMMITTED an INSERT ... SELECT would otherwise read
-- a snapshot and lock nothing), so the rows cannot change before delete_held_many. FORCE
-- INDEX: a scan of the lease index would wait on other transactions' running rows.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, 'completed', payload, NULL, NULL, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), worker_id, created_at, started_at,
       UTC_TIMESTAMP(6), lease_token
FROM {prefix}jobs FORCE INDEX (PRIMARY)
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running'
FOR UPDATE;

-- name: archive_held
-- archive_held_many for one job that has a result.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token)
SELECT id, queue, kind, 'completed', payload, :result, NULL, priority, attempts,
       max_attempts, CONVERT(unique_key USING utf8mb4), worker_id, created_at, started_at,
       UTC_TIMESTAMP(6), lease_token
FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: delete_held_many
-- The same fence as the archive statements: exactly the rows they locked and copied.
-- Multi-table syntax for the index hint (a single-table DELETE takes none): by the lease
-- index it would scan every running job and, unlike an UPDATE, wait on each one another
-- transaction holds, so concurrent acks deadlocked.
DELETE j FROM {prefix}jobs AS j FORCE INDEX (PRIMARY)
WHERE j.id IN :ids AND (j.id, j.lease_token) IN :pairs AND j.state = 'running';

-- name: renew_held_many
UPDATE {prefix}jobs FORCE INDEX (PRIMARY)
SET lease_until = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :extend MICROSECOND)
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running';

-- name: leases_held
-- After renew_held_many in the same transaction: the rows it renewed, which this
-- transaction holds until it commits (MySQL has no UPDATE ... RETURNING).
SELECT id, lease_token, lease_until, cancel_requested
FROM {prefix}jobs FORCE INDEX (PRIMARY)
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running';

-- name: drop_tables
DROP TABLE IF EXISTS {prefix}history, {prefix}jobs, {prefix}queues, {prefix}migrations;

-- name: completed_tokens
-- Jobs already completed, with the token that completed them: a retried ack whose first
-- attempt committed finds its own token here and is a success, not a LeaseLost.
SELECT id, lease_token FROM {prefix}history WHERE id IN :ids AND state = 'completed';
