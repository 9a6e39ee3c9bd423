-- MySQL 8.0.1+ / MariaDB 10.6+ queries, one text for both. Sessions run READ COMMITTED
-- (no gap locks on the claim path). "now" is UTC_TIMESTAMP(6); durations arrive as whole
-- microseconds. No UPDATE ... RETURNING here: a claim returns what its locking read saw,
-- updated as claim_ids updates it; a batch renewal reads (and locks) the rows it will
-- renew first, and stores the lease it computed from that read's clock.

-- name: insert_job
-- For jobs without a lease or headers of their own; insert_full_job stores those.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          lease_token, available_at, created_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :tag,
        COALESCE(:run_at, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)),
        UTC_TIMESTAMP(6));

-- name: insert_full_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          lease_token, available_at, created_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :tag,
        COALESCE(:run_at, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)),
        UTC_TIMESTAMP(6), :lease, :headers, :tags);

-- name: batch_ids
SELECT id FROM {prefix}jobs WHERE id >= :first AND lease_token = :tag ORDER BY id;

-- name: insert_unique_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          lease_token, available_at, created_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :tag,
        COALESCE(:run_at, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)),
        UTC_TIMESTAMP(6), :lease, :headers, :tags);

-- name: find_unique
-- A locking read sees the newest committed twin even in the caller's REPEATABLE READ.
SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key
LOCK IN SHARE MODE;

-- name: claim_starts
-- Where each queue's claimable jobs begin in the claim index, by a plain read (one UNION
-- ALL branch per queue). A paused queue (paused, or paused_until still to come: a timed
-- pause ends by itself), or one with nothing due, yields no row.
SELECT queue, sort_priority, available_at, id
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at <= UTC_TIMESTAMP(6)
  AND NOT EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue
                  AND (paused = 1 OR paused_until > UTC_TIMESTAMP(6)
                       OR (:gate = 1 AND (concurrency_limit IS NOT NULL
                                          OR rate_per_sec IS NOT NULL))))
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
-- Times come as microseconds since the epoch (MysqlDialect.dt and .clock): PyMySQL
-- decodes each DATETIME value in Python, which took a third of this read's time.
-- Last come what ops.lease_for needs: the job's own lease and its queue's default_lease
-- and max_lease, by subqueries, which a locking read does not lock (a join would lock the
-- settings row) and which do not depend on the row, so they run once per branch. Then
-- the job's headers.
-- Flow control: :take is how many jobs the branch may return. :gate 1 leaves out a queue
-- whose settings set a concurrency_limit or a rate_per_sec (claim_starts too): those are
-- claimed only with :gate 0 and a :take SqlOps.claim worked out from their limits
-- (lock_limits), so a client that does not know of a limit yet claims nothing from it.
SELECT id, queue, kind, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), lease_token, NULL, NULL,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', available_at),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)), lease,
       (SELECT default_lease FROM {prefix}queues WHERE name = :queue),
       (SELECT max_lease FROM {prefix}queues WHERE name = :queue), headers,
       reserves, releases, timeouts, tags, snoozes
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at <= UTC_TIMESTAMP(6)
  AND (sort_priority > :from_priority
       OR (sort_priority = :from_priority
           AND (available_at > :from_at OR (available_at = :from_at AND id >= :from_id))))
  AND NOT EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue
                  AND (paused = 1 OR paused_until > UTC_TIMESTAMP(6)
                       OR (:gate = 1 AND (concurrency_limit IS NOT NULL
                                          OR rate_per_sec IS NOT NULL))))
ORDER BY sort_priority, available_at, id
LIMIT :take
FOR UPDATE SKIP LOCKED;

-- name: claim_ids
-- Only rows claim_candidates locked in this transaction; :now and :until derive from its
-- UTC_TIMESTAMP(6), so the lease returned is the lease stored. Run once per distinct lease.
UPDATE {prefix}jobs FORCE INDEX (PRIMARY)
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    worker_id = :worker_id, lease_until = :until, started_at = COALESCE(started_at, :now),
    touches = 0, leased_at = :now, touched_at = NULL, reserves = reserves + 1,
    updated_at = :now
WHERE id IN :ids AND state = 'available';

-- name: jobs_by_ids
-- The claim's fallback, should claim_ids ever update other rows than it read; times in
-- microseconds since the epoch, as claim_candidates returns them.
SELECT id, queue, kind, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), lease_token,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', lease_until), worker_id,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', created_at),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', available_at), headers, reserves, releases, timeouts, tags, snoozes
FROM {prefix}jobs
WHERE id IN :ids AND state = 'running' AND worker_id = :worker_id AND lease_until = :until;

