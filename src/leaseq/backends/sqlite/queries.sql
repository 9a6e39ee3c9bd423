-- SQLite queries. Times are REAL unix seconds in UTC; "now" is the host clock read by SQLite
-- itself: (julianday('now') - 2440587.5) * 86400.0. Every write runs inside BEGIN IMMEDIATE,
-- so SQLite serialises writers and no row locks are needed.

-- name: insert_job
-- For jobs without a lease or headers of their own; insert_full_job stores those.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, created_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at, (julianday('now') - 2440587.5) * 86400.0 + :delay),
        (julianday('now') - 2440587.5) * 86400.0);

-- name: insert_full_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, created_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at, (julianday('now') - 2440587.5) * 86400.0 + :delay),
        (julianday('now') - 2440587.5) * 86400.0, :lease, :headers, :tags);

-- name: insert_unique_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, created_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at, (julianday('now') - 2440587.5) * 86400.0 + :delay),
        (julianday('now') - 2440587.5) * 86400.0, :lease, :headers, :tags)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: find_unique
SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key;

-- name: claim_candidates
-- One queue's share of a claim (several queues: one UNION ALL of these, one branch each):
-- the job columns (lease_until and worker_id are about to be overwritten, so NULL) and the
-- clock, from which claim_ids sets the lease. A paused queue yields nothing (paused, or
-- paused_until still to come: a timed pause ends by itself). Last come what
-- ops.lease_for needs: the job's own lease and its queue's default_lease and max_lease
-- (subqueries that do not depend on the row, so they run once per branch); then the
-- job's headers.
-- Flow control: :take is how many jobs the branch may return. :gate 1 leaves out a queue
-- whose settings set a concurrency_limit or a rate_per_sec: those are claimed only with
-- :gate 0 and a :take SqlOps.claim worked out from their limits (lock_limits), so a client
-- that does not know of a limit yet claims nothing from the queue.
SELECT id, queue, kind, payload, priority, attempts, max_attempts, unique_key,
       lease_token, NULL, NULL, created_at, available_at,
       (julianday('now') - 2440587.5) * 86400.0, lease,
       (SELECT default_lease FROM {prefix}queues WHERE name = :queue),
       (SELECT max_lease FROM {prefix}queues WHERE name = :queue), headers,
       reserves, releases, timeouts, tags, snoozes
FROM {prefix}jobs INDEXED BY {prefix}jobs_claim
WHERE queue = :queue AND state = 'available'
  AND available_at <= (julianday('now') - 2440587.5) * 86400.0
  AND NOT EXISTS (SELECT 1 FROM {prefix}queues WHERE name = :queue
                  AND (paused = 1 OR paused_until > (julianday('now') - 2440587.5) * 86400.0
                       OR (:gate = 1 AND (concurrency_limit IS NOT NULL
                                          OR rate_per_sec IS NOT NULL))))
ORDER BY priority DESC, available_at, id
LIMIT :take;

-- name: claim_ids
-- :until is :now (read by claim_candidates) plus the lease, added in Python as SQLite would
-- add them, so the claim returns the lease it stores without RETURNING. Run once per
-- distinct lease.
UPDATE {prefix}jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    worker_id = :worker_id, lease_until = :until, started_at = COALESCE(started_at, :now),
    touches = 0, leased_at = :now, touched_at = NULL, reserves = reserves + 1,
    updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'available';

-- name: jobs_by_ids
-- The claim's fallback, should claim_ids ever update other rows than it read.
SELECT id, queue, kind, payload, priority, attempts, max_attempts, unique_key,
       lease_token, lease_until, worker_id, created_at, available_at, headers, reserves,
       releases, timeouts, tags, snoozes
FROM {prefix}jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND worker_id = :worker_id AND lease_until = :until;

-- name: lock_held
SELECT attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running';

-- name: lock_held_many
-- fail_many: the rows still held under the presented tokens (:pairs is a JSON array of
-- [id, lease_token]).
SELECT id, lease_token, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (id, lease_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:pairs))
  AND state = 'running';

