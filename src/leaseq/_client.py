"""``Queue`` and ``AsyncQueue``: the clients. Same method names, same arguments.

All checking and encoding happens in ``_Shared`` (no I/O), so the two clients differ only
in ``await``; ``tests/test_public_api.py`` holds their signatures equal.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from leaseq import _wakeup
from leaseq._core import validate as v
from leaseq._core.backoff import Backoff
from leaseq._core.job import (
    LIVE_STATES,
    TERMINAL_STATES,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueStats,
)
from leaseq._core.settings import Settings
from leaseq.backends import create_backend
from leaseq.backends.base import AsyncBackend, Backend, NewJob
from leaseq.errors import InvalidArgument, JobCancelled, LeaseLost

_ENQUEUE_KEYS = frozenset(
    {"queue", "payload", "kind", "priority", "delay", "run_at", "unique_key", "max_attempts"}
)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class _Shared:
    """Validation, encoding and defaults shared by both clients."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self._wake_key = _wakeup.key(url, settings.table_prefix)
        self._last_reclaim = float("-inf")
        self._reclaim_lock = threading.Lock()

    def _new_job(
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
    ) -> NewJob:
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        if run_at is not None and delay:
            raise InvalidArgument("give delay or run_at, not both")
        return NewJob(
            queue=v.queue_name(queue),
            payload=v.encode(payload, self.settings.max_payload_bytes),
            kind=v.optional_text("kind", kind, v.MAX_KIND),
            priority=v.integer("priority", priority, v.INT32[0]),
            delay=v.seconds("delay", delay),
            run_at=None if run_at is None else v.aware_utc("run_at", run_at),
            unique_key=v.optional_text("unique_key", unique_key, v.MAX_UNIQUE_KEY),
            max_attempts=v.integer(
                "max_attempts",
                self.settings.max_attempts if max_attempts is None else max_attempts,
                1,
                1_000_000,
            ),
        )

    def _new_jobs(self, items: Iterable[Mapping[str, Any]]) -> list[NewJob]:
        jobs = []
        for n, item in enumerate(items):
            # type() first: isinstance against the Mapping ABC costs more than the rest.
            if not (type(item) is dict or isinstance(item, Mapping)) or "queue" not in item:
                raise InvalidArgument(
                    f"enqueue_many item {n} must be a mapping with at least 'queue', got "
                    f"{item!r:.80}"
                )
            if not item.keys() <= _ENQUEUE_KEYS:
                unknown = sorted(set(item) - _ENQUEUE_KEYS)
                raise InvalidArgument(f"enqueue_many item {n} has unknown keys {unknown}")
            jobs.append(self._new_job(**item))
        return jobs

    def _claim_args(
        self, queues: str | Sequence[str], worker_id: str | None, lease: float | None, limit: int
    ) -> tuple[list[str], str, float, int]:
        return (
            v.queue_names(queues),
            v.optional_text("worker_id", worker_id, v.MAX_WORKER_ID) or default_worker_id(),
            v.seconds("lease", self.settings.lease if lease is None else lease, positive=True),
            v.integer("limit", limit, 1, 10_000),
        )

    def _reclaim_due(self) -> bool:
        """True at most once per ``reclaim_interval``: dequeue then reclaims inline."""
        interval = self.settings.reclaim_interval
        if interval is None:
            return False
        with self._reclaim_lock:
            now = time.monotonic()
            if now - self._last_reclaim < interval:
                return False
            self._last_reclaim = now
            return True

    @staticmethod
    def _held(job: object) -> tuple[int, int]:
        if not isinstance(job, Job):
            raise InvalidArgument(f"expected a leaseq.Job from dequeue, got {type(job).__name__}")
        return job.id, job.lease_token

    def _retry_delay(
        self, job: Job, delay: float | timedelta | None, backoff: Backoff | None
    ) -> float:
        if delay is None:
            return (backoff or self.settings.backoff).delay(job.attempts)
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        return v.seconds("delay", delay)

    @staticmethod
    def _error(error: object) -> str | None:
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        return v.error_text(error)

    def _result(self, result: object) -> str | None:
        if result is None:
            return None
        return v.encode(result, self.settings.max_payload_bytes, "result")

    @staticmethod
    def _limit(limit: object) -> int:
        return v.integer("limit", limit, 1, 10**9)

    @staticmethod
    def _job_id(job_id: object) -> int:
        return v.integer("job_id", job_id, 1, 2**63 - 1)

    def _batch_items(
        self, jobs: Iterable[Job | tuple[Job, Any]]
    ) -> list[tuple[int, int, str | None]]:
        items = []
        for entry in jobs:
            job, result = entry if isinstance(entry, tuple) else (entry, None)
            items.append((*self._held(job), self._result(result)))
        return items

    def _renewals(self, jobs: Iterable[Job], extend: float | None
                  ) -> tuple[list[Job], list[tuple[int, int, float]]]:
        held = list(jobs)
        items = []
        for job in held:
            job_id, token = self._held(job)
            seconds = v.seconds("extend", job.lease if extend is None else extend, positive=True)
            items.append((job_id, token, seconds))
        return held, items

    @staticmethod
    def _lease_states(
        jobs: list[Job], raw: list[tuple[datetime, bool] | None]
    ) -> list[datetime | LeaseLost | JobCancelled]:
        out: list[datetime | LeaseLost | JobCancelled] = []
        for job, status in zip(jobs, raw, strict=True):
            if status is None:
                out.append(LeaseLost(f"lease {job.lease_token} on job {job.id} is no longer valid"))
            elif status[1]:
                out.append(JobCancelled(f"job {job.id} was cancelled"))
            else:
                out.append(status[0])
        return out

    @staticmethod
    def _listing(
        queue: str | None, state: object, limit: object, after: object
    ) -> tuple[str | None, JobState | None, int, int]:
        if state is not None and state not in (*LIVE_STATES, *TERMINAL_STATES):
            raise InvalidArgument(
                f"state must be one of {', '.join((*LIVE_STATES, *TERMINAL_STATES))}, "
                f"got {state!r}"
            )
        return (
            None if queue is None else v.queue_name(queue),
            state,
            v.integer("limit", limit, 1, 10_000),
            v.integer("after", after, 0, 2**63 - 1),
        )

    @staticmethod
    def _age(older_than: timedelta | float) -> float:
        if isinstance(older_than, timedelta):
            older_than = older_than.total_seconds()
        return v.seconds("older_than", older_than)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url.split('@')[-1]!r}>"