-- name: lock_held
SELECT attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: lock_held_many
-- fail_many: the rows still held under the presented tokens, locked (by primary key, in
-- id order, so two batches cannot deadlock).
SELECT id, lease_token, attempts, max_attempts, cancel_requested
FROM {prefix}jobs FORCE INDEX (PRIMARY)
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running'
ORDER BY id
FOR UPDATE;

-- name: archive
-- The history row keeps the counters; its updated_at is the finish. It keeps the
-- job's last ended lease (ended_token, ended_as), or, with :ended, records the lease this
-- archive ends (a nack, release or reclaim of a job asked to cancel).
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, error_detail, tags, ended_token, ended_as, snoozes)
SELECT id, queue, kind, :state, payload, :result,
       CASE WHEN :state = 'completed' THEN NULL ELSE COALESCE(:error, last_error) END,
       priority, attempts, max_attempts, CONVERT(unique_key USING utf8mb4), worker_id,
       created_at, started_at, UTC_TIMESTAMP(6), lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at,
       UTC_TIMESTAMP(6), headers,
       CASE WHEN :state = 'completed' THEN NULL WHEN :error IS NULL THEN error_detail ELSE :detail END, tags,
       CASE WHEN :ended IS NULL THEN ended_token ELSE lease_token END, COALESCE(:ended, ended_as), snoozes
FROM {prefix}jobs WHERE id = :id;

-- name: to_dead
-- bury (:failed false) or a failure with attempts used up (:failed true); :priority NULL
-- keeps the job's priority (sort_priority follows it). :ended records how the holder's
-- lease ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'dead', lease_until = NULL, last_error = COALESCE(:error, last_error),
    error_detail = CASE WHEN :error IS NULL THEN error_detail ELSE :detail END,
    priority = COALESCE(:priority, priority), buries = buries + 1,
    failed_at = CASE WHEN :failed THEN UTC_TIMESTAMP(6) ELSE failed_at END,
    updated_at = UTC_TIMESTAMP(6),
    ended_token = lease_token, ended_as = :ended
WHERE id = :id;

-- name: reschedule
-- :give_back is 1 for a release (the attempt comes back; counted as a release) and 0 for
-- a failure (counted by failed_at); :priority NULL keeps the job's priority. :ended
-- records how the holder's lease ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - :give_back,
    releases = releases + :give_back, priority = COALESCE(:priority, priority),
    available_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND),
    last_error = COALESCE(:error, last_error),
    error_detail = CASE WHEN :error IS NULL THEN error_detail ELSE :detail END,
    failed_at = CASE WHEN :give_back = 0 THEN UTC_TIMESTAMP(6) ELSE failed_at END,
    updated_at = UTC_TIMESTAMP(6),
    ended_token = lease_token, ended_as = :ended
WHERE id = :id;

-- name: lock_snoozed
-- snooze: the job held under :token, locked (as lock_held), with what decides its fate:
-- its queue, its snoozes, whether a cancel was requested, and its queue's max_snoozes (a
-- subquery, which a locking read does not lock).
SELECT queue, snoozes, cancel_requested,
       (SELECT max_snoozes FROM {prefix}queues WHERE name = j.queue)
FROM {prefix}jobs AS j
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: snooze_job
-- RetryAfter: back after :delay µs with the attempt given back, snoozes + 1; not a release
-- (releases), not a failure (failed_at), and the last error stays. :ended records the
-- lease it ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - 1, snoozes = snoozes + 1,
    available_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND),
    updated_at = UTC_TIMESTAMP(6), ended_token = lease_token, ended_as = :ended
WHERE id = :id;

-- name: extend_pause
-- RetryAfter(scope="queue"): the queue paused until :delay µs from now, only ever later: a
-- later end stays, and an indefinite pause (paused = 1) stays indefinite. The new end is
-- written out twice rather than read with VALUES(), which MySQL 8.0.20+ deprecates and
-- MariaDB's alias syntax lacks; UTC_TIMESTAMP is one value throughout a statement.
INSERT INTO {prefix}queues (name, paused, paused_until, updated_at)
VALUES (:queue, 0, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    paused_until = CASE WHEN paused = 1
                          OR paused_until >= DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)
                        THEN paused_until
                        ELSE DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND) END,
    updated_at = UTC_TIMESTAMP(6);

-- name: queue_rows
-- stats: every queue with a settings row, whether it is paused now (either kind), and the
-- end of a timed pause in force.
SELECT name, paused = 1 OR COALESCE(paused_until > UTC_TIMESTAMP(6), 0),
       CASE WHEN paused = 0 AND paused_until > UTC_TIMESTAMP(6) THEN paused_until END
FROM {prefix}queues;