-- name: archive
-- The history row keeps the counters; its updated_at is the finish. It keeps the
-- job's last ended lease (ended_token, ended_as), or, with :ended, records the lease this
-- archive ends (a nack, release or reclaim of a job asked to cancel). 'now' is the same
-- value throughout one statement.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, error_detail, tags, ended_token, ended_as, snoozes)
SELECT id, queue, kind, :state, payload, :result,
       CASE WHEN :state = 'completed' THEN NULL ELSE COALESCE(:error, last_error) END,
       priority, attempts, max_attempts, unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at,
       (julianday('now') - 2440587.5) * 86400.0, headers,
       CASE WHEN :state = 'completed' THEN NULL WHEN :error IS NULL THEN error_detail ELSE :detail END, tags,
       CASE WHEN :ended IS NULL THEN ended_token ELSE lease_token END, COALESCE(:ended, ended_as), snoozes
FROM {prefix}jobs WHERE id = :id;

-- name: to_dead
-- bury (:failed false) or a failure with attempts used up (:failed true); :priority NULL
-- keeps the job's priority. :ended records how the holder's lease ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'dead', lease_until = NULL, last_error = COALESCE(:error, last_error),
    error_detail = CASE WHEN :error IS NULL THEN error_detail ELSE :detail END,
    priority = COALESCE(:priority, priority), buries = buries + 1,
    failed_at = CASE WHEN :failed THEN (julianday('now') - 2440587.5) * 86400.0
                     ELSE failed_at END,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    ended_token = lease_token, ended_as = :ended
WHERE id = :id;

-- name: reschedule
-- :give_back is 1 for a release (the attempt comes back; counted as a release) and 0 for
-- a failure (counted by failed_at); :priority NULL keeps the job's priority. :ended
-- records how the holder's lease ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - :give_back,
    releases = releases + :give_back, priority = COALESCE(:priority, priority),
    available_at = (julianday('now') - 2440587.5) * 86400.0 + :delay,
    last_error = COALESCE(:error, last_error),
    error_detail = CASE WHEN :error IS NULL THEN error_detail ELSE :detail END,
    failed_at = CASE WHEN :give_back = 0 THEN (julianday('now') - 2440587.5) * 86400.0
                     ELSE failed_at END,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    ended_token = lease_token, ended_as = :ended
WHERE id = :id;

-- name: lock_snoozed
-- snooze: the job held under :token (as lock_held) with what decides its fate: its queue,
-- its snoozes, whether a cancel was requested, and its queue's max_snoozes.
SELECT queue, snoozes, cancel_requested,
       (SELECT max_snoozes FROM {prefix}queues WHERE name = {prefix}jobs.queue)
FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running';

-- name: snooze_job
-- RetryAfter: back after :delay with the attempt given back, snoozes + 1; not a release
-- (releases), not a failure (failed_at), and the last error stays. :ended records the
-- lease it ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - 1, snoozes = snoozes + 1,
    available_at = (julianday('now') - 2440587.5) * 86400.0 + :delay,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    ended_token = lease_token, ended_as = :ended
WHERE id = :id;

-- name: extend_pause
-- RetryAfter(scope="queue"): the queue paused until :delay from now, only ever later: a
-- later end stays, and an indefinite pause (paused = 1) stays indefinite.
INSERT INTO {prefix}queues (name, paused, paused_until) VALUES (:queue, 0, (julianday('now') - 2440587.5) * 86400.0 + :delay)
ON CONFLICT (name) DO UPDATE SET
    paused_until = CASE WHEN paused = 1 OR paused_until >= excluded.paused_until
                        THEN paused_until ELSE excluded.paused_until END,
    updated_at = (julianday('now') - 2440587.5) * 86400.0;

-- name: queue_rows
-- stats: every queue with a settings row, whether it is paused now (either kind), and the
-- end of a timed pause in force.
SELECT name, paused = 1 OR COALESCE(paused_until > (julianday('now') - 2440587.5) * 86400.0, 0),
       CASE WHEN paused = 0 AND paused_until > (julianday('now') - 2440587.5) * 86400.0 THEN paused_until END
FROM {prefix}queues;

-- name: note_failure
-- Before a failed or timed-out job that was asked to cancel goes to history: the failure
-- (and, :timeout 1, the timeout) recorded on the row that archive copies.
UPDATE {prefix}jobs
SET failed_at = (julianday('now') - 2440587.5) * 86400.0, timeouts = timeouts + :timeout
WHERE id = :id;

-- name: kick
UPDATE {prefix}jobs
SET state = 'available', attempts = 0, snoozes = 0, kicks = kicks + 1,
    available_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id IN (SELECT id FROM {prefix}jobs WHERE queue = :queue AND state = 'dead'
             ORDER BY priority DESC, id LIMIT :limit);

