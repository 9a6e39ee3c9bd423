-- PostgreSQL queries. Writes run under READ COMMITTED; holder writes lock the row by
-- (id, lease_token, state) first, so a stale holder matches nothing.
--
-- Statements that finish jobs (completed, dead, discarded, cancelled) notify
-- '{prefix}done' with the finished ids, comma-separated: waiters on results LISTEN there
-- (leaseq._results). Delivered at commit, dropped on rollback; a batch of acks sends one.

-- name: insert_job
-- pg_notify wakes LISTENing workers at commit (identical notifications in one transaction
-- are delivered once), without a round trip of its own. For jobs without a lease or
-- headers of their own; insert_full_job stores those.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at::timestamptz, now() + make_interval(secs => :delay)))
RETURNING id, pg_notify(:channel, queue);

-- name: insert_full_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at::timestamptz, now() + make_interval(secs => :delay)), :lease,
        :headers, :tags)
RETURNING id, pg_notify(:channel, queue);

-- name: insert_jobs
-- The batch arrives as one JSON array of objects {q: queue, k: kind, p: payload,
-- pr: priority, ma: max_attempts, ra: run_at, d: delay, l: lease, h: headers, t: tags}
-- (ra, d, l, h and t left out when unset), the payload, headers and tags embedded as the
-- JSON text leaseq encoded. json_to_recordset parses each object once into typed columns,
-- and as type json (not jsonb) p, h and t keep their text byte for byte; one JSON
-- parameter costs far less to send than nine arrays of text.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, available_at, lease,
                          headers, tags)
SELECT r.q, r.k, COALESCE(r.p::text, 'null'), r.pr, r.ma,
       COALESCE(r.ra, now() + make_interval(secs => COALESCE(r.d, 0))), r.l, r.h::text,
       r.t::text
FROM ROWS FROM (json_to_recordset(:rows::json)
                AS (q text, k text, p json, pr integer, ma integer, ra timestamptz, d float8,
                    l float8, h json, t json))
     WITH ORDINALITY AS r(q, k, p, pr, ma, ra, d, l, h, t, n)
ORDER BY r.n
RETURNING id, pg_notify(:channel, queue);

-- name: insert_unique_job
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          available_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key,
        COALESCE(:run_at::timestamptz, now() + make_interval(secs => :delay)), :lease,
        :headers, :tags)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id, pg_notify(:channel, queue);

-- name: find_unique
SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key;

-- name: claim
-- One statement claims a batch. settings: each named queue's settings row, read once per
-- queue (not per job) and not locked; a paused queue drops out here, so it is never
-- probed. Per remaining queue, a LATERAL probe walks the claim index in order and locks
-- what it takes, skipping rows other claimers hold; the probes' rows are merged into the
-- global order. MATERIALIZED keeps the planner from re-running the locking subquery per
-- updated row, which could claim more than :limit rows, and keeps the paused check ahead
-- of the probes (paused, or paused_until still to come: a timed pause ends by itself). Each job's lease (returned last): :lease when given, else the job's own,
-- else its queue's default_lease, else :default_lease; capped by the queue's max_lease
-- (LEAST ignores NULL), as ops.lease_for says. The job's headers come after it.
--
-- Flow control: :takes gives, per queue, how many jobs it may start (NULL: as many as
-- :limit allows). A queue whose stored settings set a concurrency_limit or a rate_per_sec
-- is claimed only with a take, which SqlOps.claim works out under its settings row's lock;
-- a client that does not know of the limit yet claims nothing from it, so it cannot
-- overshoot. Queues without limits pay only this check of a row read anyway.
WITH settings AS MATERIALIZED (
    SELECT q.name, q.take, s.default_lease, s.max_lease
    FROM unnest(:queues::text[], :takes::integer[]) AS q(name, take)
    LEFT JOIN {prefix}queues AS s ON s.name = q.name
    WHERE s.paused IS NOT TRUE AND NOT COALESCE(s.paused_until > now(), false)
      AND (q.take IS NOT NULL OR (s.concurrency_limit IS NULL AND s.rate_per_sec IS NULL))
), picked AS MATERIALIZED (
    SELECT c.id,
           LEAST(COALESCE(:lease::float8, c.lease, q.default_lease, :default_lease::float8),
                 q.max_lease) AS seconds
    FROM settings AS q
    CROSS JOIN LATERAL (
        SELECT id, priority, available_at, lease FROM {prefix}jobs
        WHERE queue = q.name AND state = 'available' AND available_at <= now()
        ORDER BY priority DESC, available_at, id
        LIMIT LEAST(:limit, q.take)
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.available_at, c.id
    LIMIT :limit
)
UPDATE {prefix}jobs AS j
SET state = 'running', attempts = j.attempts + 1, lease_token = j.lease_token + 1,
    worker_id = :worker_id, lease_until = now() + make_interval(secs => picked.seconds),
    started_at = COALESCE(j.started_at, now()), touches = 0, leased_at = now(),
    touched_at = NULL, reserves = j.reserves + 1, updated_at = now()
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.attempts, j.max_attempts,
          j.unique_key, j.lease_token, j.lease_until, j.worker_id, j.created_at,
          j.available_at, picked.seconds, j.headers, j.reserves, j.releases,
          j.timeouts, j.tags, j.snoozes;

-- name: lock_held
SELECT attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: lock_held_many
-- fail_many: the rows still held under the presented tokens (:pairs is a JSON array of
-- [id, lease_token]), locked in id order so that two batches cannot deadlock.
SELECT id, lease_token, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE id = ANY(:ids)
  AND (id, lease_token) IN (SELECT (p->>0)::bigint, (p->>1)::bigint
                            FROM json_array_elements(:pairs::json) AS p)
  AND state = 'running'
ORDER BY id
FOR UPDATE;

-- name: complete_held
-- Archive then delete in one statement: the DELETE is the fence.
WITH done AS (
    DELETE FROM {prefix}jobs WHERE id = :id AND lease_token = :token AND state = 'running'
    RETURNING *
)
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, tags, snoozes)
SELECT id, queue, kind, 'completed', payload, :result, NULL, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at, now(), lease_token,
       lease, reserves, timeouts, releases, buries, kicks, failed_at, now(), headers, tags, snoozes