-- name: note_failure
-- Before a failed or timed-out job that was asked to cancel goes to history: the failure
-- (and, :timeout 1, the timeout) recorded on the row that archive copies.
UPDATE {prefix}jobs SET failed_at = UTC_TIMESTAMP(6), timeouts = timeouts + :timeout
WHERE id = :id;

-- name: kick
UPDATE {prefix}jobs
SET state = 'available', attempts = 0, snoozes = 0, available_at = UTC_TIMESTAMP(6),
    kicks = kicks + 1, updated_at = UTC_TIMESTAMP(6)
WHERE queue = :queue AND state = 'dead'
ORDER BY sort_priority, id LIMIT :limit;

-- name: retry_job
-- A dead job comes back with fresh attempts and snoozes (a kick); a scheduled one is only
-- made due. MySQL applies SET assignments left to right, so attempts, snoozes and kicks
-- are set before state changes.
UPDATE {prefix}jobs
SET attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END,
    snoozes = CASE WHEN state = 'dead' THEN 0 ELSE snoozes END,
    kicks = kicks + CASE WHEN state = 'dead' THEN 1 ELSE 0 END, state = 'available',
    available_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6)
WHERE id = :id
  AND (state = 'dead' OR (state = 'available' AND available_at > UTC_TIMESTAMP(6)));

-- name: lock_idle
-- discard: the job, with its last error for the history row (discard_record).
SELECT id, last_error, error_detail FROM {prefix}jobs WHERE id = :id AND state IN ('available', 'dead') FOR UPDATE;

-- name: lock_live
SELECT state FROM {prefix}jobs WHERE id = :id FOR UPDATE;

-- name: request_cancel
UPDATE {prefix}jobs SET cancel_requested = 1 WHERE id = :id;

-- name: state_of
SELECT CASE WHEN state = 'available' AND available_at > UTC_TIMESTAMP(6) THEN 'scheduled'
            ELSE state END
FROM {prefix}jobs WHERE id = :id
UNION ALL
SELECT state FROM {prefix}history WHERE id = :id;

-- name: _live_row
-- The columns of a live job as SqlOps.info reads them (the history row's differ only
-- where a live job has no value yet: finished_at, result).
id, queue, kind, state, payload, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), available_at, lease_until, worker_id, created_at,
       started_at, NULL, NULL, last_error, cancel_requested, UTC_TIMESTAMP(6),
       reserves, timeouts, releases, buries, kicks, failed_at,
       COALESCE(updated_at, created_at), lease, headers,
       error_detail, tags, snoozes;

-- name: _history_row
-- _live_row's columns as history keeps them.
id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL, NULL, worker_id, created_at, started_at, finished_at, result, error, 0,
       UTC_TIMESTAMP(6),
       reserves, timeouts, releases, buries, kicks, failed_at,
       COALESCE(updated_at, finished_at), lease, headers,
       error_detail, tags, snoozes;

-- name: live_counts
-- Per queue and stored state: the count, how many of them are not yet due (available but
-- scheduled later), and how long the oldest due one has waited in seconds. Grouping by the
-- stored columns, not by a computed bucket, streams the claim index (queue, state, ...)
-- without a temporary table: 2x faster at 1M jobs.
SELECT queue, state, COUNT(*), SUM(available_at > UTC_TIMESTAMP(6)),
       TIMESTAMPDIFF(MICROSECOND,
                     MIN(CASE WHEN available_at <= UTC_TIMESTAMP(6) THEN available_at END),
                     UTC_TIMESTAMP(6)) / 1e6
FROM {prefix}jobs GROUP BY queue, state;

-- name: history_counts
SELECT queue, state, COUNT(*) FROM {prefix}history GROUP BY queue, state;

-- name: expired_leases
SELECT id, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE state = 'running' AND lease_until <= UTC_TIMESTAMP(6)
ORDER BY lease_until LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: reclaim_to_available
-- An expired lease ends here: recorded as such, so no earlier lease's nack, release or
-- bury counts as a repeat any more (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, available_at = UTC_TIMESTAMP(6),
    last_error = 'lease expired', error_detail = NULL, timeouts = timeouts + 1, failed_at = UTC_TIMESTAMP(6),
    updated_at = UTC_TIMESTAMP(6),
    ended_token = lease_token, ended_as = 'expired'
WHERE id IN :ids AND state = 'running' AND lease_until <= UTC_TIMESTAMP(6);

-- name: reclaim_to_dead
UPDATE {prefix}jobs
SET state = 'dead', lease_until = NULL, last_error = :error, error_detail = NULL, timeouts = timeouts + 1,
    buries = buries + 1, failed_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6),
    ended_token = lease_token, ended_as = 'expired'