-- name: retry_job
-- A dead job comes back with fresh attempts and snoozes (a kick); a scheduled one is only
-- made due.
UPDATE {prefix}jobs
SET attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END,
    snoozes = CASE WHEN state = 'dead' THEN 0 ELSE snoozes END,
    kicks = kicks + CASE WHEN state = 'dead' THEN 1 ELSE 0 END, state = 'available',
    available_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = :id AND (state = 'dead' OR
      (state = 'available' AND available_at > (julianday('now') - 2440587.5) * 86400.0));

-- name: lock_idle
-- discard: the job, with its last error for the history row (discard_record).
SELECT id, last_error, error_detail FROM {prefix}jobs WHERE id = :id AND state IN ('available', 'dead');

-- name: lock_live
SELECT state FROM {prefix}jobs WHERE id = :id;

-- name: request_cancel
UPDATE {prefix}jobs SET cancel_requested = 1 WHERE id = :id;

-- name: state_of
SELECT CASE WHEN state = 'available'
             AND available_at > (julianday('now') - 2440587.5) * 86400.0
            THEN 'scheduled' ELSE state END
FROM {prefix}jobs WHERE id = :id
UNION ALL
SELECT state FROM {prefix}history WHERE id = :id;

-- name: _live_row
-- The columns of a live job as SqlOps.info reads them (the history row's differ only
-- where a live job has no value yet: finished_at, result).
id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       available_at, lease_until, worker_id, created_at, started_at, NULL, NULL,
       last_error, cancel_requested, (julianday('now') - 2440587.5) * 86400.0,
       reserves, timeouts, releases, buries, kicks, failed_at,
       COALESCE(updated_at, created_at), lease, headers,
       error_detail, tags, snoozes;

-- name: _history_row
-- _live_row's columns as history keeps them.
id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL, NULL, worker_id, created_at, started_at, finished_at, result, error, 0,
       (julianday('now') - 2440587.5) * 86400.0,
       reserves, timeouts, releases, buries, kicks, failed_at,
       COALESCE(updated_at, finished_at), lease, headers,
       error_detail, tags, snoozes;

-- name: live_counts
-- Per queue and stored state: the count, how many of them are not yet due (available but
-- scheduled later), and how long the oldest due one has waited in seconds.
SELECT queue, state, COUNT(*),
       SUM(available_at > (julianday('now') - 2440587.5) * 86400.0),
       (julianday('now') - 2440587.5) * 86400.0
         - MIN(CASE WHEN available_at <= (julianday('now') - 2440587.5) * 86400.0
                    THEN available_at END)
FROM {prefix}jobs GROUP BY queue, state;

-- name: history_counts
SELECT queue, state, COUNT(*) FROM {prefix}history GROUP BY queue, state;

-- name: expired_leases
SELECT id, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE state = 'running' AND lease_until <= (julianday('now') - 2440587.5) * 86400.0
ORDER BY lease_until LIMIT :limit;