FROM done
RETURNING id, pg_notify('{prefix}done', id::text);

-- name: archive
-- The history row keeps the counters; its updated_at is the finish. It keeps the
-- job's last ended lease (ended_token, ended_as), or, with :ended, records the lease this
-- archive ends (a nack, release or reclaim of a job asked to cancel).
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, error_detail, tags, ended_token, ended_as, snoozes)
SELECT id, queue, kind, :state::text, payload, :result::text,
       CASE WHEN :state::text = 'completed' THEN NULL
            ELSE COALESCE(:error::text, last_error) END,
       priority, attempts, max_attempts, unique_key, worker_id, created_at, started_at, now(),
       lease_token, lease, reserves, timeouts, releases, buries, kicks, failed_at, now(), headers,
       CASE WHEN :state::text = 'completed' THEN NULL WHEN :error::text IS NULL THEN error_detail ELSE :detail::text END, tags,
       CASE WHEN :ended::text IS NULL THEN ended_token ELSE lease_token END, COALESCE(:ended::text, ended_as), snoozes
FROM {prefix}jobs WHERE id = :id
RETURNING pg_notify('{prefix}done', id::text);

-- name: to_dead
-- bury (:failed false) or a failure with attempts used up (:failed true); :priority NULL
-- keeps the job's priority. :ended records how the holder's lease ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'dead', lease_until = NULL, last_error = COALESCE(:error::text, last_error),
    error_detail = CASE WHEN :error::text IS NULL THEN error_detail ELSE :detail::text END,
    priority = COALESCE(:priority::integer, priority), buries = buries + 1,
    failed_at = CASE WHEN :failed::boolean THEN now() ELSE failed_at END, updated_at = now(),
    ended_token = lease_token, ended_as = :ended::text
WHERE id = :id
RETURNING pg_notify('{prefix}done', id::text);

-- name: reschedule
-- :give_back is 1 for a release (the attempt comes back; counted as a release) and 0 for
-- a failure (counted by failed_at); :priority NULL keeps the job's priority. :ended
-- records how the holder's lease ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - :give_back,
    releases = releases + :give_back, priority = COALESCE(:priority::integer, priority),
    available_at = now() + make_interval(secs => :delay),
    last_error = COALESCE(:error::text, last_error),
    error_detail = CASE WHEN :error::text IS NULL THEN error_detail ELSE :detail::text END,
    failed_at = CASE WHEN :give_back = 0 THEN now() ELSE failed_at END, updated_at = now(),
    ended_token = lease_token, ended_as = :ended::text
WHERE id = :id;

-- name: lock_snoozed
-- snooze: the job held under :token, locked (as lock_held), with what decides its fate:
-- its queue, its snoozes, whether a cancel was requested, and its queue's max_snoozes (a
-- subquery: FOR UPDATE locks the job's row only).
SELECT queue, snoozes, cancel_requested,
       (SELECT max_snoozes FROM {prefix}queues WHERE name = j.queue)
FROM {prefix}jobs AS j
WHERE id = :id AND lease_token = :token AND state = 'running'
FOR UPDATE;