WHERE id IN :ids AND state = 'running' AND lease_until <= UTC_TIMESTAMP(6);

-- name: retention_queues
-- reclaim: the queues whose dead jobs expire, by a plain read (usually none, and then
-- nothing more is read).
SELECT name, dead_retention FROM {prefix}queues WHERE dead_retention IS NOT NULL;

-- name: expired_dead
-- One retention queue's dead jobs that went dead (or were made) more than :retention
-- microseconds ago (several queues: one UNION ALL, a branch each), locked, along the
-- queue's dead range of the claim index. A join with the queues table would lock its
-- rows, and as one statement over all queues MariaDB reads every dead job by the lease
-- index. No ORDER BY: under FOR UPDATE a filesort would lock every dead job it sorts.
SELECT id FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'dead'
  AND COALESCE(updated_at, created_at)
      < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL :retention MICROSECOND)
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: archive_dead
-- expired_dead's jobs (locked) → discarded, their last error kept.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, error_detail, tags, ended_token, ended_as, snoozes)
SELECT id, queue, kind, 'discarded', payload, NULL, last_error, priority, attempts,
       max_attempts, CONVERT(unique_key USING utf8mb4), worker_id, created_at, started_at,
       UTC_TIMESTAMP(6), lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at, UTC_TIMESTAMP(6), headers,
       error_detail, tags, ended_token, ended_as, snoozes
FROM {prefix}jobs FORCE INDEX (PRIMARY) WHERE id IN :ids AND state = 'dead';

-- name: delete_dead
DELETE FROM {prefix}jobs WHERE id IN :ids AND state = 'dead';

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

-- name: record_version
INSERT INTO {prefix}migrations (version, name, applied_at)
VALUES (:version, :name, UTC_TIMESTAMP(6));

-- name: set_paused
-- pause (:paused 1, no end), pause until a time (:paused 0 and :until, a time, or :seconds
-- µs from now: the pause ends by itself then), or resume (neither): each replaces
-- whatever pause was in force.
INSERT INTO {prefix}queues (name, paused, paused_until, updated_at)
VALUES (:queue, :paused,
        COALESCE(:until, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :seconds MICROSECOND)),
        UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE paused = :paused,
    paused_until = COALESCE(:until, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :seconds MICROSECOND)),
    updated_at = UTC_TIMESTAMP(6);

-- name: paused_queues
SELECT name FROM {prefix}queues
WHERE paused = 1 OR paused_until > UTC_TIMESTAMP(6)
ORDER BY name;

-- name: list_live
-- PyMySQL and aiomysql bind parameters on the client, so the server plans with the values:
-- the test of a NULL filter folds away, and given a queue and a unique key the unique index
-- finds the job. kind is VARCHAR, where 'a' = 'a ' (PAD SPACE): equal lengths make the
-- comparison exact (unique_key is VARBINARY here, exact already).
SELECT {_live_row}
FROM {prefix}jobs
WHERE id > :after AND (:queue IS NULL OR queue = :queue)
  AND (:unique_key IS NULL OR unique_key = :unique_key)
  AND (:kind IS NULL OR (kind = :kind AND LENGTH(kind) = LENGTH(:kind)))
  AND (:tag IS NULL OR LOCATE(CONCAT('"', :tag, '"'), tags) > 0)
  AND (:state IS NULL OR :state =
       CASE WHEN state = 'available' AND available_at > UTC_TIMESTAMP(6) THEN 'scheduled'
            ELSE state END)
ORDER BY id LIMIT :limit;

-- name: list_history
-- As list_live; here unique_key is VARCHAR too, so its comparison checks lengths as well,
-- and history_unique serves a lookup by queue and unique key.
SELECT {_history_row}
FROM {prefix}history
WHERE id > :after AND (:queue IS NULL OR queue = :queue)
  AND (:unique_key IS NULL
       OR (unique_key = :unique_key AND LENGTH(unique_key) = LENGTH(:unique_key)))
  AND (:kind IS NULL OR (kind = :kind AND LENGTH(kind) = LENGTH(:kind)))
  AND (:tag IS NULL OR LOCATE(CONCAT('"', :tag, '"'), tags) > 0)
  AND (:state IS NULL OR state = :state)
ORDER BY id LIMIT :limit;

-- name: archive_held_many
-- ack_many: history rows for the jobs still held under the presented tokens. FOR UPDATE
-- makes this a locking read (under READ COMMITTED an INSERT ... SELECT would otherwise read
-- a snapshot and lock nothing), so the rows cannot change before delete_held_many. FORCE
-- INDEX: a scan of the lease index would wait on other transactions' running rows.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, tags, snoozes)
SELECT id, queue, kind, 'completed', payload, NULL, NULL, priority, attempts, max_attempts,
       CONVERT(unique_key USING utf8mb4), worker_id, created_at, started_at,
       UTC_TIMESTAMP(6), lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at, UTC_TIMESTAMP(6), headers, tags, snoozes