-- name: reclaim_to_available
-- An expired lease ends here: recorded as such, so no earlier lease's nack, release or
-- bury counts as a repeat any more (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL,
    available_at = (julianday('now') - 2440587.5) * 86400.0,
    last_error = 'lease expired', error_detail = NULL, timeouts = timeouts + 1,
    failed_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    ended_token = lease_token, ended_as = 'expired'
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND lease_until <= (julianday('now') - 2440587.5) * 86400.0;

-- name: reclaim_to_dead
UPDATE {prefix}jobs
SET state = 'dead', lease_until = NULL, last_error = :error, error_detail = NULL, timeouts = timeouts + 1,
    buries = buries + 1, failed_at = (julianday('now') - 2440587.5) * 86400.0,
    updated_at = (julianday('now') - 2440587.5) * 86400.0,
    ended_token = lease_token, ended_as = 'expired'
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND lease_until <= (julianday('now') - 2440587.5) * 86400.0;

-- name: expired_dead
-- reclaim: dead jobs that went dead (or were made) longer than their queue's
-- dead_retention ago, oldest id first. Driven by the settings rows that set a retention
-- (CROSS JOIN keeps them the outer loop), each probing its queue's dead index, so without
-- any it reads only the queues table, and dead jobs of other queues are never read.
-- INDEXED BY: otherwise SQLite may build an automatic index, a scan of every job.
SELECT j.id
FROM {prefix}queues AS s
CROSS JOIN {prefix}jobs AS j INDEXED BY {prefix}jobs_dead
WHERE s.dead_retention IS NOT NULL AND j.queue = s.name AND j.state = 'dead'
  AND COALESCE(j.updated_at, j.created_at)
      < (julianday('now') - 2440587.5) * 86400.0 - s.dead_retention
ORDER BY j.id
LIMIT :limit;

-- name: archive_dead
-- expired_dead's jobs → discarded, their last error kept.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, error_detail, tags, ended_token, ended_as, snoozes)
SELECT id, queue, kind, 'discarded', payload, NULL, last_error, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at,
       (julianday('now') - 2440587.5) * 86400.0, headers,
       error_detail, tags, ended_token, ended_as, snoozes
FROM {prefix}jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'dead';

-- name: delete_dead
DELETE FROM {prefix}jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'dead';

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

-- name: record_version
INSERT INTO {prefix}migrations (version, name) VALUES (:version, :name);

-- name: set_paused
-- pause (:paused 1, no end), pause until a time (:paused 0 and :until, a time, or :seconds
-- from now: the pause ends by itself then), or resume (neither): each replaces whatever
-- pause was in force.
INSERT INTO {prefix}queues (name, paused, paused_until)
VALUES (:queue, :paused, COALESCE(:until, (julianday('now') - 2440587.5) * 86400.0 + :seconds))
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
    paused_until = excluded.paused_until, updated_at = (julianday('now') - 2440587.5) * 86400.0;

-- name: paused_queues
SELECT name FROM {prefix}queues
WHERE paused OR paused_until > (julianday('now') - 2440587.5) * 86400.0
ORDER BY name;

-- name: list_live
-- Two branches, exactly one of which the parameters switch on (SQLite tests a condition on
-- parameters alone once, before reading): given a queue and a unique key, the unique index
-- finds the job; otherwise the primary key is walked in id order. SQLite plans a statement
-- before its parameters are bound, so "(:unique_key IS NULL OR unique_key = ...)" alone
-- could never use the index. The branches merge in id order, so the walk stops at :limit.
SELECT {_live_row}
FROM {prefix}jobs
WHERE :queue IS NOT NULL AND :unique_key IS NOT NULL
  AND queue = :queue AND unique_key = :unique_key AND id > :after
  AND (:kind IS NULL OR kind = :kind)
  AND (:tag IS NULL OR instr(tags, '"' || :tag || '"') > 0)
  AND (:state IS NULL OR :state =
       CASE WHEN state = 'available'
             AND available_at > (julianday('now') - 2440587.5) * 86400.0
            THEN 'scheduled' ELSE state END)
UNION ALL
SELECT {_live_row}
FROM {prefix}jobs
WHERE (:queue IS NULL OR :unique_key IS NULL)
  AND id > :after AND (:queue IS NULL OR queue = :queue)
  AND (:unique_key IS NULL OR unique_key = :unique_key)
  AND (:kind IS NULL OR kind = :kind)
  AND (:tag IS NULL OR instr(tags, '"' || :tag || '"') > 0)
  AND (:state IS NULL OR :state =
       CASE WHEN state = 'available'
             AND available_at > (julianday('now') - 2440587.5) * 86400.0
            THEN 'scheduled' ELSE state END)
ORDER BY id LIMIT :limit;

-- name: list_history
-- As list_live: with a queue and a unique key, history_unique finds the rows.
SELECT {_history_row}
FROM {prefix}history
WHERE :queue IS NOT NULL AND :unique_key IS NOT NULL
  AND queue = :queue AND unique_key = :unique_key AND id > :after
  AND (:kind IS NULL OR kind = :kind) AND (:state IS NULL OR state = :state)
  AND (:tag IS NULL OR instr(tags, '"' || :tag || '"') > 0)
UNION ALL
SELECT {_history_row}
FROM {prefix}history
WHERE (:queue IS NULL OR :unique_key IS NULL)
  AND id > :after AND (:queue IS NULL OR queue = :queue)
  AND (:unique_key IS NULL OR unique_key = :unique_key)
  AND (:kind IS NULL OR kind = :kind) AND (:state IS NULL OR state = :state)
  AND (:tag IS NULL OR instr(tags, '"' || :tag || '"') > 0)
ORDER BY id LIMIT :limit;

-- name: archive_held_many
-- ack_many: history rows for the jobs still held under the presented tokens (:pairs is a
-- JSON array of [id, lease_token]).
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, tags, snoozes)
SELECT id, queue, kind, 'completed', payload, NULL, NULL, priority, attempts, max_attempts,
       unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at,
       (julianday('now') - 2440587.5) * 86400.0, headers, tags, snoozes