-- name: snooze_job
-- RetryAfter: back after :delay with the attempt given back, snoozes + 1; not a release
-- (releases), not a failure (failed_at), and the last error stays. :ended records the
-- lease it ended (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, attempts = attempts - 1, snoozes = snoozes + 1,
    available_at = now() + make_interval(secs => :delay), updated_at = now(),
    ended_token = lease_token, ended_as = :ended::text
WHERE id = :id;

-- name: extend_pause
-- RetryAfter(scope="queue"): the queue paused until :delay from now, only ever later: a
-- later end stays, and an indefinite pause (paused) stays indefinite.
INSERT INTO {prefix}queues AS q (name, paused, paused_until)
VALUES (:queue, false, now() + make_interval(secs => :delay))
ON CONFLICT (name) DO UPDATE SET
    paused_until = CASE WHEN q.paused OR q.paused_until >= excluded.paused_until
                        THEN q.paused_until ELSE excluded.paused_until END,
    updated_at = now();

-- name: queue_rows
-- stats: every queue with a settings row, whether it is paused now (either kind), and the
-- end of a timed pause in force.
SELECT name, paused OR COALESCE(paused_until > now(), false),
       CASE WHEN NOT paused AND paused_until > now() THEN paused_until END
FROM {prefix}queues;

-- name: note_failure
-- Before a failed or timed-out job that was asked to cancel goes to history: the failure
-- (and, :timeout 1, the timeout) recorded on the row that archive copies.
UPDATE {prefix}jobs SET failed_at = now(), timeouts = timeouts + :timeout WHERE id = :id;

-- name: kick
UPDATE {prefix}jobs
SET state = 'available', attempts = 0, snoozes = 0, available_at = now(),
    kicks = kicks + 1, updated_at = now()
WHERE id IN (SELECT id FROM {prefix}jobs WHERE queue = :queue AND state = 'dead'
             ORDER BY priority DESC, id LIMIT :limit FOR UPDATE SKIP LOCKED);

-- name: retry_job
-- A dead job comes back with fresh attempts and snoozes (a kick); a scheduled one is only
-- made due.
UPDATE {prefix}jobs
SET attempts = CASE WHEN state = 'dead' THEN 0 ELSE attempts END,
    snoozes = CASE WHEN state = 'dead' THEN 0 ELSE snoozes END,
    kicks = kicks + CASE WHEN state = 'dead' THEN 1 ELSE 0 END, state = 'available',
    available_at = now(), updated_at = now()
WHERE id = :id AND (state = 'dead' OR (state = 'available' AND available_at > now()));

-- name: lock_idle
-- discard: the job, with its last error for the history row (discard_record).
SELECT id, last_error, error_detail FROM {prefix}jobs WHERE id = :id AND state IN ('available', 'dead') FOR UPDATE;

-- name: lock_live
SELECT state FROM {prefix}jobs WHERE id = :id FOR UPDATE;

-- name: request_cancel
UPDATE {prefix}jobs SET cancel_requested = true WHERE id = :id;

-- name: state_of
SELECT CASE WHEN state = 'available' AND available_at > now() THEN 'scheduled'
            ELSE state END
FROM {prefix}jobs WHERE id = :id
UNION ALL
SELECT state FROM {prefix}history WHERE id = :id;

-- name: _live_row
-- The columns of a live job as SqlOps.info reads them (the history row's differ only
-- where a live job has no value yet: finished_at, result).
id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       available_at, lease_until, worker_id, created_at, started_at, NULL::timestamptz,
       NULL::text, last_error, cancel_requested, now(),
       reserves, timeouts, releases, buries, kicks, failed_at,
       COALESCE(updated_at, created_at), lease, headers,
       error_detail, tags, snoozes;

-- name: _history_row
-- _live_row's columns as history keeps them.
id, queue, kind, state, payload, priority, attempts, max_attempts, unique_key,
       NULL::timestamptz, NULL::timestamptz, worker_id, created_at, started_at, finished_at,
       result, error, false, now(),
       reserves, timeouts, releases, buries, kicks, failed_at,
       COALESCE(updated_at, finished_at), lease, headers,
       error_detail, tags, snoozes;

-- name: live_counts
-- Per queue and stored state: the count, how many of them are not yet due (available but
-- scheduled later), and how long the oldest due one has waited in seconds. Grouping by the
-- stored columns, not by a computed bucket, lets MySQL stream the claim index (queue,
-- state, ...) without a temporary table: 2x faster at 1M jobs.
SELECT queue, state, count(*), count(*) FILTER (WHERE available_at > now()),
       EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE available_at <= now()))::float8
FROM {prefix}jobs GROUP BY queue, state;

-- name: history_counts
SELECT queue, state, count(*) FROM {prefix}history GROUP BY queue, state;

-- name: expired_leases
SELECT id, attempts, max_attempts, cancel_requested FROM {prefix}jobs
WHERE state = 'running' AND lease_until <= now()
ORDER BY lease_until LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: reclaim_to_available
-- An expired lease ends here: recorded as such, so no earlier lease's nack, release or
-- bury counts as a repeat any more (_core/ended.py).
UPDATE {prefix}jobs
SET state = 'available', lease_until = NULL, available_at = now(),
    last_error = 'lease expired', error_detail = NULL, timeouts = timeouts + 1, failed_at = now(),
    updated_at = now(),
    ended_token = lease_token, ended_as = 'expired'
WHERE id = ANY(:ids) AND state = 'running' AND lease_until <= now();

-- name: reclaim_to_dead
UPDATE {prefix}jobs
SET state = 'dead', lease_until = NULL, last_error = :error, error_detail = NULL, timeouts = timeouts + 1,
    buries = buries + 1, failed_at = now(), updated_at = now(),
    ended_token = lease_token, ended_as = 'expired'
WHERE id = ANY(:ids) AND state = 'running' AND lease_until <= now()
RETURNING pg_notify('{prefix}done', id::text);