FROM {prefix}jobs FORCE INDEX (PRIMARY)
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running'
FOR UPDATE;

-- name: archive_held
-- archive_held_many for one job that has a result.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, tags, snoozes)
SELECT id, queue, kind, 'completed', payload, :result, NULL, priority, attempts,
       max_attempts, CONVERT(unique_key USING utf8mb4), worker_id, created_at, started_at,
       UTC_TIMESTAMP(6), lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at, UTC_TIMESTAMP(6), headers, tags, snoozes
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

-- name: leases_held
-- renew_many, first: the rows still held under the presented tokens, locked, with what
-- ops.touch_verdict needs (this lease's touches, the seconds since it began and since its
-- last extension, the queue's touch limits and max_lease, by subqueries: a join would
-- lock the settings row) and the database's clock, from which renew_held_many's :until
-- is computed, so no re-read is needed. Times as numbers (lease_until and the clock in
-- microseconds since the epoch, MysqlDialect.dt): the driver decodes each DATETIME value
-- in Python, at several microseconds apiece, and such decodes were most of this read's time.
SELECT id, lease_token, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', lease_until),
       cancel_requested, touches,
       TIMESTAMPDIFF(MICROSECOND, leased_at, UTC_TIMESTAMP(6)) / 1e6,
       TIMESTAMPDIFF(MICROSECOND, COALESCE(touched_at, leased_at), UTC_TIMESTAMP(6)) / 1e6,
       (SELECT max_touches FROM {prefix}queues WHERE name = j.queue),
       (SELECT max_touch_duration FROM {prefix}queues WHERE name = j.queue),
       (SELECT min_touch_interval FROM {prefix}queues WHERE name = j.queue),
       (SELECT max_lease FROM {prefix}queues WHERE name = j.queue),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))
FROM {prefix}jobs AS j FORCE INDEX (PRIMARY)
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running'
FOR UPDATE;

-- name: renew_held_many
-- The jobs leases_held locked and touch_verdict let extend by the same amount: :until is
-- leases_held's clock (:now) plus that amount, added as the database would add it.
UPDATE {prefix}jobs FORCE INDEX (PRIMARY)
SET lease_until = :until, touches = touches + 1, touched_at = :now
WHERE id IN :ids AND (id, lease_token) IN :pairs AND state = 'running';

-- name: drop_tables
DROP TABLE IF EXISTS {prefix}history, {prefix}jobs, {prefix}queues, {prefix}migrations,
    {prefix}flows, {prefix}flow_parts, {prefix}server, {prefix}queue_names;

-- name: completed_tokens
-- Jobs already completed, with the token that completed them: a retried ack whose first
-- attempt committed finds its own token here and is a success, not a LeaseLost.
SELECT id, lease_token FROM {prefix}history WHERE id IN :ids AND state = 'completed';

-- name: ended_leases
-- The last ended lease of each job, live or in history (_core/ended.py): a nack, release
-- or bury whose lease no longer holds the job reads it to tell a repeat of the call that
-- ended that lease (its first reply lost) from a stale call. Completed jobs are left
-- out: their last lease is the one that acked them, and an ack repeats by
-- completed_tokens.
SELECT id, ended_token, ended_as FROM {prefix}jobs WHERE id IN :ids
UNION ALL
SELECT id, ended_token, ended_as FROM {prefix}history
WHERE id IN :ids AND state <> 'completed';

-- Enqueue limits, queue settings, peek, server version (issue 11) ------------------------

-- name: lock_queue_cap
-- enqueue into a queue with max_jobs: the settings row stays locked until commit, so the
-- enqueuers of one capped queue count its jobs one after another.
SELECT max_jobs FROM {prefix}queues WHERE name = :queue FOR UPDATE;

-- name: live_count
-- The queue's live jobs (every state), a range of the claim index, which leads with queue
-- and covers the query; the count stops at :cap rows, as only whether it exceeds max_jobs
-- matters.
SELECT COUNT(*) FROM (SELECT 1 FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
                      WHERE queue = :queue LIMIT :cap) AS live;

-- name: delete_new_jobs
-- Takes back rows this transaction inserted (a batch over max_jobs, a unique_for twin).
DELETE FROM {prefix}jobs WHERE id IN :ids;