FROM {prefix}jobs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (id, lease_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:pairs))
  AND state = 'running';

-- name: archive_held
-- archive_held_many for one job that has a result.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, tags, snoozes)
SELECT id, queue, kind, 'completed', payload, :result, NULL, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at,
       (julianday('now') - 2440587.5) * 86400.0, lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at,
       (julianday('now') - 2440587.5) * 86400.0, headers, tags, snoozes
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
-- The jobs still held under the presented tokens (:pairs is a JSON array of [id,
-- lease_token]) whose queue's touch limits allow a touch now, as ops.touch_verdict judges
-- (a queue without a settings row: every job), extended by :extend capped at max_lease.
UPDATE {prefix}jobs
SET lease_until = (julianday('now') - 2440587.5) * 86400.0
                  + MIN(:extend, COALESCE((SELECT max_lease FROM {prefix}queues
                                           WHERE name = {prefix}jobs.queue), :extend)),
    touches = touches + 1, touched_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (id, lease_token) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:pairs))
  AND state = 'running'
  AND NOT EXISTS (
      SELECT 1 FROM {prefix}queues AS s
      WHERE s.name = {prefix}jobs.queue
        AND ({prefix}jobs.touches >= s.max_touches
             OR (julianday('now') - 2440587.5) * 86400.0 - {prefix}jobs.leased_at
                > s.max_touch_duration
             OR (julianday('now') - 2440587.5) * 86400.0
                - COALESCE({prefix}jobs.touched_at, {prefix}jobs.leased_at)
                < s.min_touch_interval))
RETURNING id, lease_token, lease_until, cancel_requested;

-- name: leases_held
-- After renew_held_many, only for the jobs it did not renew: whether each is still held,
-- and if so what ops.touch_verdict needs to say why not (this lease's touches, the seconds
-- since it began and since its last extension, the queue's touch limits and max_lease)
-- with the clock.
SELECT j.id, j.lease_token, j.lease_until, j.cancel_requested, j.touches,
       (julianday('now') - 2440587.5) * 86400.0 - j.leased_at,
       (julianday('now') - 2440587.5) * 86400.0 - COALESCE(j.touched_at, j.leased_at),
       s.max_touches, s.max_touch_duration, s.min_touch_interval, s.max_lease,
       (julianday('now') - 2440587.5) * 86400.0
FROM {prefix}jobs AS j LEFT JOIN {prefix}queues AS s ON s.name = j.queue
WHERE j.id IN (SELECT value FROM json_each(:ids))
  AND (j.id, j.lease_token) IN (SELECT json_extract(value, '$[0]'),
                                       json_extract(value, '$[1]')
                                FROM json_each(:pairs))
  AND j.state = 'running';

-- name: drop_history
DROP TABLE IF EXISTS {prefix}history;

-- name: drop_jobs
DROP TABLE IF EXISTS {prefix}jobs;

-- name: drop_queues
DROP TABLE IF EXISTS {prefix}queues;

-- name: drop_migrations
DROP TABLE IF EXISTS {prefix}migrations;

-- name: drop_flows
DROP TABLE IF EXISTS {prefix}flows;

-- name: drop_flow_parts
DROP TABLE IF EXISTS {prefix}flow_parts;

-- name: completed_tokens
-- Jobs already completed, with the token that completed them: a retried ack whose first
-- attempt committed finds its own token here and is a success, not a LeaseLost.
SELECT id, lease_token FROM {prefix}history WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'completed';

-- name: ended_leases
-- The last ended lease of each job, live or in history (_core/ended.py): a nack, release
-- or bury whose lease no longer holds the job reads it to tell a repeat of the call that
-- ended that lease (its first reply lost) from a stale call. Completed jobs are left
-- out: their last lease is the one that acked them, and an ack repeats by
-- completed_tokens.
SELECT id, ended_token, ended_as FROM {prefix}jobs WHERE id IN (SELECT value FROM json_each(:ids))
UNION ALL
SELECT id, ended_token, ended_as FROM {prefix}history
WHERE id IN (SELECT value FROM json_each(:ids)) AND state <> 'completed';

-- Enqueue limits, queue settings, peek, server version (issue 11) ------------------------

-- name: lock_queue_cap
-- enqueue into a queue with max_jobs. BEGIN IMMEDIATE already serialises every writer, so
-- this only reads the limit.
SELECT max_jobs FROM {prefix}queues WHERE name = :queue;

-- name: live_count
-- The queue's live jobs: the available ones along the claim index and the dead ones along
-- the dead index, each in its index's order so the planner walks the index, not the
-- table; each stops at :cap rows, as only whether the total exceeds max_jobs matters. The
-- running ones along the lease index, which holds every queue's running jobs: bounded by
-- the workers' slots, and only capped enqueues pay it, where a (queue) index on running
-- jobs would cost every claim an index entry (about 5 % of a PostgreSQL drain).
SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM {prefix}jobs
                              WHERE queue = :queue AND state = 'available'
                              ORDER BY priority DESC, available_at, id LIMIT :cap))
     + (SELECT COUNT(*) FROM (SELECT 1 FROM {prefix}jobs
                              WHERE queue = :queue AND state = 'dead'
                              ORDER BY id LIMIT :cap))
     + (SELECT COUNT(*) FROM {prefix}jobs WHERE state = 'running' AND queue = :queue);