-- name: expired_dead
-- reclaim: dead jobs that went dead (or were made) longer than their queue's
-- dead_retention ago, oldest id first. Driven by the settings rows that set a retention,
-- a LATERAL probe of each one's dead index (as the claim probes its queues), so without
-- any it reads only the queues table, and dead jobs of other queues are never read.
SELECT d.id
FROM {prefix}queues AS s
CROSS JOIN LATERAL (
    SELECT id FROM {prefix}jobs
    WHERE queue = s.name AND state = 'dead'
      AND COALESCE(updated_at, created_at) < now() - make_interval(secs => s.dead_retention)
    ORDER BY id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
) AS d
WHERE s.dead_retention IS NOT NULL
ORDER BY d.id
LIMIT :limit;

-- name: archive_dead
-- expired_dead's jobs (locked) → discarded, their last error kept.
INSERT INTO {prefix}history (id, queue, kind, state, payload, result, error, priority,
                             attempts, max_attempts, unique_key, worker_id, created_at,
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, error_detail, tags, ended_token, ended_as, snoozes)
SELECT id, queue, kind, 'discarded', payload, NULL, last_error, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at, now(), lease_token,
       lease, reserves, timeouts, releases, buries, kicks, failed_at, now(), headers,
       error_detail, tags, ended_token, ended_as, snoozes
FROM {prefix}jobs WHERE id = ANY(:ids) AND state = 'dead'
RETURNING pg_notify('{prefix}done', id::text);

-- name: delete_dead
DELETE FROM {prefix}jobs WHERE id = ANY(:ids) AND state = 'dead';

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

-- name: record_version
INSERT INTO {prefix}migrations (version, name) VALUES (:version, :name);

-- name: set_paused
-- pause (:paused true, no end), pause until a time (:paused false and :until, a time, or
-- :seconds from now: the pause ends by itself then), or resume (neither): each replaces
-- whatever pause was in force.
INSERT INTO {prefix}queues (name, paused, paused_until)
VALUES (:queue, :paused,
        COALESCE(:until::timestamptz, now() + make_interval(secs => :seconds::float8)))
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
    paused_until = excluded.paused_until, updated_at = now();

-- name: paused_queues
SELECT name FROM {prefix}queues WHERE paused OR paused_until > now() ORDER BY name;

-- name: list_live
-- Two branches, exactly one of which the parameters switch on (the other's parameter-only
-- test is false, so it reads nothing): given a queue and a unique key, the unique index
-- finds the job; otherwise the primary key is walked in id order. A single branch with
-- "(:unique_key IS NULL OR unique_key = ...)" would read the same rows, but psycopg
-- prepares a statement that runs often, and PostgreSQL's generic plan for it cannot use
-- the index for such a condition. Each branch orders and limits itself so that the walk
-- stops at :limit rows.
(SELECT {_live_row}
 FROM {prefix}jobs
 WHERE :queue::text IS NOT NULL AND :unique_key::text IS NOT NULL
   AND queue = :queue::text AND unique_key = :unique_key::text AND id > :after
   AND (:kind::text IS NULL OR kind = :kind::text)
   AND (:tag::text IS NULL OR strpos(tags, '"' || :tag::text || '"') > 0)
   AND (:state::text IS NULL OR :state::text =
        CASE WHEN state = 'available' AND available_at > now() THEN 'scheduled' ELSE state END)
 ORDER BY id LIMIT :limit)
UNION ALL
(SELECT {_live_row}
 FROM {prefix}jobs
 WHERE (:queue::text IS NULL OR :unique_key::text IS NULL)
   AND id > :after AND (:queue::text IS NULL OR queue = :queue::text)
   AND (:unique_key::text IS NULL OR unique_key = :unique_key::text)
   AND (:kind::text IS NULL OR kind = :kind::text)
   AND (:tag::text IS NULL OR strpos(tags, '"' || :tag::text || '"') > 0)
   AND (:state::text IS NULL OR :state::text =
        CASE WHEN state = 'available' AND available_at > now() THEN 'scheduled' ELSE state END)
 ORDER BY id LIMIT :limit)
ORDER BY id LIMIT :limit;

-- name: list_history
-- As list_live: with a queue and a unique key, history_unique finds the rows.
(SELECT {_history_row}
 FROM {prefix}history
 WHERE :queue::text IS NOT NULL AND :unique_key::text IS NOT NULL
   AND queue = :queue::text AND unique_key = :unique_key::text AND id > :after
   AND (:kind::text IS NULL OR kind = :kind::text)
   AND (:tag::text IS NULL OR strpos(tags, '"' || :tag::text || '"') > 0)
   AND (:state::text IS NULL OR state = :state::text)
 ORDER BY id LIMIT :limit)
UNION ALL
(SELECT {_history_row}
 FROM {prefix}history
 WHERE (:queue::text IS NULL OR :unique_key::text IS NULL)
   AND id > :after AND (:queue::text IS NULL OR queue = :queue::text)
   AND (:unique_key::text IS NULL OR unique_key = :unique_key::text)
   AND (:kind::text IS NULL OR kind = :kind::text)
   AND (:tag::text IS NULL OR strpos(tags, '"' || :tag::text || '"') > 0)
   AND (:state::text IS NULL OR state = :state::text)
 ORDER BY id LIMIT :limit)
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
                             started_at, finished_at, lease_token, lease, reserves, timeouts,
                             releases, buries, kicks, failed_at, updated_at,
                             headers, tags, snoozes)