-- name: recent_twin
-- The newest job of the same key that finished less than :unique_for microseconds ago. Run
-- after this transaction's own insert of the key succeeded: a twin that was live then had
-- committed its move to history. A locking read, so a caller's REPEATABLE READ snapshot
-- cannot hide it. history.unique_key is VARCHAR, where 'k' = 'k ' (PAD SPACE): equal
-- lengths make the comparison exact.
SELECT id FROM {prefix}history
WHERE queue = :queue AND unique_key = :unique_key
  AND LENGTH(unique_key) = LENGTH(:unique_key)
  AND finished_at > DATE_SUB(UTC_TIMESTAMP(6), INTERVAL :unique_for MICROSECOND)
ORDER BY finished_at DESC, id DESC
LIMIT 1
LOCK IN SHARE MODE;

-- name: peek_available
-- Due jobs in claim order, along the claim index; the 28 columns of get_live. The peeks
-- force the claim index, which leads with (queue, state): left to itself the optimizer
-- took the unique index (every state of the queue) or the lease index (every queue's dead
-- jobs).
SELECT {_live_row}
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY sort_priority, available_at, id
LIMIT :limit;

-- name: priority_counts
-- Due jobs per priority, highest first: the queue's due range of the claim index.
SELECT priority, COUNT(*) FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at <= UTC_TIMESTAMP(6)
GROUP BY sort_priority, priority
ORDER BY sort_priority;

-- name: peek_scheduled
-- Jobs not yet due, soonest first: the queue's available range of the claim index, sorted.
SELECT {_live_row}
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND available_at > UTC_TIMESTAMP(6)
ORDER BY available_at, id
LIMIT :limit;

-- name: peek_dead
-- Dead jobs in the order kick takes them (priority desc, then oldest first): the
-- queue's dead range of the claim index, sorted.
SELECT {_live_row}
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'dead'
ORDER BY sort_priority, id
LIMIT :limit;

-- name: configure_queue
-- Upsert of the settings row: a new row takes the given values (NULL for the rest) and is
-- not paused; an existing row changes only the columns whose :set_<name> is true.
-- queue_config reads the result back (no RETURNING in MySQL).
INSERT INTO {prefix}queues (name, paused, updated_at, max_attempts, base_backoff,
                            max_backoff, jitter, default_lease, max_lease, max_jobs,
                            max_touches, max_touch_duration, min_touch_interval,
                            dead_retention, concurrency_limit, rate_per_sec, rate_burst,
                            max_snoozes)
VALUES (:queue, 0, UTC_TIMESTAMP(6), :max_attempts, :base_backoff, :max_backoff, :jitter,
        :default_lease, :max_lease, :max_jobs, :max_touches, :max_touch_duration,
        :min_touch_interval, :dead_retention, :concurrency_limit, :rate_per_sec, :rate_burst,
        :max_snoozes)
ON DUPLICATE KEY UPDATE
    max_attempts = IF(:set_max_attempts, :max_attempts, max_attempts),
    base_backoff = IF(:set_base_backoff, :base_backoff, base_backoff),
    max_backoff = IF(:set_max_backoff, :max_backoff, max_backoff),
    jitter = IF(:set_jitter, :jitter, jitter),
    default_lease = IF(:set_default_lease, :default_lease, default_lease),
    max_lease = IF(:set_max_lease, :max_lease, max_lease),
    max_jobs = IF(:set_max_jobs, :max_jobs, max_jobs),
    max_touches = IF(:set_max_touches, :max_touches, max_touches),
    max_touch_duration = IF(:set_max_touch_duration, :max_touch_duration,
                            max_touch_duration),
    min_touch_interval = IF(:set_min_touch_interval, :min_touch_interval,
                            min_touch_interval),
    dead_retention = IF(:set_dead_retention, :dead_retention, dead_retention),
    concurrency_limit = IF(:set_concurrency_limit, :concurrency_limit, concurrency_limit),
    rate_per_sec = IF(:set_rate_per_sec, :rate_per_sec, rate_per_sec),
    rate_burst = IF(:set_rate_burst, :rate_burst, rate_burst),
    max_snoozes = IF(:set_max_snoozes, :max_snoozes, max_snoozes),
    updated_at = UTC_TIMESTAMP(6);

-- name: queue_config
SELECT name, max_attempts, base_backoff, max_backoff, jitter, default_lease, max_lease,
       max_jobs, max_touches, max_touch_duration, min_touch_interval, dead_retention,
       concurrency_limit, rate_per_sec, rate_burst, max_snoozes
FROM {prefix}queues WHERE name = :queue;

-- name: server_version
SELECT VERSION();