-- name: delete_new_jobs
-- Takes back rows this transaction inserted (a batch over max_jobs, a unique_for twin).
DELETE FROM {prefix}jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: recent_twin
-- The newest job of the same key that finished less than :unique_for seconds ago.
SELECT id FROM {prefix}history
WHERE queue = :queue AND unique_key = :unique_key
  AND finished_at > (julianday('now') - 2440587.5) * 86400.0 - :unique_for
ORDER BY finished_at DESC, id DESC
LIMIT 1;

-- name: peek_available
-- Due jobs in claim order, by the claim index; the 28 columns of get_live.
SELECT {_live_row}
FROM {prefix}jobs
WHERE queue = :queue AND state = 'available'
  AND available_at <= (julianday('now') - 2440587.5) * 86400.0
ORDER BY priority DESC, available_at, id
LIMIT :limit;

-- name: priority_counts
-- Due jobs per priority, highest first: the queue's due range of the claim index.
SELECT priority, COUNT(*) FROM {prefix}jobs INDEXED BY {prefix}jobs_claim
WHERE queue = :queue AND state = 'available'
  AND available_at <= (julianday('now') - 2440587.5) * 86400.0
GROUP BY priority
ORDER BY priority DESC;

-- name: peek_scheduled
-- Jobs not yet due, soonest first: the queue's range of the claim index, then a sort.
SELECT {_live_row}
FROM {prefix}jobs
WHERE queue = :queue AND state = 'available'
  AND available_at > (julianday('now') - 2440587.5) * 86400.0
ORDER BY available_at, id
LIMIT :limit;

-- name: peek_dead
-- Dead jobs in the order kick takes them (priority desc, then oldest first), along the
-- kick index (migration 0008).
SELECT {_live_row}
FROM {prefix}jobs
WHERE queue = :queue AND state = 'dead'
ORDER BY priority DESC, id
LIMIT :limit;

-- name: configure_queue
-- Upsert of the settings row: a new row takes the given values (NULL for the rest) and is
-- not paused; an existing row changes only the columns whose :set_<name> is true.
INSERT INTO {prefix}queues (name, paused, max_attempts, base_backoff, max_backoff, jitter,
                            default_lease, max_lease, max_jobs, max_touches,
                            max_touch_duration, min_touch_interval, dead_retention,
                                 concurrency_limit, rate_per_sec, rate_burst, max_snoozes)
VALUES (:queue, 0, :max_attempts, :base_backoff, :max_backoff, :jitter, :default_lease,
        :max_lease, :max_jobs, :max_touches, :max_touch_duration, :min_touch_interval,
        :dead_retention, :concurrency_limit, :rate_per_sec, :rate_burst, :max_snoozes)