SELECT id, queue, kind, 'completed', payload, new_result, NULL, priority, attempts,
       max_attempts, unique_key, worker_id, created_at, started_at, now(), lease_token,
       lease, reserves, timeouts, releases, buries, kicks, failed_at, now(), headers, tags, snoozes
FROM done
-- One notification for the batch (an InitPlan, run once), with the completed ids, or ''
-- (anything may have finished) past NOTIFY's 8,000-byte payload limit.
RETURNING id, (SELECT pg_notify('{prefix}done',
                                CASE WHEN sum(length(d.id::text) + 1) < 8000
                                     THEN string_agg(d.id::text, ',') ELSE '' END)
               FROM done AS d);

-- name: renew_many
-- renew and renew_many in one statement. limits: the settings rows that limit touches or
-- leases (usually none). renewed: the jobs still held under the presented tokens whose
-- queue's limits allow the touch, extended by at most max_lease. Then, only when some job
-- was not renewed, those of queues with limits get their verdict, checked in the order of
-- ops.touch_verdict: 'touches' (max_touches extensions made), 'duration' (the lease began
-- more than max_touch_duration ago), 'soon' (extended or begun less than
-- min_touch_interval ago: answered with its lease as it stands, without a write).
-- Returns per job: id, token, verdict ('extend' when renewed), lease_until, the cancel
-- flag and, for a refusal's message, its touches, the lease's age and max_touch_duration.
-- A job held by no lease any more is not returned. A queue without limits costs one
-- empty probe of limits per job, and jobs all renewed skip the second part entirely.
WITH input AS (
    SELECT * FROM unnest(:ids::bigint[], :tokens::bigint[], :extends::float8[])
        AS i(id, token, extend)
), limits AS MATERIALIZED (
    SELECT name, max_touches, max_touch_duration, min_touch_interval, max_lease
    FROM {prefix}queues
    WHERE max_touches IS NOT NULL OR max_touch_duration IS NOT NULL
       OR min_touch_interval IS NOT NULL OR max_lease IS NOT NULL
), renewed AS (
    UPDATE {prefix}jobs AS j
    SET lease_until = now() + make_interval(secs => LEAST(
            i.extend, (SELECT l.max_lease FROM limits AS l WHERE l.name = j.queue))),
        touches = j.touches + 1, touched_at = now()
    FROM input AS i
    WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
      AND NOT EXISTS (
          SELECT 1 FROM limits AS l
          WHERE l.name = j.queue
            AND (j.touches >= l.max_touches
                 OR now() - j.leased_at > make_interval(secs => l.max_touch_duration)
                 OR now() - COALESCE(j.touched_at, j.leased_at)
                    < make_interval(secs => l.min_touch_interval)))
    RETURNING j.id, j.lease_token, j.lease_until, j.cancel_requested
)
SELECT id, lease_token, 'extend', lease_until, cancel_requested, NULL::integer,
       NULL::float8, NULL::float8
FROM renewed
UNION ALL
SELECT * FROM (
    SELECT j.id, j.lease_token,
           CASE WHEN j.touches >= l.max_touches THEN 'touches'
                WHEN now() - j.leased_at > make_interval(secs => l.max_touch_duration)
                    THEN 'duration'
                WHEN now() - COALESCE(j.touched_at, j.leased_at)
                     < make_interval(secs => l.min_touch_interval) THEN 'soon'
                ELSE 'extend' END AS verdict,
           j.lease_until, j.cancel_requested, j.touches,
           EXTRACT(EPOCH FROM now() - j.leased_at)::float8, l.max_touch_duration
    FROM input AS i
    JOIN {prefix}jobs AS j ON j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
    JOIN limits AS l ON l.name = j.queue
    WHERE (SELECT count(*) FROM renewed) < (SELECT count(*) FROM input)
) AS unrenewed
-- 'extend' here: the update found the lease gone (it changed hands meanwhile).
WHERE verdict <> 'extend';

-- name: drop_tables
DROP TABLE IF EXISTS {prefix}history, {prefix}jobs, {prefix}queues, {prefix}migrations,
    {prefix}flows, {prefix}flow_parts, {prefix}server, {prefix}queue_names;

-- name: completed_tokens
-- Jobs already completed, with the token that completed them: a retried ack whose first
-- attempt committed finds its own token here and is a success, not a LeaseLost.
SELECT id, lease_token FROM {prefix}history WHERE id = ANY(:ids) AND state = 'completed';

-- name: ended_leases
-- The last ended lease of each job, live or in history (_core/ended.py): a nack, release
-- or bury whose lease no longer holds the job reads it to tell a repeat of the call that
-- ended that lease (its first reply lost) from a stale call. Completed jobs are left
-- out: their last lease is the one that acked them, and an ack repeats by
-- completed_tokens.
SELECT id, ended_token, ended_as FROM {prefix}jobs WHERE id = ANY(:ids)
UNION ALL
SELECT id, ended_token, ended_as FROM {prefix}history
WHERE id = ANY(:ids) AND state <> 'completed';