-- name: oldest_transaction_age
-- The ServerStats gauge: seconds since the oldest open InnoDB transaction began, server-wide
-- (the purge is server-wide too). Needs the PROCESS privilege; trx_started has whole
-- seconds, and InnoDB refreshes the table only after 0.1 s without a read of it (a reader
-- polling faster sees it as it was). trx_started is in the server's system time zone
-- (InnoDB formats it with the operating system's local time, MySQL 8 and MariaDB alike)
-- while NOW() is in the session's: compared in UTC, so a time_zone setting other than
-- SYSTEM no longer adds its offset to the age.
SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, CONVERT_TZ(MIN(trx_started), 'SYSTEM', '+00:00'),
                              UTC_TIMESTAMP(6)) / 1e6, 0)
FROM information_schema.INNODB_TRX;

-- name: lock_limits
-- A claim of queues with limits: their settings rows, locked in name order (two claims
-- cannot deadlock) until the claim commits, so claimers of a limited queue count and
-- spend one after another; with each, the seconds since its bucket was last spent.
SELECT name, concurrency_limit, rate_per_sec, rate_burst, rate_tokens,
       TIMESTAMPDIFF(MICROSECOND, rate_at, UTC_TIMESTAMP(6)) / 1000000
FROM {prefix}queues
WHERE name IN :names AND paused = 0 AND NOT COALESCE(paused_until > UTC_TIMESTAMP(6), 0)
ORDER BY name
FOR UPDATE;

-- name: running_counts
-- Running jobs of the named queues: a range of the claim index, which leads with
-- (queue, state).
SELECT queue, COUNT(*) FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue IN :names AND state = 'running'
GROUP BY queue;

-- name: spend_tokens
-- :started jobs took a token each; the bucket is refilled up to this statement's clock
-- first. The statement runs under the row lock lock_limits took, so its clock only moves
-- forward from one holder to the next.
UPDATE {prefix}queues
SET rate_tokens = LEAST(COALESCE(rate_burst, 1),
                        COALESCE(rate_tokens + GREATEST(0, TIMESTAMPDIFF(MICROSECOND, rate_at,
                                     UTC_TIMESTAMP(6)) / 1000000) * rate_per_sec,
                                 COALESCE(rate_burst, 1))) - :started,
    rate_at = UTC_TIMESTAMP(6)
WHERE name = :queue;

-- name: next_due
-- One queue's share of next_due, after MysqlOps.due_row found its earliest available job
-- (first_due): whether it is paused, its limits, running jobs and token bucket, and the
-- seconds until a timed pause ends (<= 0 or NULL: none in force).
SELECT s.paused, s.concurrency_limit,
       CASE WHEN s.concurrency_limit IS NULL THEN 0
            ELSE (SELECT COUNT(*) FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
                  WHERE queue = :queue AND state = 'running') END,
       s.rate_per_sec, s.rate_burst, s.rate_tokens,
       TIMESTAMPDIFF(MICROSECOND, s.rate_at, UTC_TIMESTAMP(6)) / 1000000,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), s.paused_until) / 1000000
FROM (SELECT 1) AS one
LEFT JOIN {prefix}queues AS s ON s.name = :queue;

-- name: first_due
-- The first claim-index entry of a queue's available jobs after priority :after: the next
-- distinct priority and its earliest job, with the seconds until that job is due. One
-- index probe; MysqlOps.due_row walks the priorities with it (a skip scan). MariaDB ran
-- neither a loose index scan (MIN ... GROUP BY sort_priority) nor a recursive CTE of these
-- probes by the index: both read every scheduled job (65 ms at 100,000).
SELECT sort_priority,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), available_at) / 1000000
FROM {prefix}jobs FORCE INDEX ({prefix}jobs_claim)
WHERE queue = :queue AND state = 'available' AND sort_priority > :after
ORDER BY sort_priority, available_at
LIMIT 1;

-- ---------------------------------------------------------------------------------------
-- Chains and groups (docs/workflows.md; plans in _sql/ops.py, "flows").

-- name: insert_flow
INSERT INTO {prefix}flows (id, kind, size, remaining, step, job_id, callback, created_at)
VALUES (:id, :kind, :size, :size, 0, :job_id, :callback, UTC_TIMESTAMP(6));

-- name: lock_flow
-- Serialises the completions of one flow's jobs: a group's members take it in turn, so
-- the one that brings remaining to 0 is the last and sees every other member's result.
SELECT remaining, size, callback FROM {prefix}flows WHERE id = :id
FOR UPDATE;

-- name: flow_results
SELECT idx, result FROM {prefix}flow_parts WHERE flow_id = :flow_id ORDER BY idx
-- A locking read: under REPEATABLE READ a plain read could miss a member that committed
-- after this transaction's snapshot; the lock on the flow row (lock_flow) has waited for
-- every earlier member to commit, and a locking read sees what they wrote.
FOR UPDATE;

