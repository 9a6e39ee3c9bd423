"""``Queue``, the blocking client, and ``connect``/``connect_async``; ``AsyncQueue``, the
asyncio one, is in ``_aclient.py``. Same method names, same arguments.

All checking and encoding happens in ``_shared.Shared`` (no I/O), so the two clients
differ only in ``await``; ``tests/test_public_api.py`` holds their signatures equal.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from leaseq import _listen, _results, _wakeup
from leaseq import tracing as _tracing
from leaseq._aclient import AsyncQueue
from leaseq._conn import caller_connection
from leaseq._core import flow as _flow
from leaseq._core import validate as v
from leaseq._core.backoff import Backoff
from leaseq._core.flow import FlowLink, FlowState
from leaseq._core.job import (
    QUEUE_SETTINGS,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueConfig,
    QueueStats,
    ServerConfig,
    ServerStats,
)
from leaseq._core.settings import Settings
from leaseq._group import GroupCommit, grouped
from leaseq._shared import KEEP, POLL_CAP, POLL_FIRST, Closed, Keep, Shared, UniqueScope
from leaseq.backends import create_backend
from leaseq.backends.base import Backend, NewFlow, NewJob
from leaseq.errors import (
    BackendError,
    ClientClosed,
    InvalidArgument,
    JobCancelled,
    LeaseLost,
    LeaseqError,
    NotReplicated,
    TouchLimitExceeded,
)
from leaseq.outcomes import SnoozeScope


class Queue(Shared):
    """A thread-safe client of one leaseq database. Create it with ``leaseq.connect``."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        super().__init__(url, settings)
        self._backend: Backend = create_backend(url, settings, use_async=False)
        self._configs_lock = threading.Lock()
        self._result_waiter = _results.QueueWaiter(self)
        self._group = GroupCommit(self._write) if grouped(self._caps, settings) else None

    @property
    def backend(self) -> str:
        """The backend's name: memory, sqlite, postgres, mysql or redis."""
        return self._backend.name

    def _fresh_configs(self) -> None:
        if self._configs_stale():
            with self._configs_lock:
                if self._configs_stale():
                    self._store_server(self._backend.server_config())
                    self._store_configs(self._backend.queue_configs())

    def migrate(self) -> list[str]:
        """Create or upgrade leaseq's tables. Idempotent; safe when processes race.

        Returns:
            The migrations this call applied, oldest first (``["0001_init", ...]`` on a
            new database); [] when the schema was already up to date, and always on
            Redis and ``memory://``, which have no tables to create.
        """
        applied = self._backend.migrate()
        self._forget_configs()
        return list(applied or [])

    def enqueue(
        self,
        queue: str,
        payload: Any = None,
        *,
        kind: str | None = None,
        priority: int = 0,
        delay: float | timedelta = 0,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        lease: float | timedelta | None = None,
        unique_for: float | timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        conn: Any = None,
        unique_scope: UniqueScope = "queue",
        tags: Sequence[str] | None = None,
    ) -> EnqueueResult:
        """Add a job.

        Args:
            queue: Queue name, 1-200 characters of ``A-Z a-z 0-9 _ . -``.
            payload: Any JSON value (dict with string keys, list, str, finite number, bool,
                None), at most ``max_payload_bytes`` encoded.
            kind: Task name, for the worker to route on.
            priority: Higher runs first. Defaults to 0.
            delay: Seconds (or a timedelta) from now, by the database clock.
            run_at: An aware datetime to run at instead of ``delay``.
            unique_key: At most one live job per ``(queue, unique_key)``; a duplicate
                returns the existing job's id with ``created=False``.
            unique_scope: ``"queue"`` (the default): ``unique_key`` is unique in its
                queue. ``"global"``: unique among the live jobs enqueued with
                ``"global"`` in every queue (and in its own queue, as any key); with
                ``unique_for``, a job of the key finished in any queue counts.
            max_attempts: Attempts before the job goes dead. Defaults to the queue's
                ``max_attempts`` setting, else the client's (5).
            lease: The job's own lease in seconds, used when it is dequeued without an
                explicit ``lease`` (capped by the queue's ``max_lease``).
            unique_for: With ``unique_key``: for this many seconds after a job with the
                same key finished (completed, cancelled or discarded), return that job's
                id with ``created=False`` instead of enqueueing again.
            tags: Labels to find the job by (``jobs(tag=...)``, ``leaseq jobs --tag``,
                the dashboard): at most 16 tags of 1-64 characters of
                ``A-Z a-z 0-9 _ . : -``, kept in order with duplicates dropped and handed
                back as ``Job.tags`` and ``JobInfo.tags``, in history too.
            headers: A small map of strings stored with the job and handed back with it
                (``Job.headers``, ``JobInfo.headers``): at most 64 entries, names of 1-100
                characters, 8 KiB encoded. With ``leaseq.tracing`` on, the trace context
                is added to it.
            conn: Your own DB-API connection (psycopg, PyMySQL or sqlite3), or a
                SQLAlchemy ``Connection`` or ``Session`` on one (``AsyncQueue``: an
                ``AsyncConnection`` or ``AsyncSession``): the job is written in your
                transaction and exists only if you commit (docs/integrations.md).

        Returns:
            The job's id and whether this call created it.

        Raises:
            InvalidArgument: A bad argument (a tag that is not a string of the allowed
                characters, a 17th tag, ...), named in the message; nothing was written.
            QueueFull: The queue holds its ``max_jobs`` live jobs; nothing was written.
            TooManyQueues: The queue would be one more than the server's ``max_queues``
                (``configure_server``); nothing was written.
        """
        self._fresh_configs()
        job = self._new_job(queue, payload, kind=kind, priority=priority, delay=delay,
                            run_at=run_at, unique_key=unique_key, max_attempts=max_attempts,
                            lease=lease, unique_for=unique_for, headers=headers,
                            unique_scope=unique_scope, tags=tags)
        conn = self._caller(conn)
        if _tracing.on:
            return self._enqueue_traced([job], conn)[0]
        return self._enqueue_jobs([job], conn)[0]

    def enqueue_many(
        self, items: Iterable[Mapping[str, Any]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """Add many jobs in one transaction. Each item holds ``enqueue``'s arguments
        (``queue`` required). All are checked first: one bad item, or one queue over its
        ``max_jobs``, writes nothing."""
        self._fresh_configs()
        jobs = self._new_jobs(items)
        if not jobs:
            return []
        conn = self._caller(conn)
        if _tracing.on:
            return self._enqueue_traced(jobs, conn)
        return self._write(jobs, conn)

    def _caller(self, conn: Any) -> Any:
        """The DB-API connection to write in: ``conn`` unwrapped, else ``default_conn``'s."""
        if conn is None and self.default_conn is not None:
            conn = self.default_conn()
        return None if conn is None else caller_connection(conn, self._caps)

    def _enqueue_traced(self, jobs: list[NewJob], conn: Any) -> list[EnqueueResult]:
        """``enqueue_many`` inside a producer span whose context the jobs carry."""
        with _tracing.producing(jobs) as span:
            results = self._enqueue_jobs(span.jobs, conn)
            span.enqueued(results)
        return results

    def _enqueue_jobs(self, jobs: list[NewJob], conn: Any) -> list[EnqueueResult]:
        """A lone job without ``conn`` joins the group commit (``_group``)."""
        if self._group is not None and conn is None and len(jobs) == 1:
            return [self._group.enqueue(jobs[0])]
        return self._write(jobs, conn)

    def _write(self, jobs: list[NewJob], conn: Any = None) -> list[EnqueueResult]:
        """One transaction (the caller's, with ``conn``), then the in-process wake-up."""
        fresh = self._fresh_in(jobs)
        results = self._backend.enqueue(jobs, conn, self._capped_in(jobs), fresh)
        if fresh:
            self._counted.update(fresh)
        _wakeup.notify(self._wake_key, sorted({job.queue for job in jobs}))
        return self._bind(results)

    def dequeue(
        self,
        queues: str | Sequence[str],
        *,
        worker_id: str | None = None,
        lease: float | None = None,
        limit: int = 1,
        wait: float | timedelta = 0,
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs from ``queues``: higher priority first, then
        earlier ``available_at``, then lower id. Each gets a fresh ``lease_token`` and
        counts an attempt. Also reclaims expired leases, at most once per
        ``reclaim_interval``.

        Args:
            lease: Seconds each job is leased for. Defaults to the job's own lease, else
                its queue's ``default_lease``, else the client's ``Settings.lease``;
                always capped by the queue's ``max_lease``.
            wait: With nothing due, block up to this many seconds for a job to become
                due (enqueued, or a scheduled one coming due) and return it; ``[]`` when
                the time runs out. 0 (the default) returns at once. ``close()`` from
                another thread ends the wait with ``ClientClosed``.
        """
        names, worker, lease_s, n, wait_s = self._claim_args(queues, worker_id, lease, limit,
                                                              wait)
        if self._reclaim_due():
            # Housekeeping the primary did: unreplicated, it is redone later, and the
            # claim that follows reports its own replication (wait_replicas).
            with contextlib.suppress(NotReplicated):
                self._backend.reclaim(1000)
        jobs = self._claim_unless_closed(names, worker, lease_s, n)
        if jobs or wait_s <= 0:
            return jobs
        return self._wait_for_jobs(names, worker, lease_s, n, time.monotonic() + wait_s)

    def _claim_unless_closed(
        self, names: list[str], worker: str, lease: float | None, n: int
    ) -> list[Job]:
        try:
            self._fresh_configs()  # which queues have limits
            try:
                jobs = self._backend.claim(names, worker, lease, n, self.settings.lease,
                                           self._limited)
            except NotReplicated as exc:  # the primary leased exc.result: the same holds
                if isinstance(exc.result, list):
                    exc.result = self._runnable(exc.result)
                raise
            return self._runnable(jobs)
        except Exception as exc:
            # close() from another thread shut the pool under this claim: the driver's
            # error (redis-py: a TypeError on the closed socket) means only that.
            if self._closed and not isinstance(exc, ClientClosed):
                raise ClientClosed(
                    f"this leaseq client ({self.backend}) was closed during the call"
                ) from exc
            raise

    def _runnable(self, jobs: list[Job]) -> list[Job]:
        """Claimed ``jobs`` less those that do not decode, which are buried
        (``Shared._undecodable``)."""
        bad = self._undecodable(jobs)
        if not bad:
            return jobs
        failures: dict[int, Exception] = {}
        for job_id, token, error, detail in bad:
            try:
                self._backend.bury(job_id, token, error, None, detail)
            except NotReplicated:
                pass  # made on the primary, as the claim was
            except LeaseqError as exc:
                failures[job_id] = exc
        return self._without_buried(jobs, bad, failures)

    def _wait_for_jobs(
        self, names: list[str], worker: str, lease: float | None, n: int, deadline: float
    ) -> list[Job]:
        woken = threading.Event()
        wanted = set(names)

        def wake(queues: Sequence[str]) -> None:
            if wanted.intersection(queues):
                woken.set()

        unsubscribe = _wakeup.subscribe(self._wake_key, wake)
        self._waiting.add(woken)
        listener = self._caps.listener
        url = None if listener is None else self._push_url()
        done = threading.Event()
        pushed = None if listener is None or url is None else _listen.InThread(
            listener(url, self.settings.table_prefix, names, woken.set, done.is_set))
        pause = POLL_FIRST
        try:
            while (left := deadline - time.monotonic()) > 0:
                woken.wait(min(pause, left))
                woken.clear()
                jobs = self._claim_unless_closed(names, worker, lease, n)
                if jobs:
                    return jobs
                pause = min(pause * 2, POLL_CAP)
            return []
        finally:
            self._waiting.discard(woken)
            unsubscribe()
            if pushed is not None:
                done.set()  # the listener's own exit: a cancel alone can be lost (§27)
                pushed.stop()

    def heartbeat(self, job: Job, *, extend: float | None = None) -> datetime:
        """Extend the lease by ``extend`` seconds (default: the job's lease) from now,
        within the queue's ``max_lease`` and touch limits.

        Returns:
            The new ``lease_until`` (unchanged when the queue's ``min_touch_interval``
            has not passed since the previous extension).

        Raises:
            LeaseLost: The lease is stale; nothing changed.
            JobCancelled: The job was cancelled; stop and ``release`` or ``nack`` it.
            TouchLimitExceeded: The queue's ``max_touches`` or ``max_touch_duration``
                refused the extension; the lease will run out.
        """
        job_id, token = self._held(job)
        seconds = v.seconds("extend", job.lease if extend is None else extend, positive=True)
        return self._backend.renew(job_id, token, seconds)

    def ack(self, job: Job, result: Any = None, *, conn: Any = None) -> None:
        """Record the job completed, with ``result`` (JSON) in history.

        With ``conn`` (as for ``enqueue``: a DB-API connection, or a SQLAlchemy
        connection or session), the completion commits in your transaction with your side
        effects; a stale lease raises ``LeaseLost`` so you can roll them back together.
        """
        job_id, token = self._held(job)
        text = self._result(result)
        link = _flow.link(job.headers)
        if link is not None:  # a step of a chain or group: its follow-up comes with it
            if conn is not None:
                raise InvalidArgument("a job of a chain or group cannot be acked in your "
                                      "transaction (conn=)")
            if not self._backend.complete_steps([(job_id, token, text, link)])[0]:
                raise LeaseLost.stale(job_id, token)
            self._woken_by([link])
            _results.finished(self._wake_key, (job_id,))
            return
        self._backend.complete(job_id, token, text, self._caller(conn))
        _results.finished(self._wake_key, (job_id,))

    def ack_many(self, jobs: Iterable[Job | tuple[Job, Any]]) -> list[bool]:
        """Record many held jobs completed in one transaction: each a ``Job`` or a
        ``(job, result)`` pair. Fenced per job: True where it completed, False where its
        lease was lost (that job is left unchanged). Jobs of chains and groups are
        completed with what follows them, in one more transaction (docs/workflows.md)."""
        items, links = self._ack_items(jobs)
        if not items:
            return []
        done = (self._backend.complete_many(items) if links is None
                else self._ack_flows(items, links))
        self._finished_items(items, done)
        return done

    def _ack_flows(
        self, items: list[tuple[int, int, str | None]], links: list[FlowLink | None]
    ) -> list[bool]:
        """``ack_many`` of a batch that holds jobs of chains or groups: the plain jobs in
        one transaction, the others in one more (``complete_steps``)."""
        plain, steps = self._split_steps(items, links)
        done = [False] * len(items)
        if plain:
            oks = self._backend.complete_many([items[i] for i in plain])
            for i, ok in zip(plain, oks, strict=True):
                done[i] = ok
        oks = self._backend.complete_steps([step for _, step in steps])
        for (i, _), ok in zip(steps, oks, strict=True):
            done[i] = ok
        self._woken_by(links)
        return done

    def _start_flow(
        self, flow: NewFlow, jobs: list[NewJob], conn: Any = None
    ) -> list[EnqueueResult]:
        """Stores a chain or group and enqueues its first jobs (``leaseq.flows``), in the
        caller's transaction with ``conn`` (or ``default_conn``'s)."""
        fresh = self._fresh_in(flow.queues(jobs))
        results: list[EnqueueResult] = self._backend.start_flow(
            flow, jobs, self._capped_in(jobs), self._caller(conn), fresh)
        if fresh:
            self._counted.update(fresh)
        _wakeup.notify(self._wake_key, sorted({job.queue for job in jobs}))
        return self._bind(results)

    def _flow_state(self, flow_id: str) -> FlowState | None:
        """A chain or group as stored (``leaseq.flows``)."""
        return self._backend.get_flow(flow_id)

    def heartbeat_many(
        self, jobs: Iterable[Job], *, extend: float | None = None
    ) -> list[datetime | LeaseLost | JobCancelled | TouchLimitExceeded]:
        """``heartbeat`` for many jobs in one transaction. Per job: the new
        ``lease_until``, or the ``LeaseLost``/``JobCancelled``/``TouchLimitExceeded`` it
        would have raised (returned, not raised)."""
        held, items = self._renewals(jobs, extend)
        return self._lease_states(held, self._backend.renew_many(items)) if items else []

    def nack(
        self,
        job: Job,
        error: object = None,
        *,
        delay: float | timedelta | None = None,
        backoff: Backoff | None = None,
    ) -> JobState:
        """Record a failed attempt. Retries after ``delay`` seconds, or after the
        ``backoff`` for this attempt (default: the queue's backoff settings, else the
        client's); goes dead when attempts are used up. Returns the job's new state:
        ``"available"``, ``"scheduled"`` (a delay), ``"dead"``, or ``"cancelled"`` when a
        cancel was requested.

        ``error`` is kept with the job (``JobInfo.error`` as text, ``JobInfo.error_detail``
        as a JSON object): a dict as given (it must encode as JSON), an exception as
        ``{"type", "message", "traceback"}`` (text ``"Type: message"``), a string as
        ``{"message"}``.

        Safe to repeat after ``OutcomeUnknown`` (its reply lost): called again with the
        same ``job``, a nack that did commit is not made twice; the repeat returns the
        state the first call returned (not the job's state now) and changes nothing,
        whatever its ``error`` and ``delay``. That holds while this lease is the job's
        last one to have ended, a later holder's lease still running included (design
        §62). Once a later lease has ended too (acked, nacked, released, buried or
        expired), or for a job this lease ended otherwise, it raises ``LeaseLost``."""
        self._fresh_configs()
        job_id, token = self._held(job)
        text, detail = self._error(error)
        state = self._backend.fail(job_id, token, text, self._retry_delay(job, delay, backoff),
                                   detail)
        self._finished_states((job_id,), (state,))
        return state

    def nack_many(
        self, items: Iterable[Job | tuple[Job, object]], *, backoff: Backoff | None = None
    ) -> list[bool]:
        """``nack`` for many held jobs in one transaction: each a ``Job`` or a
        ``(job, error)`` pair, retried after its backoff or dead when its attempts are
        used up. Fenced per job: True where the failure was recorded, False where the
        lease was lost (that job is left unchanged).

        Safe to repeat after ``OutcomeUnknown``, as ``nack``: a job whose nack did commit
        is True again and unchanged, while its lease is the job's last ended one. A job
        listed twice is failed once (True for both)."""
        self._fresh_configs()
        failures = self._failures(items, backoff)
        states = self._backend.fail_many(failures) if failures else []
        self._finished_states([item[0] for item in failures], states)
        return [state is not None for state in states]

    def _due_now(self, queues: str | Sequence[str]) -> bool:
        """``Backend.due_now``: what keeps a burst worker running."""
        return self._backend.due_now(v.queue_names(queues))

    def _schema_versions(self) -> tuple[int, int] | None:
        """``Backend.schema_versions``: what the worker checks at start."""
        return self._backend.schema_versions()

    def release(
        self, job: Job, *, delay: float | timedelta = 0, priority: int | None = None,
        error: object = None,
    ) -> JobState:
        """Give the job back without counting a failure (the attempt is returned too),
        optionally with a new ``priority``. Returns the job's new state: ``"available"``,
        ``"scheduled"`` (a delay), or ``"cancelled"`` when a cancel was requested.

        ``error`` is an optional note on why, stored as ``nack``'s ``error`` is (text, a
        dict, or an exception; read back as ``JobInfo.error`` and ``error_detail``); None
        keeps the job's last error. The release still is no failure: ``failed_at`` and
        the attempts are as without it.

        Safe to repeat after ``OutcomeUnknown``: called again with the same ``job``, a
        release that did commit returns the state it returned and changes nothing
        (whatever the repeat's arguments), while this lease is the job's last ended one,
        another worker's lease on the job running meanwhile included; once a later lease
        has ended too, or for a job this lease ended otherwise, ``LeaseLost``."""
        job_id, token = self._held(job)
        text, detail = self._error(error)
        state = self._backend.release(job_id, token, self._retry_delay(job, delay, None),
                                      self._priority(priority), text, detail)
        self._finished_states((job_id,), (state,))
        return state

    def snooze(
        self, job: Job, delay: float | timedelta, *, scope: SnoozeScope = "job"
    ) -> JobState:
        """Put the held job back for ``delay`` seconds without using an attempt: what a
        handler's ``raise leaseq.RetryAfter(delay, scope=...)`` records. Counts in
        ``snoozes`` (not ``releases``, and no failure); past the queue's ``max_snoozes``
        the job goes dead instead. ``scope="queue"`` also pauses the job's queue until
        then (database clock), in the same write: only ever extending a pause in force,
        never lifting an indefinite one. Returns the job's new state (``scheduled``,
        ``available`` for 0 s, ``dead``, or ``cancelled`` when a cancel was requested).

        Safe to repeat after ``OutcomeUnknown``, as ``release``: called again with the
        same ``job``, a snooze that did commit returns the state it returned and changes
        nothing more (no second snooze counted, no pause moved), while this lease is the
        job's last ended one.

        Raises:
            LeaseLost: The lease is not held any more (and this is no repeat); nothing
                changed (the queue is not paused either).
            InvalidArgument: A bad ``delay`` or ``scope`` (``"partition"`` waits for
                partitions).
        """
        job_id, token = self._held(job)
        scope = self._snooze_scope(scope)
        state = self._backend.snooze(job_id, token, self._retry_delay(job, delay, None), scope)
        self._finished_states((job_id,), (state,))
        return state

    def bury(self, job: Job, *, reason: str | None = None, priority: int | None = None) -> None:
        """Move the held job to the dead state, for a human to look at, optionally with a
        new ``priority`` (kept when it is kicked).

        Safe to repeat after ``OutcomeUnknown``: called again with the same ``job``, a
        bury that did commit returns None and changes nothing, while this lease is the
        job's last ended one (a kick and a later claim do not change that; the end of the
        later lease does); then, or for a job this lease ended otherwise, ``LeaseLost``."""
        job_id, token = self._held(job)
        self._backend.bury(job_id, token, v.error_text(reason), self._priority(priority))
        _results.finished(self._wake_key, (job_id,))

    def kick(self, queue: str, *, limit: int = 100) -> int:
        """Make up to ``limit`` dead jobs of ``queue`` available again, each with a fresh
        round of attempts: highest priority first, then oldest (lowest id) first, the
        order ``peek(queue, "dead")`` lists them in. Returns how many."""
        return self._backend.kick(v.queue_name(queue), self._limit(limit))

    def retry(self, job_id: int) -> None:
        """Make a dead or scheduled job available now."""
        self._backend.retry(self._job_id(job_id))

    def discard(self, job_id: int, *, reason: str | None = None) -> None:
        """Move a dead, scheduled or available job to history as discarded."""
        job_id = self._job_id(job_id)
        self._backend.discard(job_id, v.error_text(reason))
        _results.finished(self._wake_key, (job_id,))

    def cancel(self, job_id: int) -> JobState:
        """Cancel a job that has not finished. Waiting or dead jobs go to history as
        cancelled; a running job is flagged and its holder learns at its next heartbeat.
        Returns the state after the call (``running`` while the flag waits)."""
        job_id = self._job_id(job_id)
        state = self._backend.cancel(job_id)
        self._finished_states((job_id,), (state,))
        return state

    def get(self, job_id: int) -> JobInfo:
        """The job with its state, counters and times, live or in history. Raises
        ``JobNotFound``."""
        return self._backend.get(self._job_id(job_id))

    def wait(self, job_id: int, timeout: float | None = None) -> Any:
        """Block until the job has finished and return its result: the JSON value stored
        by ``ack`` (a task's return value; ``Task.decode_result`` rebuilds a typed one).

        Woken by push where the backend has it (PostgreSQL NOTIFY, Redis pub/sub, a
        SQLite commit, any finish in this process), else by polling every 5 ms at
        first, backing off to 0.5 s. Every waiter of a process on one database shares
        one listener connection (docs/results.md). ``close()`` from another thread ends
        the wait with ``ClientClosed``.

        Args:
            job_id: The job's id (``EnqueueResult.id``).
            timeout: Seconds to wait at most; None (the default) waits for ever.

        Raises:
            JobFailed: The job went dead, or was discarded or cancelled; ``.error``
                holds its last error.
            TimeoutError: ``timeout`` seconds passed before it finished.
            JobNotFound: No job has this id (or its history was pruned).
        """
        return _results.wait(self.get, self._results_hub(), self._job_id(job_id),
                             _results.check_timeout(timeout), self._waiting)

    def result(self, job_id: int) -> Any:
        """The stored result of a completed job, without waiting.

        Raises:
            ResultNotReady: The job has not finished (scheduled, available, running).
            JobFailed: It went dead, or was discarded or cancelled.
            JobNotFound: No job has this id (or its history was pruned).
        """
        return _results.outcome(self.get(job_id))

    def peek(self, queue: str, state: str = "available", limit: int = 10) -> list[JobInfo]:
        """Look without claiming: ``available``, the jobs a dequeue would take next, in
        claim order; ``scheduled``, the jobs not yet due, soonest first; ``dead``, the
        dead jobs in the order ``kick`` takes them (highest priority first, then oldest
        first)."""
        return self._backend.peek(*self._peeking(queue, state, limit))

    def priority_counts(self, queue: str) -> dict[int, int]:
        """``{priority: n}``: how many jobs of ``queue`` are available (due now) at each
        priority, highest priority first; priorities without such jobs are left out.
        Scheduled, running and dead jobs are not counted; a paused queue's are."""
        return self._backend.priority_counts(v.queue_name(queue))

    def stats(self) -> dict[str, QueueStats]:
        """Counts per queue: available, scheduled, running, dead, completed, cancelled,
        discarded (and ``failed``), whether it is paused, and the age of its oldest due
        job."""
        return self._backend.stats()

    def server_stats(self) -> ServerStats:
        """Totals over every queue, with the backend's name, its server's version and the
        age of the oldest transaction open on the server (``oldest_transaction_age``;
        None where the backend has none, or when the user may not see it)."""
        stats, version = self._backend.stats(), self._backend.server_version()
        try:
            age = self._backend.oldest_transaction_age()
        except BackendError as exc:
            age = self._unseen(exc)
        return self._totals(stats, self.backend, version, age)

    def oldest_transaction_age(self) -> float | None:
        """Seconds the oldest transaction open on the database server has been open (0.0
        when none is): PostgreSQL's oldest ``xact_start`` of a client session on this
        database (``pg_stat_activity``), MariaDB/MySQL's oldest ``trx_started``
        (``information_schema.INNODB_TRX``, which needs the PROCESS privilege). None on
        SQLite, Redis and memory, which keep no old row versions for a reader. A
        transaction held open for minutes keeps every row deleted since it began:
        claims slow down and the tables bloat (docs/operations.md has the alert)."""
        return self._backend.oldest_transaction_age()

    def jobs(
        self,
        queue: str | None = None,
        *,
        state: JobState | None = None,
        limit: int = 100,
        after: int = 0,
        kind: str | None = None,
        unique_key: str | None = None,
        tag: str | None = None,
    ) -> list[JobInfo]:
        """List jobs, live and historical, in id order: those with id > ``after``,
        optionally of one queue, one state, one ``kind`` (task name), one
        ``unique_key`` and one ``tag`` (a job carrying that tag among its ``tags``):
        exact matches; filters combine. Page with ``after=<last id seen>``.

        A filter other than queue and state is checked row by row along the id order
        (``tag`` too, on every backend): a page costs the rows walked to fill it, so a
        rare tag in a large table reads many rows (docs/queue-settings.md, "Tags")."""
        return self._backend.list_jobs(
            *self._listing(queue, state, limit, after, kind, unique_key, tag)
        )

    def configure_queue(
        self,
        name: str,
        *,
        max_attempts: int | Keep | None = KEEP,
        base_backoff: float | timedelta | Keep | None = KEEP,
        max_backoff: float | timedelta | Keep | None = KEEP,
        jitter: float | Keep | None = KEEP,
        default_lease: float | timedelta | Keep | None = KEEP,
        max_lease: float | timedelta | Keep | None = KEEP,
        max_jobs: int | Keep | None = KEEP,
        max_touches: int | Keep | None = KEEP,
        max_touch_duration: float | timedelta | Keep | None = KEEP,
        min_touch_interval: float | timedelta | Keep | None = KEEP,
        dead_retention: float | timedelta | Keep | None = KEEP,
        concurrency_limit: int | Keep | None = KEEP,
        rate_per_sec: float | Keep | None = KEEP,
        rate_burst: int | Keep | None = KEEP,
        max_snoozes: int | Keep | None = KEEP,
    ) -> QueueConfig:
        """Store settings of queue ``name`` in the database, for every client and worker
        (see ``QueueConfig`` for each). Only the arguments given change; None resets one
        to its default. Other clients apply the change within ``CONFIG_TTL`` (2 s) for
        enqueue defaults, backoff and ``max_jobs``; leases and touch limits are read by
        the database at each claim and heartbeat. ``concurrency_limit`` and
        ``rate_per_sec``/``rate_burst`` are enforced by every claim on every host
        (docs/flow-control.md); a client that has not re-read settings since a queue got
        its first limit claims nothing from it until it does. ``max_snoozes`` is read by
        each snooze (``RetryAfter``) as it is written. Returns the settings as stored."""
        given = dict(locals())
        queue = v.queue_name(given.pop("name"))
        changes = self._setting_changes(self._backend_config(queue),
                                        {k: given[k] for k in QUEUE_SETTINGS})
        config = self._backend.configure_queue(queue, changes)
        self._forget_configs()
        return config

    def _backend_config(self, queue: str) -> QueueConfig:
        return self._backend.queue_configs().get(queue) or QueueConfig(queue)

    def queue_config(self, name: str) -> QueueConfig:
        """The stored settings of queue ``name`` (all None when it has none), read now."""
        return self._backend_config(v.queue_name(name))

    def queue_configs(self) -> dict[str, QueueConfig]:
        """The stored settings of every queue that has any (or was ever paused), read
        now."""
        return self._backend.queue_configs()

    def configure_server(self, *, max_queues: int | Keep | None = KEEP) -> ServerConfig:
        """Store settings of the whole database (this table prefix), shared by every
        client and worker (see ``ServerConfig``). Only the arguments given change; None
        resets one (no cap). ``max_queues=N``: an enqueue that would create queue N + 1
        raises ``TooManyQueues`` and writes nothing; setting it counts the queues the
        database holds now. Other clients apply it within ``CONFIG_TTL`` (2 s). Returns
        the settings as stored."""
        config = self._backend.configure_server(self._server_changes(max_queues))
        self._counted.clear()
        self._forget_configs()
        return config

    def server_config(self) -> ServerConfig:
        """The stored server settings, read now, with the number of queues counted
        while ``max_queues`` is set."""
        return self._backend.server_config()

    def next_due(self, queues: str | Sequence[str]) -> float | None:
        """Seconds until a job of ``queues`` may next become claimable by the database's
        clock: until the earliest scheduled job is due, or, in a queue with
        ``rate_per_sec``, until its next token. 0 when one could be claimed now; None when
        nothing is waiting (or only ``concurrency_limit`` holds due jobs back). Paused
        queues are left out. Workers sleep this long when idle."""
        return self._backend.next_due(v.queue_names(queues))

    def pause(self, queue: str, *, until: datetime | float | timedelta | None = None) -> None:
        """Stop handing out jobs of ``queue`` (to every worker and ``dequeue``) until
        ``resume``, or with ``until`` (an aware datetime, or seconds from now) until
        then by the database's clock, when the pause ends by itself. Enqueueing still
        works. This replaces any pause in force (a handler's ``RetryAfter`` pause too);
        ``stats()`` shows the end as ``paused_until``.

        Raises:
            InvalidArgument: ``until`` is a naive datetime, a time that has passed, or
                not a positive number of seconds.
        """
        end = self._pause_end(until)
        self._backend.set_paused(v.queue_name(queue), True, end)

    def resume(self, queue: str) -> None:
        """Hand out jobs of a paused queue again, ending its pause whatever the kind:
        indefinite, timed, or a handler's ``RetryAfter(..., scope="queue")``."""
        self._backend.set_paused(v.queue_name(queue), False)

    def paused(self) -> list[str]:
        """Names of the queues paused now (indefinitely or until a time to come)."""
        return self._backend.paused()

    def reclaim(self, *, limit: int = 1000) -> int:
        """Return up to ``limit`` jobs whose lease expired to the queue (or to dead when
        their attempts are used up), and discard dead jobs older than their queue's
        ``dead_retention``. Returns how many jobs moved."""
        moved = self._backend.reclaim(self._limit(limit))
        if moved:
            _results.finished(self._wake_key, None)  # some may have gone dead
        return moved

    def prune(self, *, older_than: timedelta | float) -> int:
        """Delete history rows that finished more than ``older_than`` ago."""
        return self._backend.prune(self._age(older_than))

    def close(self) -> None:
        """Close the connection pool. Every later call raises ``ClientClosed``, and a
        blocking ``dequeue`` waiting in another thread ends with it."""
        if self._closed:
            return
        backend, self._closed = self._backend, True
        self._backend = Closed(backend.name)
        for waiter in list(self._waiting):
            waiter.set()
        backend.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str, **settings: Any) -> Queue:
    """A ``Queue`` for ``url``; keyword arguments are ``Settings`` fields.

    URLs: ``sqlite:///jobs.db``, ``postgresql://user@host/db`` (behind a transaction-mode
    pooler add ``?pgbouncer=true``, and ``listen_url=`` for push wake-ups: see
    ``Settings.listen_url``), ``mysql://user@host/db``,
    ``redis://host:6379/0``, ``redis+cluster://host:7000[,host2:7000]`` (Redis Cluster),
    ``redis+sentinel://host:26379[,host2:26379]/service[/db]`` (Redis Sentinel),
    ``memory://`` (private) or ``memory://name`` (shared by every client in the process
    that names it).
    """
    return Queue(url, Settings(**settings))


def connect_async(url: str, **settings: Any) -> AsyncQueue:
    """An ``AsyncQueue`` for ``url``; see ``connect``."""
    return AsyncQueue(url, Settings(**settings))