-- Enqueue limits, queue settings, peek, server version (issue 11) ------------------------

-- name: lock_queue_cap
-- enqueue into a queue with max_jobs: the settings row stays locked until commit, so the
-- enqueuers of one capped queue count its jobs one after another.
SELECT max_jobs FROM {prefix}queues WHERE name = :queue FOR UPDATE;

-- name: live_count
-- The queue's live jobs: the available ones along the claim index and the dead ones along
-- the dead index, each in its index's order so the planner walks the index, not the
-- table; each stops at :cap rows, as only whether the total exceeds max_jobs matters. The
-- running ones along the lease index, which holds every queue's running jobs: bounded by
-- the workers' slots, and only capped enqueues pay it, where a (queue) index on running
-- jobs would cost every claim an index entry (about 5 % of a PostgreSQL drain).
SELECT (SELECT count(*) FROM (SELECT 1 FROM {prefix}jobs
                              WHERE queue = :queue AND state = 'available'
                              ORDER BY priority DESC, available_at, id LIMIT :cap) AS a)
     + (SELECT count(*) FROM (SELECT 1 FROM {prefix}jobs
                              WHERE queue = :queue AND state = 'dead'
                              ORDER BY id LIMIT :cap) AS b)
     + (SELECT count(*) FROM {prefix}jobs WHERE state = 'running' AND queue = :queue);

-- name: delete_new_jobs
-- Takes back rows this transaction inserted (a batch over max_jobs, a unique_for twin).
DELETE FROM {prefix}jobs WHERE id = ANY(:ids);

-- name: recent_twin
-- The newest job of the same key that finished less than :unique_for seconds ago. Run after
-- this transaction's own insert of the key succeeded: a twin that was live then had
-- committed its move to history, so this statement's snapshot sees it.
SELECT id FROM {prefix}history
WHERE queue = :queue AND unique_key = :unique_key
  AND finished_at > now() - make_interval(secs => :unique_for)
ORDER BY finished_at DESC, id DESC
LIMIT 1;

-- name: peek_available
-- Due jobs in claim order, by the claim index; the 28 columns of get_live.
SELECT {_live_row}
FROM {prefix}jobs
WHERE queue = :queue AND state = 'available' AND available_at <= now()
ORDER BY priority DESC, available_at, id
LIMIT :limit;

-- name: priority_counts
-- Due jobs per priority, highest first: the queue's due range of the claim index.
SELECT priority, count(*) FROM {prefix}jobs
WHERE queue = :queue AND state = 'available' AND available_at <= now()
GROUP BY priority
ORDER BY priority DESC;

-- name: peek_scheduled
-- Jobs not yet due, soonest first: the queue's range of the claim index, then a top-N sort.
SELECT {_live_row}
FROM {prefix}jobs
WHERE queue = :queue AND state = 'available' AND available_at > now()
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
INSERT INTO {prefix}queues AS q (name, paused, max_attempts, base_backoff, max_backoff,
                                 jitter, default_lease, max_lease, max_jobs, max_touches,
                                 max_touch_duration, min_touch_interval, dead_retention,
                                 concurrency_limit, rate_per_sec, rate_burst, max_snoozes)
VALUES (:queue, false, :max_attempts, :base_backoff, :max_backoff, :jitter, :default_lease,
        :max_lease, :max_jobs, :max_touches, :max_touch_duration, :min_touch_interval,
        :dead_retention, :concurrency_limit, :rate_per_sec, :rate_burst, :max_snoozes)
ON CONFLICT (name) DO UPDATE SET
    max_attempts = CASE WHEN :set_max_attempts THEN excluded.max_attempts
                        ELSE q.max_attempts END,
    base_backoff = CASE WHEN :set_base_backoff THEN excluded.base_backoff
                        ELSE q.base_backoff END,
    max_backoff = CASE WHEN :set_max_backoff THEN excluded.max_backoff ELSE q.max_backoff END,
    jitter = CASE WHEN :set_jitter THEN excluded.jitter ELSE q.jitter END,
    default_lease = CASE WHEN :set_default_lease THEN excluded.default_lease
                         ELSE q.default_lease END,
    max_lease = CASE WHEN :set_max_lease THEN excluded.max_lease ELSE q.max_lease END,
    max_jobs = CASE WHEN :set_max_jobs THEN excluded.max_jobs ELSE q.max_jobs END,
    max_touches = CASE WHEN :set_max_touches THEN excluded.max_touches ELSE q.max_touches END,
    max_touch_duration = CASE WHEN :set_max_touch_duration THEN excluded.max_touch_duration
                              ELSE q.max_touch_duration END,
    min_touch_interval = CASE WHEN :set_min_touch_interval THEN excluded.min_touch_interval
                              ELSE q.min_touch_interval END,
    dead_retention = CASE WHEN :set_dead_retention THEN excluded.dead_retention
                          ELSE q.dead_retention END,
    concurrency_limit = CASE WHEN :set_concurrency_limit THEN excluded.concurrency_limit
                             ELSE q.concurrency_limit END,
    rate_per_sec = CASE WHEN :set_rate_per_sec THEN excluded.rate_per_sec
                        ELSE q.rate_per_sec END,
    rate_burst = CASE WHEN :set_rate_burst THEN excluded.rate_burst ELSE q.rate_burst END,
    max_snoozes = CASE WHEN :set_max_snoozes THEN excluded.max_snoozes
                       ELSE q.max_snoozes END,
    updated_at = now()