class Queue(_Shared):
    """A thread-safe client of one leaseq database. Create it with ``leaseq.connect``."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        super().__init__(url, settings)
        self._backend: Backend = create_backend(url, settings, use_async=False)

    @property
    def backend(self) -> str:
        """The backend's name: memory, sqlite, postgres, mysql or redis."""
        return self._backend.name

    def migrate(self) -> None:
        """Create or upgrade leaseq's tables. Idempotent; safe when processes race."""
        self._backend.migrate()

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
        conn: Any = None,
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
            max_attempts: Attempts before the job goes dead. Defaults to the setting (5).
            conn: Your own DB-API connection (psycopg, PyMySQL or sqlite3): the job is
                written in your transaction and exists only if you commit.

        Returns:
            The job's id and whether this call created it.
        """
        job = self._new_job(queue, payload, kind=kind, priority=priority, delay=delay,
                            run_at=run_at, unique_key=unique_key, max_attempts=max_attempts)
        result = self._backend.enqueue([job], conn)[0]
        _wakeup.notify(self._wake_key, [job.queue])
        return result

    def enqueue_many(
        self, items: Iterable[Mapping[str, Any]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """Add many jobs in one transaction. Each item holds ``enqueue``'s arguments
        (``queue`` required). All are checked first: one bad item writes nothing."""
        jobs = self._new_jobs(items)
        if not jobs:
            return []
        results = self._backend.enqueue(jobs, conn)
        _wakeup.notify(self._wake_key, sorted({job.queue for job in jobs}))
        return results

    def dequeue(
        self,
        queues: str | Sequence[str],
        *,
        worker_id: str | None = None,
        lease: float | None = None,
        limit: int = 1,
    ) -> list[Job]:
        """Lease up to ``limit`` due jobs from ``queues``: higher priority first, then
        earlier ``available_at``, then lower id. Each gets a fresh ``lease_token`` and
        counts an attempt. Also reclaims expired leases, at most once per
        ``reclaim_interval``."""
        names, worker, lease_s, n = self._claim_args(queues, worker_id, lease, limit)
        if self._reclaim_due():
            self._backend.reclaim(1000)
        return self._backend.claim(names, worker, lease_s, n)

    def heartbeat(self, job: Job, *, extend: float | None = None) -> datetime:
        """Extend the lease by ``extend`` seconds (default: the job's lease) from now.

        Returns:
            The new ``lease_until``.

        Raises:
            LeaseLost: The lease is stale; nothing changed.
            JobCancelled: The job was cancelled; stop and ``release`` or ``nack`` it.
        """
        job_id, token = self._held(job)
        seconds = v.seconds("extend", job.lease if extend is None else extend, positive=True)
        return self._backend.renew(job_id, token, seconds)

    def ack(self, job: Job, result: Any = None, *, conn: Any = None) -> None:
        """Record the job completed, with ``result`` (JSON) in history.

        With ``conn``, the completion commits in your transaction with your side effects;
        a stale lease raises ``LeaseLost`` so you can roll them back together.
        """
        job_id, token = self._held(job)
        text = self._result(result)
        self._backend.complete(job_id, token, text, conn)

    def ack_many(self, jobs: Iterable[Job | tuple[Job, Any]]) -> list[bool]:
        """Record many held jobs completed in one transaction: each a ``Job`` or a
        ``(job, result)`` pair. Fenced per job: True where it completed, False where its
        lease was lost (that job is left unchanged)."""
        items = self._batch_items(jobs)
        return self._backend.complete_many(items) if items else []

    def heartbeat_many(
        self, jobs: Iterable[Job], *, extend: float | None = None
    ) -> list[datetime | LeaseLost | JobCancelled]:
        """``heartbeat`` for many jobs in one transaction. Per job: the new
        ``lease_until``, or the ``LeaseLost``/``JobCancelled`` it would have raised
        (returned, not raised)."""
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
        ``backoff`` (default: the setting's) for this attempt; goes dead when attempts are
        used up. Returns the job's new state."""
        job_id, token = self._held(job)
        return self._backend.fail(job_id, token, self._error(error),
                                  self._retry_delay(job, delay, backoff))

    def release(self, job: Job, *, delay: float | timedelta = 0) -> JobState:
        """Give the job back without counting a failure (the attempt is returned too)."""
        job_id, token = self._held(job)
        return self._backend.release(job_id, token, self._retry_delay(job, delay, None))

    def bury(self, job: Job, *, reason: str | None = None) -> None:
        """Move the held job to the dead state, for a human to look at."""
        job_id, token = self._held(job)
        self._backend.bury(job_id, token, v.error_text(reason))

    def kick(self, queue: str, *, limit: int = 100) -> int:
        """Make up to ``limit`` dead jobs of ``queue`` available again, oldest first, each
        with a fresh round of attempts. Returns how many."""
        return self._backend.kick(v.queue_name(queue), self._limit(limit))

    def retry(self, job_id: int) -> None:
        """Make a dead or scheduled job available now."""
        self._backend.retry(self._job_id(job_id))

    def discard(self, job_id: int, *, reason: str | None = None) -> None:
        """Move a dead, scheduled or available job to history as discarded."""
        self._backend.discard(self._job_id(job_id), v.error_text(reason))

    def cancel(self, job_id: int) -> JobState:
        """Cancel a job that has not finished. Waiting or dead jobs go to history as
        cancelled; a running job is flagged and its holder learns at its next heartbeat.
        Returns the state after the call (``running`` while the flag waits)."""
        return self._backend.cancel(self._job_id(job_id))

    def get(self, job_id: int) -> JobInfo:
        """The job with its state, live or in history. Raises ``JobNotFound``."""
        return self._backend.get(self._job_id(job_id))

    def stats(self) -> dict[str, QueueStats]:
        """Counts per queue: available, scheduled, running, dead, completed, cancelled,
        discarded (and ``failed``)."""
        return self._backend.stats()

    def jobs(
        self,
        queue: str | None = None,
        *,
        state: JobState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[JobInfo]:
        """List jobs, live and historical, in id order: those with id > ``after``,
        optionally of one queue and one state. Page with ``after=<last id seen>``."""
        return self._backend.list_jobs(*self._listing(queue, state, limit, after))

    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue`` (to every worker and ``dequeue``) until
        ``resume``. Enqueueing still works."""
        self._backend.set_paused(v.queue_name(queue), True)

    def resume(self, queue: str) -> None:
        """Hand out jobs of a paused queue again."""
        self._backend.set_paused(v.queue_name(queue), False)

    def paused(self) -> list[str]:
        """Names of the paused queues."""
        return self._backend.paused()

    def reclaim(self, *, limit: int = 1000) -> int:
        """Return up to ``limit`` jobs whose lease expired to the queue (or to dead when
        their attempts are used up). Returns how many."""
        return self._backend.reclaim(self._limit(limit))

    def prune(self, *, older_than: timedelta | float) -> int:
        """Delete history rows that finished more than ``older_than`` ago."""
        return self._backend.prune(self._age(older_than))

    def close(self) -> None:
        """Close the connection pool."""
        self._backend.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncQueue(_Shared):
    """The asyncio client: ``Queue``'s methods, awaited. Create it with
    ``leaseq.connect_async``."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        super().__init__(url, settings)
        self._backend: AsyncBackend = create_backend(url, settings, use_async=True)

    @property
    def backend(self) -> str:
        """The backend's name: memory, sqlite, postgres, mysql or redis."""
        return self._backend.name

    async def migrate(self) -> None:
        """See ``Queue.migrate``."""
        await self._backend.migrate()

    async def enqueue(
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
        conn: Any = None,
    ) -> EnqueueResult:
        """See ``Queue.enqueue``."""
        job = self._new_job(queue, payload, kind=kind, priority=priority, delay=delay,
                            run_at=run_at, unique_key=unique_key, max_attempts=max_attempts)
        result = (await self._backend.enqueue([job], conn))[0]
        _wakeup.notify(self._wake_key, [job.queue])
        return result

    async def enqueue_many(
        self, items: Iterable[Mapping[str, Any]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """See ``Queue.enqueue_many``."""
        jobs = self._new_jobs(items)
        if not jobs:
            return []
        results = await self._backend.enqueue(jobs, conn)
        _wakeup.notify(self._wake_key, sorted({job.queue for job in jobs}))
        return results

    async def dequeue(
        self,
        queues: str | Sequence[str],
        *,
        worker_id: str | None = None,
        lease: float | None = None,
        limit: int = 1,
    ) -> list[Job]:
        """See ``Queue.dequeue``."""
        names, worker, lease_s, n = self._claim_args(queues, worker_id, lease, limit)
        if self._reclaim_due():
            await self._backend.reclaim(1000)
        return await self._backend.claim(names, worker, lease_s, n)

    async def heartbeat(self, job: Job, *, extend: float | None = None) -> datetime:
        """See ``Queue.heartbeat``."""
        job_id, token = self._held(job)
        seconds = v.seconds("extend", job.lease if extend is None else extend, positive=True)
        return await self._backend.renew(job_id, token, seconds)

    async def ack(self, job: Job, result: Any = None, *, conn: Any = None) -> None:
        """See ``Queue.ack``."""
        job_id, token = self._held(job)
        text = self._result(result)
        await self._backend.complete(job_id, token, text, conn)

    async def ack_many(self, jobs: Iterable[Job | tuple[Job, Any]]) -> list[bool]:
        """See ``Queue.ack_many``."""
        items = self._batch_items(jobs)
        return await self._backend.complete_many(items) if items else []

    async def heartbeat_many(
        self, jobs: Iterable[Job], *, extend: float | None = None
    ) -> list[datetime | LeaseLost | JobCancelled]:
        """See ``Queue.heartbeat_many``."""
        held, items = self._renewals(jobs, extend)
        return self._lease_states(held, await self._backend.renew_many(items)) if items else []

    async def nack(
        self,
        job: Job,
        error: object = None,
        *,
        delay: float | timedelta | None = None,
        backoff: Backoff | None = None,
    ) -> JobState:
        """See ``Queue.nack``."""
        job_id, token = self._held(job)
        return await self._backend.fail(job_id, token, self._error(error),
                                        self._retry_delay(job, delay, backoff))

    async def release(self, job: Job, *, delay: float | timedelta = 0) -> JobState:
        """See ``Queue.release``."""
        job_id, token = self._held(job)
        return await self._backend.release(job_id, token, self._retry_delay(job, delay, None))

    async def bury(self, job: Job, *, reason: str | None = None) -> None:
        """See ``Queue.bury``."""
        job_id, token = self._held(job)
        await self._backend.bury(job_id, token, v.error_text(reason))

    async def kick(self, queue: str, *, limit: int = 100) -> int:
        """See ``Queue.kick``."""
        return await self._backend.kick(v.queue_name(queue), self._limit(limit))

    async def retry(self, job_id: int) -> None:
        """See ``Queue.retry``."""
        await self._backend.retry(self._job_id(job_id))

    async def discard(self, job_id: int, *, reason: str | None = None) -> None:
        """See ``Queue.discard``."""
        await self._backend.discard(self._job_id(job_id), v.error_text(reason))

    async def cancel(self, job_id: int) -> JobState:
        """See ``Queue.cancel``."""
        return await self._backend.cancel(self._job_id(job_id))

    async def get(self, job_id: int) -> JobInfo:
        """See ``Queue.get``."""
        return await self._backend.get(self._job_id(job_id))

    async def stats(self) -> dict[str, QueueStats]:
        """See ``Queue.stats``."""
        return await self._backend.stats()

    async def jobs(
        self,
        queue: str | None = None,
        *,
        state: JobState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[JobInfo]:
        """See ``Queue.jobs``."""
        return await self._backend.list_jobs(*self._listing(queue, state, limit, after))

    async def pause(self, queue: str) -> None:
        """See ``Queue.pause``."""
        await self._backend.set_paused(v.queue_name(queue), True)

    async def resume(self, queue: str) -> None:
        """See ``Queue.resume``."""
        await self._backend.set_paused(v.queue_name(queue), False)

    async def paused(self) -> list[str]:
        """See ``Queue.paused``."""
        return await self._backend.paused()

    async def reclaim(self, *, limit: int = 1000) -> int:
        """See ``Queue.reclaim``."""
        return await self._backend.reclaim(self._limit(limit))

    async def prune(self, *, older_than: timedelta | float) -> int:
        """See ``Queue.prune``."""
        return await self._backend.prune(self._age(older_than))

    async def close(self) -> None:
        """Close the connection pool."""
        await self._backend.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def connect(url: str, **settings: Any) -> Queue:
    """A ``Queue`` for ``url``; keyword arguments are ``Settings`` fields.

    URLs: ``sqlite:///jobs.db``, ``postgresql://user@host/db``, ``mysql://user@host/db``,
    ``memory://`` (private) or ``memory://name`` (shared within the process).
    """
    return Queue(url, Settings(**settings))


def connect_async(url: str, **settings: Any) -> AsyncQueue:
    """An ``AsyncQueue`` for ``url``; see ``connect``."""
    return AsyncQueue(url, Settings(**settings))