ON CONFLICT (name) DO UPDATE SET
    max_attempts = CASE WHEN :set_max_attempts THEN excluded.max_attempts
                        ELSE max_attempts END,
    base_backoff = CASE WHEN :set_base_backoff THEN excluded.base_backoff
                        ELSE base_backoff END,
    max_backoff = CASE WHEN :set_max_backoff THEN excluded.max_backoff ELSE max_backoff END,
    jitter = CASE WHEN :set_jitter THEN excluded.jitter ELSE jitter END,
    default_lease = CASE WHEN :set_default_lease THEN excluded.default_lease
                         ELSE default_lease END,
    max_lease = CASE WHEN :set_max_lease THEN excluded.max_lease ELSE max_lease END,
    max_jobs = CASE WHEN :set_max_jobs THEN excluded.max_jobs ELSE max_jobs END,
    max_touches = CASE WHEN :set_max_touches THEN excluded.max_touches ELSE max_touches END,
    max_touch_duration = CASE WHEN :set_max_touch_duration THEN excluded.max_touch_duration
                              ELSE max_touch_duration END,
    min_touch_interval = CASE WHEN :set_min_touch_interval THEN excluded.min_touch_interval
                              ELSE min_touch_interval END,
    dead_retention = CASE WHEN :set_dead_retention THEN excluded.dead_retention
                          ELSE dead_retention END,
    concurrency_limit = CASE WHEN :set_concurrency_limit THEN excluded.concurrency_limit
                             ELSE concurrency_limit END,
    rate_per_sec = CASE WHEN :set_rate_per_sec THEN excluded.rate_per_sec
                        ELSE rate_per_sec END,
    rate_burst = CASE WHEN :set_rate_burst THEN excluded.rate_burst ELSE rate_burst END,
    max_snoozes = CASE WHEN :set_max_snoozes THEN excluded.max_snoozes ELSE max_snoozes END,
    updated_at = (julianday('now') - 2440587.5) * 86400.0
RETURNING name, max_attempts, base_backoff, max_backoff, jitter, default_lease, max_lease,
          max_jobs, max_touches, max_touch_duration, min_touch_interval, dead_retention,
          concurrency_limit, rate_per_sec, rate_burst, max_snoozes;

-- name: server_version
SELECT sqlite_version();

-- name: oldest_transaction_age
-- SQLite keeps no old row versions for a reader (a WAL reader pins frames, not rows): no
-- such gauge.
SELECT NULL;

-- name: lock_limits
-- A claim of queues with limits: their settings rows (BEGIN IMMEDIATE already serialises
-- every writer, so nothing to lock), each with the seconds since its bucket was last spent.
SELECT name, concurrency_limit, rate_per_sec, rate_burst, rate_tokens,
       (julianday('now') - 2440587.5) * 86400.0 - rate_at
FROM {prefix}queues
WHERE name IN (SELECT value FROM json_each(:names)) AND paused = 0
  AND NOT COALESCE(paused_until > (julianday('now') - 2440587.5) * 86400.0, 0)
ORDER BY name;

-- name: running_counts
-- Running jobs of the named queues, along the lease index (see live_count).
SELECT queue, COUNT(*) FROM {prefix}jobs
WHERE state = 'running' AND queue IN (SELECT value FROM json_each(:names))
GROUP BY queue;

-- name: spend_tokens
-- :started jobs took a token each; the bucket is refilled up to this statement's clock
-- first (writers are serialised, so the clock only moves forward between them).
UPDATE {prefix}queues
SET rate_tokens = min(COALESCE(rate_burst, 1),
                      COALESCE(rate_tokens + max(0, (julianday('now') - 2440587.5) * 86400.0
                                                    - rate_at) * rate_per_sec,
                               COALESCE(rate_burst, 1))) - :started,
    rate_at = (julianday('now') - 2440587.5) * 86400.0
WHERE name = :queue;