RETURNING name, max_attempts, base_backoff, max_backoff, jitter, default_lease, max_lease,
          max_jobs, max_touches, max_touch_duration, min_touch_interval, dead_retention,
          concurrency_limit, rate_per_sec, rate_burst, max_snoozes;

-- name: server_version
SHOW server_version;

-- name: oldest_transaction_age
-- The ServerStats gauge: seconds since the oldest transaction of a client session on this
-- database began (our own counts, so never NULL). Idle sessions have no xact_start; other
-- backend types (autovacuum, walsender) are left out: vacuum ignores a vacuum's snapshot.
-- Another role's sessions show xact_start only to roles with pg_read_all_stats.
SELECT COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(xact_start)), 0)::float8
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend';

-- name: lock_limits
-- A claim of queues with limits: their settings rows, locked in name order (two claims
-- cannot deadlock) until the claim commits, so claimers of a limited queue count and
-- spend one after another; with each, the seconds since its bucket was last spent (by
-- clock_timestamp(), as spend_tokens dates it).
SELECT name, concurrency_limit, rate_per_sec, rate_burst, rate_tokens,
       EXTRACT(EPOCH FROM clock_timestamp() - rate_at)
FROM {prefix}queues
WHERE name = ANY(:names) AND NOT paused AND NOT COALESCE(paused_until > now(), false)
ORDER BY name
FOR UPDATE;

