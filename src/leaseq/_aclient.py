"""``AsyncQueue``: the asyncio client, ``Queue``'s methods awaited (``_client.py`` has
``Queue``, ``connect`` and ``connect_async``). All checking and encoding happens in
``_shared.Shared`` (no I/O); ``tests/test_public_api.py`` holds the two clients'
signatures equal.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from leaseq import _results, _wakeup
from leaseq import tracing as _tracing
from leaseq._aio import wait_event
from leaseq._conn import acaller_connection
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
from leaseq._group import AsyncGroupCommit, grouped
from leaseq._shared import KEEP, POLL_CAP, POLL_FIRST, Closed, Keep, Shared, UniqueScope
from leaseq.backends import create_backend
from leaseq.backends.base import AsyncBackend, NewFlow, NewJob
from leaseq.errors import (
    BackendError,
    InvalidArgument,
    JobCancelled,
    LeaseLost,
    LeaseqError,
    NotReplicated,
    TouchLimitExceeded,
)
from leaseq.outcomes import SnoozeScope


class AsyncQueue(Shared):
    """The asyncio client: ``Queue``'s methods, awaited. Create it with
    ``leaseq.connect_async``."""

    def __init__(self, url: str, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        super().__init__(url, settings)
        self._backend: AsyncBackend = create_backend(url, settings, use_async=True)
        self._wakers: set[asyncio.Event] = set()
        self._result_waiter = _results.AsyncQueueWaiter(self)
        self._group = (AsyncGroupCommit(self._write) if grouped(self._caps, settings)
                       else None)

    @property
    def backend(self) -> str:
        """The backend's name: memory, sqlite, postgres, mysql or redis."""
        return self._backend.name

    async def _fresh_configs(self) -> None:
        if self._configs_stale():
            self._store_server(await self._backend.server_config())
            self._store_configs(await self._backend.queue_configs())

    async def migrate(self) -> list[str]:
        """See ``Queue.migrate``."""
        applied = await self._backend.migrate()
        self._forget_configs()
        return list(applied or [])

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
        lease: float | timedelta | None = None,
        unique_for: float | timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        conn: Any = None,
        unique_scope: UniqueScope = "queue",
        tags: Sequence[str] | None = None,
    ) -> EnqueueResult:
        """See ``Queue.enqueue``."""
        await self._fresh_configs()
        job = self._new_job(queue, payload, kind=kind, priority=priority, delay=delay,
                            run_at=run_at, unique_key=unique_key, max_attempts=max_attempts,
                            lease=lease, unique_for=unique_for, headers=headers,
                            unique_scope=unique_scope, tags=tags)
        conn = await self._caller(conn)
        if _tracing.on:
            return (await self._enqueue_traced([job], conn))[0]
        return (await self._enqueue_jobs([job], conn))[0]

    async def enqueue_many(
        self, items: Iterable[Mapping[str, Any]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """See ``Queue.enqueue_many``."""
        await self._fresh_configs()
        jobs = self._new_jobs(items)
        if not jobs:
            return []
        conn = await self._caller(conn)
        if _tracing.on:
            return await self._enqueue_traced(jobs, conn)
        return await self._write(jobs, conn)

    async def _caller(self, conn: Any) -> Any:
        """See ``Queue._caller``."""
        if conn is None and self.default_conn is not None:
            conn = self.default_conn()
        return None if conn is None else await acaller_connection(conn, self._caps)

    async def _enqueue_traced(self, jobs: list[NewJob], conn: Any) -> list[EnqueueResult]:
        """See ``Queue._enqueue_traced``."""
        with _tracing.producing(jobs) as span:
            results = await self._enqueue_jobs(span.jobs, conn)
            span.enqueued(results)
        return results

    async def _enqueue_jobs(self, jobs: list[NewJob], conn: Any) -> list[EnqueueResult]:
        """See ``Queue._enqueue_jobs``."""
        if self._group is not None and conn is None and len(jobs) == 1:
            return [await self._group.enqueue(jobs[0])]
        return await self._write(jobs, conn)

    async def _write(self, jobs: list[NewJob], conn: Any = None) -> list[EnqueueResult]:
        """See ``Queue._write``."""
        fresh = self._fresh_in(jobs)
        results = await self._backend.enqueue(jobs, conn, self._capped_in(jobs), fresh)
        if fresh:
            self._counted.update(fresh)
        _wakeup.notify(self._wake_key, sorted({job.queue for job in jobs}))
        return self._bind(results)

    async def dequeue(
        self,
        queues: str | Sequence[str],
        *,
        worker_id: str | None = None,
        lease: float | None = None,
        limit: int = 1,
        wait: float | timedelta = 0,
    ) -> list[Job]:
        """See ``Queue.dequeue``. A blocking dequeue is cancel-safe: cancelled while it
        waits, it has claimed nothing; cancelled during a claim, it gives back what the
        claim leased before re-raising."""
        names, worker, lease_s, n, wait_s = self._claim_args(queues, worker_id, lease, limit,
                                                              wait)
        if self._reclaim_due():
            with contextlib.suppress(NotReplicated):  # see Queue.dequeue
                await self._backend.reclaim(1000)
        await self._fresh_configs()  # which queues have limits
        if wait_s <= 0:
            return await self._claim(names, worker, lease_s, n)
        return await self._wait_for_jobs(names, worker, lease_s, n, time.monotonic() + wait_s)

    async def _claim(
        self, names: list[str], worker: str, lease: float | None, n: int
    ) -> list[Job]:
        """A claim, less the jobs that do not decode: those are buried
        (``Shared._undecodable``)."""
        try:
            jobs = await self._backend.claim(names, worker, lease, n, self.settings.lease,
                                             self._limited)
        except NotReplicated as exc:  # the primary leased exc.result: the same holds
            if isinstance(exc.result, list):
                exc.result = await self._runnable(exc.result)
            raise
        return await self._runnable(jobs)

    async def _runnable(self, jobs: list[Job]) -> list[Job]:
        """See ``Queue._runnable``."""
        bad = self._undecodable(jobs)
        if not bad:
            return jobs
        failures: dict[int, Exception] = {}
        for job_id, token, error, detail in bad:
            try:
                await self._backend.bury(job_id, token, error, None, detail)
            except NotReplicated:
                pass  # made on the primary, as the claim was
            except LeaseqError as exc:
                failures[job_id] = exc
        return self._without_buried(jobs, bad, failures)

    async def _wait_for_jobs(
        self, names: list[str], worker: str, lease: float | None, n: int, deadline: float
    ) -> list[Job]:
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        wanted = set(names)

        def wake(queues: Sequence[str]) -> None:
            if wanted.intersection(queues):
                loop.call_soon_threadsafe(woken.set)

        unsubscribe = _wakeup.subscribe(self._wake_key, wake)
        self._wakers.add(woken)
        listener = self._caps.listener
        url = None if listener is None else self._push_url()
        done = asyncio.Event()
        pushed = None if listener is None or url is None else asyncio.ensure_future(
            listener(url, self.settings.table_prefix, names, woken.set, done.is_set))
        pause = POLL_FIRST
        try:
            while True:
                jobs = await self._claim_or_give_back(names, worker, lease, n)
                left = deadline - time.monotonic()
                if jobs or left <= 0:
                    return jobs
                if not await wait_event(woken, min(pause, left)):
                    pause = min(pause * 2, POLL_CAP)
                woken.clear()
        finally:
            self._wakers.discard(woken)
            unsubscribe()
            if pushed is not None:
                # Told to stop as well as cancelled: on Python 3.11 a cancel can be lost
                # inside redis-py (design §27), and then the flag ends it at its next tick.
                done.set()
                pushed.cancel()
                await asyncio.gather(pushed, return_exceptions=True)

    async def _claim_or_give_back(
        self, names: list[str], worker: str, lease: float | None, n: int
    ) -> list[Job]:
        """A claim that, when the caller is cancelled while it runs, lets it finish and
        releases what it leased (attempts given back), so a cancelled wait strands
        nothing until its lease runs out."""
        await self._fresh_configs()
        claim = asyncio.ensure_future(self._claim(names, worker, lease, n))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            try:
                jobs = await claim
            except Exception:
                raise asyncio.CancelledError() from None
            for job in jobs:
                with contextlib.suppress(LeaseLost):
                    await self._backend.release(job.id, job.lease_token, 0.0, None)
            raise

    async def heartbeat(self, job: Job, *, extend: float | None = None) -> datetime:
        """See ``Queue.heartbeat``."""
        job_id, token = self._held(job)
        seconds = v.seconds("extend", job.lease if extend is None else extend, positive=True)
        return await self._backend.renew(job_id, token, seconds)

    async def ack(self, job: Job, result: Any = None, *, conn: Any = None) -> None:
        """See ``Queue.ack``."""
        job_id, token = self._held(job)
        text = self._result(result)
        link = _flow.link(job.headers)
        if link is not None:  # a step of a chain or group: its follow-up comes with it
            if conn is not None:
                raise InvalidArgument("a job of a chain or group cannot be acked in your "
                                      "transaction (conn=)")
            if not (await self._backend.complete_steps([(job_id, token, text, link)]))[0]:
                raise LeaseLost.stale(job_id, token)
            self._woken_by([link])
            _results.finished(self._wake_key, (job_id,))
            return
        await self._backend.complete(job_id, token, text, await self._caller(conn))
        _results.finished(self._wake_key, (job_id,))

    async def ack_many(self, jobs: Iterable[Job | tuple[Job, Any]]) -> list[bool]:
        """See ``Queue.ack_many``."""
        items, links = self._ack_items(jobs)
        if not items:
            return []
        done = (await self._backend.complete_many(items) if links is None
                else await self._ack_flows(items, links))
        self._finished_items(items, done)
        return done

    async def _ack_flows(
        self, items: list[tuple[int, int, str | None]], links: list[FlowLink | None]
    ) -> list[bool]:
        """See ``Queue._ack_flows``."""
        plain, steps = self._split_steps(items, links)
        done = [False] * len(items)
        if plain:
            oks = await self._backend.complete_many([items[i] for i in plain])
            for i, ok in zip(plain, oks, strict=True):
                done[i] = ok
        oks = await self._backend.complete_steps([step for _, step in steps])
        for (i, _), ok in zip(steps, oks, strict=True):
            done[i] = ok
        self._woken_by(links)
        return done

    async def _start_flow(
        self, flow: NewFlow, jobs: list[NewJob], conn: Any = None
    ) -> list[EnqueueResult]:
        """See ``Queue._start_flow``."""
        fresh = self._fresh_in(flow.queues(jobs))
        results: list[EnqueueResult] = await self._backend.start_flow(
            flow, jobs, self._capped_in(jobs), await self._caller(conn), fresh)
        if fresh:
            self._counted.update(fresh)
        _wakeup.notify(self._wake_key, sorted({job.queue for job in jobs}))
        return self._bind(results)

    async def _flow_state(self, flow_id: str) -> FlowState | None:
        """See ``Queue._flow_state``."""
        return await self._backend.get_flow(flow_id)

    async def heartbeat_many(
        self, jobs: Iterable[Job], *, extend: float | None = None
    ) -> list[datetime | LeaseLost | JobCancelled | TouchLimitExceeded]:
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
        await self._fresh_configs()
        job_id, token = self._held(job)
        text, detail = self._error(error)
        state = await self._backend.fail(job_id, token, text,
                                         self._retry_delay(job, delay, backoff), detail)
        self._finished_states((job_id,), (state,))
        return state

    async def nack_many(
        self, items: Iterable[Job | tuple[Job, object]], *, backoff: Backoff | None = None
    ) -> list[bool]:
        """See ``Queue.nack_many``."""
        await self._fresh_configs()
        failures = self._failures(items, backoff)
        states = await self._backend.fail_many(failures) if failures else []
        self._finished_states([item[0] for item in failures], states)
        return [state is not None for state in states]

    async def _due_now(self, queues: Sequence[str]) -> bool:
        """``Backend.due_now``: what keeps a burst worker running."""
        return await self._backend.due_now(v.queue_names(queues))

    async def _schema_versions(self) -> tuple[int, int] | None:
        """``Backend.schema_versions``: the worker's start-up check."""
        return await self._backend.schema_versions()

    async def release(
        self, job: Job, *, delay: float | timedelta = 0, priority: int | None = None,
        error: object = None,
    ) -> JobState:
        """See ``Queue.release``."""
        job_id, token = self._held(job)
        text, detail = self._error(error)
        state = await self._backend.release(job_id, token, self._retry_delay(job, delay, None),
                                            self._priority(priority), text, detail)
        self._finished_states((job_id,), (state,))
        return state

    async def snooze(
        self, job: Job, delay: float | timedelta, *, scope: SnoozeScope = "job"
    ) -> JobState:
        """See ``Queue.snooze``."""
        job_id, token = self._held(job)
        scope = self._snooze_scope(scope)
        state = await self._backend.snooze(job_id, token, self._retry_delay(job, delay, None),
                                           scope)
        self._finished_states((job_id,), (state,))
        return state

    async def bury(
        self, job: Job, *, reason: str | None = None, priority: int | None = None
    ) -> None:
        """See ``Queue.bury``."""
        job_id, token = self._held(job)
        await self._backend.bury(job_id, token, v.error_text(reason), self._priority(priority))
        _results.finished(self._wake_key, (job_id,))

    async def kick(self, queue: str, *, limit: int = 100) -> int:
        """See ``Queue.kick``."""
        return await self._backend.kick(v.queue_name(queue), self._limit(limit))

    async def retry(self, job_id: int) -> None:
        """See ``Queue.retry``."""
        await self._backend.retry(self._job_id(job_id))

    async def discard(self, job_id: int, *, reason: str | None = None) -> None:
        """See ``Queue.discard``."""
        job_id = self._job_id(job_id)
        await self._backend.discard(job_id, v.error_text(reason))
        _results.finished(self._wake_key, (job_id,))

    async def cancel(self, job_id: int) -> JobState:
        """See ``Queue.cancel``."""
        job_id = self._job_id(job_id)
        state = await self._backend.cancel(job_id)
        self._finished_states((job_id,), (state,))
        return state

    async def get(self, job_id: int) -> JobInfo:
        """See ``Queue.get``."""
        return await self._backend.get(self._job_id(job_id))

    async def wait(self, job_id: int, timeout: float | None = None) -> Any:
        """See ``Queue.wait``. Cancel-safe: a cancelled wait leaves nothing behind."""
        hub = self._results_hub()
        return await _results.wait_async(self.get, hub, self._job_id(job_id),
                                         _results.check_timeout(timeout), self._wakers)

    async def result(self, job_id: int) -> Any:
        """See ``Queue.result``."""
        return _results.outcome(await self.get(job_id))

    async def peek(self, queue: str, state: str = "available", limit: int = 10) -> list[JobInfo]:
        """See ``Queue.peek``."""
        return await self._backend.peek(*self._peeking(queue, state, limit))

    async def priority_counts(self, queue: str) -> dict[int, int]:
        """See ``Queue.priority_counts``."""
        return await self._backend.priority_counts(v.queue_name(queue))

    async def stats(self) -> dict[str, QueueStats]:
        """See ``Queue.stats``."""
        return await self._backend.stats()

    async def server_stats(self) -> ServerStats:
        """See ``Queue.server_stats``."""
        stats, version = await self._backend.stats(), await self._backend.server_version()
        try:
            age = await self._backend.oldest_transaction_age()
        except BackendError as exc:
            age = self._unseen(exc)
        return self._totals(stats, self.backend, version, age)

    async def oldest_transaction_age(self) -> float | None:
        """See ``Queue.oldest_transaction_age``."""
        return await self._backend.oldest_transaction_age()

    async def jobs(
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
        """See ``Queue.jobs``."""
        return await self._backend.list_jobs(
            *self._listing(queue, state, limit, after, kind, unique_key, tag)
        )

    async def configure_queue(
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
        """See ``Queue.configure_queue``."""
        given = dict(locals())
        queue = v.queue_name(given.pop("name"))
        changes = self._setting_changes(await self._backend_config(queue),
                                        {k: given[k] for k in QUEUE_SETTINGS})
        config = await self._backend.configure_queue(queue, changes)
        self._forget_configs()
        return config

    async def _backend_config(self, queue: str) -> QueueConfig:
        return (await self._backend.queue_configs()).get(queue) or QueueConfig(queue)

    async def queue_config(self, name: str) -> QueueConfig:
        """See ``Queue.queue_config``."""
        return await self._backend_config(v.queue_name(name))

    async def queue_configs(self) -> dict[str, QueueConfig]:
        """See ``Queue.queue_configs``."""
        return await self._backend.queue_configs()

    async def configure_server(self, *, max_queues: int | Keep | None = KEEP
                               ) -> ServerConfig:
        """See ``Queue.configure_server``."""
        config = await self._backend.configure_server(self._server_changes(max_queues))
        self._counted.clear()
        self._forget_configs()
        return config

    async def server_config(self) -> ServerConfig:
        """See ``Queue.server_config``."""
        return await self._backend.server_config()

    async def next_due(self, queues: str | Sequence[str]) -> float | None:
        """See ``Queue.next_due``."""
        return await self._backend.next_due(v.queue_names(queues))

    async def pause(
        self, queue: str, *, until: datetime | float | timedelta | None = None
    ) -> None:
        """See ``Queue.pause``."""
        end = self._pause_end(until)
        await self._backend.set_paused(v.queue_name(queue), True, end)

    async def resume(self, queue: str) -> None:
        """See ``Queue.resume``."""
        await self._backend.set_paused(v.queue_name(queue), False)

    async def paused(self) -> list[str]:
        """See ``Queue.paused``."""
        return await self._backend.paused()

    async def reclaim(self, *, limit: int = 1000) -> int:
        """See ``Queue.reclaim``."""
        moved = await self._backend.reclaim(self._limit(limit))
        if moved:
            _results.finished(self._wake_key, None)
        return moved

    async def prune(self, *, older_than: timedelta | float) -> int:
        """See ``Queue.prune``."""
        return await self._backend.prune(self._age(older_than))

    async def close(self) -> None:
        """See ``Queue.close``."""
        if self._closed:
            return
        backend, self._closed = self._backend, True
        self._backend = Closed(backend.name)
        for waker in list(self._wakers):
            waker.set()
        await backend.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