-- name: next_due
-- One queue's share of next_due: seconds until its earliest available job is due (<= 0:
-- one is due now; NULL: none), then its settings row, then the seconds until a timed pause
-- ends (<= 0 or NULL: none in force). The earliest is the least of each
-- priority's first entry in the claim index, reached by a skip scan over the priorities
-- (one index probe per distinct priority), not by reading every scheduled job.
WITH RECURSIVE prio(p) AS (
    SELECT (SELECT priority FROM {prefix}jobs INDEXED BY {prefix}jobs_claim
            WHERE queue = :queue AND state = 'available'
            ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM {prefix}jobs INDEXED BY {prefix}jobs_claim
            WHERE queue = :queue AND state = 'available' AND priority < prio.p
            ORDER BY priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT (SELECT min((SELECT available_at FROM {prefix}jobs INDEXED BY {prefix}jobs_claim
                    WHERE queue = :queue AND state = 'available' AND priority = prio.p
                    ORDER BY priority DESC, available_at LIMIT 1))
        FROM prio WHERE prio.p IS NOT NULL) - (julianday('now') - 2440587.5) * 86400.0,
       s.paused, s.concurrency_limit,
       CASE WHEN s.concurrency_limit IS NULL THEN 0
            ELSE (SELECT COUNT(*) FROM {prefix}jobs
                  WHERE state = 'running' AND queue = :queue) END,
       s.rate_per_sec, s.rate_burst, s.rate_tokens,
       (julianday('now') - 2440587.5) * 86400.0 - s.rate_at,
       s.paused_until - (julianday('now') - 2440587.5) * 86400.0
FROM (SELECT 1) AS one
LEFT JOIN {prefix}queues AS s ON s.name = :queue;

-- ---------------------------------------------------------------------------------------
-- Chains and groups (docs/workflows.md; plans in _sql/ops.py, "flows").

-- name: insert_flow
INSERT INTO {prefix}flows (id, kind, size, remaining, step, job_id, callback)
VALUES (:id, :kind, :size, :size, 0, :job_id, :callback);

-- name: lock_flow
-- Serialises the completions of one flow's jobs: a group's members take it in turn, so
-- the one that brings remaining to 0 is the last and sees every other member's result.
SELECT remaining, size, callback FROM {prefix}flows WHERE id = :id;

-- name: flow_results
SELECT idx, result FROM {prefix}flow_parts WHERE flow_id = :flow_id ORDER BY idx;

-- name: prune_flow_parts
-- prune: the parts of flows whose every step or member completed, made more than :age
-- ago (then prune_flows). A running flow is never pruned, however old.
DELETE FROM {prefix}flow_parts
WHERE flow_id IN (SELECT id FROM {prefix}flows WHERE remaining = 0 AND created_at < (julianday('now') - 2440587.5) * 86400.0 - :age);

-- name: prune_flows
DELETE FROM {prefix}flows WHERE remaining = 0 AND created_at < (julianday('now') - 2440587.5) * 86400.0 - :age;

-- name: insert_global_job
-- insert_unique_job for unique_scope="global": the key also goes into global_key, whose
-- index (one of every queue) or the (queue, unique_key) one may refuse the row.
INSERT OR IGNORE INTO {prefix}jobs (queue, kind, payload, priority, max_attempts,
                                    unique_key, global_key, available_at, created_at,
                                    lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :unique_key,
        COALESCE(:run_at, (julianday('now') - 2440587.5) * 86400.0 + :delay),
        (julianday('now') - 2440587.5) * 86400.0, :lease, :headers, :tags)
RETURNING id;

-- name: find_global
-- The live job that holds a global key: one enqueued with unique_scope="global" in any
-- queue, else (the insert was refused by the per-queue index) one of this queue.
SELECT id FROM (SELECT id, 0 AS o FROM {prefix}jobs WHERE global_key = :unique_key
                UNION ALL
                SELECT id, 1 FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key)
ORDER BY o LIMIT 1;

-- name: recent_global_twin
-- recent_twin in every queue: along the finished_at index, over the unique_for window only.
SELECT id FROM {prefix}history
WHERE finished_at > (julianday('now') - 2440587.5) * 86400.0 - :unique_for
  AND unique_key = :unique_key
ORDER BY finished_at DESC, id DESC
LIMIT 1;

-- name: lock_server
-- An enqueue into a queue not counted yet while max_queues is set. BEGIN IMMEDIATE already
-- serialises every writer, so this only reads the cap.
SELECT max_queues FROM {prefix}server WHERE id = 1;

-- name: add_queue_name
INSERT OR IGNORE INTO {prefix}queue_names (name) VALUES (:queue);

-- name: set_max_queues
UPDATE {prefix}server SET max_queues = :max_queues,
    updated_at = (julianday('now') - 2440587.5) * 86400.0 WHERE id = 1;

-- name: drop_server
DROP TABLE IF EXISTS {prefix}server;

-- name: drop_queue_names
DROP TABLE IF EXISTS {prefix}queue_names;