-- name: running_counts
-- Running jobs of the named queues, along the lease index (every queue's running jobs:
-- bounded by the workers' slots; see live_count for why there is no per-queue index).
SELECT queue, count(*) FROM {prefix}jobs
WHERE state = 'running' AND queue = ANY(:names)
GROUP BY queue;

-- name: spend_tokens
-- :started jobs took a token each. The bucket is refilled up to this statement's clock
-- first: clock_timestamp(), not now(), because claims that queued for the row lock began
-- their transactions in another order than they got it, and a bucket dated by a
-- transaction's start could be dated back and so refill twice. Read while the lock is
-- held, the clock only moves forward from one holder to the next.
UPDATE {prefix}queues
SET rate_tokens = LEAST(COALESCE(rate_burst, 1),
                        COALESCE(rate_tokens + GREATEST(0, EXTRACT(EPOCH FROM
                                     clock_timestamp() - rate_at)) * rate_per_sec,
                                 COALESCE(rate_burst, 1))) - :started,
    rate_at = clock_timestamp()
WHERE name = :queue;

-- name: next_due
-- One queue's share of next_due: seconds until its earliest available job is due (<= 0:
-- one is due now; NULL: none), then its settings row, then the seconds until a timed pause
-- ends (<= 0 or NULL: none in force). The earliest is the least of each
-- priority's first entry in the claim index, reached by a skip scan over the priorities
-- (a recursive CTE, one index probe per distinct priority), not by reading every
-- scheduled job.
WITH RECURSIVE prio(p) AS (
    SELECT (SELECT priority FROM {prefix}jobs
            WHERE queue = :queue AND state = 'available'
            ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM {prefix}jobs
            WHERE queue = :queue AND state = 'available' AND priority < prio.p
            ORDER BY priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT EXTRACT(EPOCH FROM
           (SELECT min((SELECT available_at FROM {prefix}jobs
                        WHERE queue = :queue AND state = 'available' AND priority = prio.p
                        ORDER BY priority DESC, available_at LIMIT 1))
            FROM prio WHERE prio.p IS NOT NULL) - now()),
       s.paused, s.concurrency_limit,
       CASE WHEN s.concurrency_limit IS NULL THEN 0
            ELSE (SELECT count(*) FROM {prefix}jobs
                  WHERE state = 'running' AND queue = :queue) END,
       s.rate_per_sec, s.rate_burst, s.rate_tokens, EXTRACT(EPOCH FROM now() - s.rate_at),
       EXTRACT(EPOCH FROM s.paused_until - now())
FROM (SELECT 1) AS one
LEFT JOIN {prefix}queues AS s ON s.name = :queue;

-- ---------------------------------------------------------------------------------------
-- Chains and groups (docs/workflows.md; plans in _sql/ops.py, "flows").

-- name: insert_flow
INSERT INTO {prefix}flows (id, kind, size, remaining, step, job_id, callback)
VALUES (:id, :kind, :size, :size, 0, :job_id, :callback);

-- name: insert_flow_steps
-- A chain's steps after the first, numbered from 1 (the first step is enqueued at once).
INSERT INTO {prefix}flow_parts (flow_id, idx, spec)
SELECT :flow_id, n::integer, spec FROM unnest(:specs::text[]) WITH ORDINALITY AS s(spec, n);

-- name: lock_flow
-- Serialises the completions of one flow's jobs: a group's members take it in turn, so
-- the one that brings remaining to 0 is the last and sees every other member's result.
SELECT remaining, size, callback FROM {prefix}flows WHERE id = :id
FOR UPDATE;

-- name: count_down_flow_returning
-- lock_flow and count_down_flow in one statement: the remaining count before this one.
UPDATE {prefix}flows SET remaining = remaining - 1 WHERE id = :id
RETURNING remaining + 1, callback;

-- name: flow_results
SELECT idx, result FROM {prefix}flow_parts WHERE flow_id = :flow_id ORDER BY idx;

-- name: prune_flow_parts
-- prune: the parts of flows whose every step or member completed, made more than :age
-- ago (then prune_flows). A running flow is never pruned, however old.
DELETE FROM {prefix}flow_parts
WHERE flow_id IN (SELECT id FROM {prefix}flows WHERE remaining = 0 AND created_at < now() - make_interval(secs => :age));

-- name: prune_flows
DELETE FROM {prefix}flows WHERE remaining = 0 AND created_at < now() - make_interval(secs => :age);

-- name: routine_comment
-- The fingerprint comment of the installed enqueue function (install_routine); no row
-- when there is no such function.
SELECT obj_description(p, 'pg_proc') FROM to_regprocedure(:signature) AS p WHERE p IS NOT NULL;

-- name: routine_overloads
-- Other functions of the enqueue function's name in the schema migrate works in.
SELECT p.oid::regprocedure::text FROM pg_proc AS p
WHERE p.proname = :name AND p.pronamespace = current_schema()::regnamespace
  AND p.oid IS DISTINCT FROM to_regprocedure(:signature)::oid;

-- name: drop_routine
DROP FUNCTION IF EXISTS {prefix}enqueue(text, jsonb, text, integer, interval, text, integer, text[]);
-- name: insert_global_job
-- insert_unique_job for unique_scope="global": the key also goes into global_key, whose
-- index (one of every queue) or the (queue, unique_key) one may refuse the row.
INSERT INTO {prefix}jobs (queue, kind, payload, priority, max_attempts, unique_key,
                          global_key, available_at, created_at, lease, headers, tags)
VALUES (:queue, :kind, :payload, :priority, :max_attempts, :unique_key, :unique_key,
        COALESCE(:run_at::timestamptz, now() + make_interval(secs => :delay)), now(),
        :lease, :headers, :tags)
ON CONFLICT DO NOTHING
RETURNING id, pg_notify(:channel, queue);

-- name: find_global
-- The live job that holds a global key: one enqueued with unique_scope="global" in any
-- queue, else (the insert was refused by the per-queue index) one of this queue.
(SELECT id FROM {prefix}jobs WHERE global_key = :unique_key)
UNION ALL
(SELECT id FROM {prefix}jobs WHERE queue = :queue AND unique_key = :unique_key)
LIMIT 1;

-- name: recent_global_twin
-- recent_twin in every queue: along the finished_at index, over the unique_for window only.
SELECT id FROM {prefix}history
WHERE finished_at > now() - make_interval(secs => :unique_for) AND unique_key = :unique_key
ORDER BY finished_at DESC, id DESC
LIMIT 1;

-- name: lock_server
-- An enqueue into a queue not counted yet while max_queues is set: the server row stays
-- locked until commit, so such enqueuers count the queues one after another.
SELECT max_queues FROM {prefix}server WHERE id = 1 FOR UPDATE;

-- name: add_queue_name
INSERT INTO {prefix}queue_names (name) VALUES (:queue) ON CONFLICT DO NOTHING;

-- name: set_max_queues
UPDATE {prefix}server SET max_queues = :max_queues, updated_at = now() WHERE id = 1;

-- name: epoch_seen
-- Job ids (design §59): the server's identity, its timeline (the first 8 hex digits of
-- the current WAL file's name, which an ordinary user may read, behind a transaction
-- pooler too; NULL on a standby, where the functions refuse), beside the stored one.
SELECT CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END,
       e.identity, e.epoch
FROM (SELECT 1) AS one LEFT JOIN {prefix}epoch AS e ON e.id = 1;

-- name: epoch_lock
-- Bumpers of one prefix queue here until commit (transaction-scoped: behind a pooler too).
SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtext(:key))) AS locked;

-- name: epoch_record
INSERT INTO {prefix}epoch (id, identity, epoch) VALUES (1, :identity, :epoch)
ON CONFLICT (id) DO UPDATE SET identity = EXCLUDED.identity, epoch = EXCLUDED.epoch,
                               updated_at = now();

-- name: epoch_advance
-- The jobs' identity sequence, up to :base unless it is there already (setval is not
-- undone by a rollback; it only ever moves the sequence forward here).
SELECT setval(pg_get_serial_sequence('{prefix}jobs', 'id'), :base, false)
WHERE COALESCE(pg_sequence_last_value(pg_get_serial_sequence('{prefix}jobs', 'id')::regclass),
               0) < :base;