-- name: prune_flow_parts
-- prune: the parts of flows whose every step or member completed, made more than :age
-- ago (then prune_flows). A running flow is never pruned, however old.
DELETE FROM {prefix}flow_parts
WHERE flow_id IN (SELECT id FROM {prefix}flows WHERE remaining = 0 AND created_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL :age MICROSECOND));

-- name: prune_flows
DELETE FROM {prefix}flows WHERE remaining = 0 AND created_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL :age MICROSECOND);

-- name: routine_comment
-- The fingerprint comment of the installed enqueue procedure (install_routine).
SELECT ROUTINE_COMMENT FROM information_schema.ROUTINES
WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = :name AND ROUTINE_TYPE = 'PROCEDURE';

-- name: drop_routine
DROP PROCEDURE IF EXISTS {prefix}enqueue;

-- name: drop_routine_with
DROP PROCEDURE IF EXISTS {prefix}enqueue_with;
-- name: insert_global_job
-- insert_unique_job for unique_scope="global": the key also goes into global_key, whose
-- index (one of every queue) or the (queue, unique_key) one may refuse the row.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          global_key, lease_token, available_at, created_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :unique_key, :tag,
        COALESCE(:run_at, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL :delay MICROSECOND)),
        UTC_TIMESTAMP(6), :lease, :headers, :tags);

-- name: find_global
-- The live job that holds a global key: one enqueued with unique_scope="global" in any
-- queue, else (the insert was refused by the per-queue index) one of this queue. Locking
-- reads, as find_unique.
(SELECT id, 0 AS o FROM {prefix}jobs WHERE global_key = :unique_key LOCK IN SHARE MODE)
UNION ALL
(SELECT id, 1 FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key
 LOCK IN SHARE MODE)
ORDER BY o LIMIT 1;

-- name: recent_global_twin
-- recent_twin in every queue: along the finished_at index, over the unique_for window
-- only; equal lengths make the PAD SPACE comparison exact.
SELECT id FROM {prefix}history
WHERE finished_at > DATE_SUB(UTC_TIMESTAMP(6), INTERVAL :unique_for MICROSECOND)
  AND unique_key = :unique_key AND LENGTH(unique_key) = LENGTH(:unique_key)
ORDER BY finished_at DESC, id DESC
LIMIT 1
LOCK IN SHARE MODE;

-- name: lock_server
-- An enqueue into a queue not counted yet while max_queues is set: the server row stays
-- locked until commit, so such enqueuers count the queues one after another.
SELECT max_queues FROM {prefix}server WHERE id = 1 FOR UPDATE;

-- name: add_queue_name
INSERT IGNORE INTO {prefix}queue_names (name) VALUES (:queue);

-- name: set_max_queues
UPDATE {prefix}server SET max_queues = :max_queues, updated_at = UTC_TIMESTAMP(6) WHERE id = 1;

-- name: epoch_seen
-- Job ids (design §59): the server's identity, its @@server_id (NULL on a read-only
-- replica, which takes no writes to guard), beside the stored one.
SELECT IF(@@read_only, NULL, CAST(@@server_id AS CHAR)), e.identity, e.epoch
FROM (SELECT 1 AS one) AS one LEFT JOIN {prefix}epoch AS e ON e.id = 1;

-- name: epoch_lock
-- A named lock, not a row lock: the ALTER TABLE below commits implicitly.
SELECT GET_LOCK(:key, 10);

-- name: epoch_unlock
SELECT RELEASE_LOCK(:key);

-- name: epoch_record
INSERT INTO {prefix}epoch (id, identity, epoch) VALUES (1, :identity, :epoch)
ON DUPLICATE KEY UPDATE identity = VALUES(identity), epoch = VALUES(epoch),
                        updated_at = CURRENT_TIMESTAMP(6);

-- name: epoch_advance
-- The jobs' AUTO_INCREMENT up to :base, never down (MariaDB and MySQL 8 would lower it to
-- max(id) + 1, below ids the history holds): ALTER TABLE takes no bound value, so the
-- statement is prepared on the server from the bound number (epoch_advance_run).
SET @leaseq_epoch_alter = (
    SELECT CONCAT('ALTER TABLE `{prefix}jobs` AUTO_INCREMENT = ',
                  GREATEST(:base, COALESCE(MAX(AUTO_INCREMENT), 0)))
    FROM information_schema.TABLES
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{prefix}jobs');

-- name: epoch_advance_prepare
PREPARE leaseq_epoch_alter FROM @leaseq_epoch_alter;

-- name: epoch_advance_run
EXECUTE leaseq_epoch_alter;

-- name: epoch_advance_done
DEALLOCATE PREPARE leaseq_epoch_alter;
