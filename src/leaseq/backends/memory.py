"""memory:// — the whole contract in one process, for tests and eager mode.

A peer of the SQL backends, not a fake: it passes the same conformance suite. State lives
in dicts under one lock; "now" is the process clock. Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import heapq
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from leaseq._core.job import EnqueueResult, Job, JobInfo, JobState, QueueStats
from leaseq._core.validate import decode
from leaseq.backends.base import NewJob
from leaseq.errors import ConfigurationError, JobCancelled, JobNotFound, JobStateError, LeaseLost


@dataclass
class _Row:
    id: int
    queue: str
    kind: str | None
    payload: str
    priority: int
    max_attempts: int
    unique_key: str | None
    available_at: float
    created_at: float
    state: str = "available"
    attempts: int = 0
    lease_token: int = 0
    lease_until: float | None = None
    worker_id: str | None = None
    started_at: float | None = None
    error: str | None = None
    cancel_requested: bool = False
    finished_at: float | None = None
    result: str | None = None


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc)


class MemoryBackend:
    """The backend contract in process memory (see ``backends.base``)."""

    name = "memory"
    supports_transactions = False

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.live: dict[int, _Row] = {}
        self.history: dict[int, _Row] = {}
        self.unique: dict[tuple[str, str], int] = {}
        self.paused_queues: set[str] = set()
        self.next_id = 1

    def migrate(self) -> None:
        """Nothing to create."""

    def enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[EnqueueResult]:
        if conn is not None:
            raise ConfigurationError(
                "memory:// has no transactions to join; transactional enqueue needs SQLite, "
                "PostgreSQL or MySQL"
            )
        with self.lock:
            now = self.clock()
            out = []
            for job in jobs:
                key = (job.queue, job.unique_key) if job.unique_key is not None else None
                if key is not None and key in self.unique:
                    out.append(EnqueueResult(self.unique[key], False))
                    continue
                at = job.run_at.timestamp() if job.run_at else now + job.delay
                row = _Row(self.next_id, job.queue, job.kind, job.payload, job.priority,
                           job.max_attempts, job.unique_key, at, now)
                self.next_id += 1
                self.live[row.id] = row
                if key is not None:
                    self.unique[key] = row.id
                out.append(EnqueueResult(row.id, True))
            return out

    def claim(self, queues: Sequence[str], worker_id: str, lease: float, limit: int) -> list[Job]:
        with self.lock:
            now = self.clock()
            wanted = set(queues) - self.paused_queues
            due = (r for r in self.live.values()
                   if r.state == "available" and r.queue in wanted and r.available_at <= now)
            picked = heapq.nsmallest(limit, due, key=lambda r: (-r.priority, r.available_at, r.id))
            jobs = []
            for r in picked:
                r.state, r.worker_id = "running", worker_id
                r.attempts += 1
                r.lease_token += 1
                r.lease_until = now + lease
                r.started_at = r.started_at if r.started_at is not None else now
                jobs.append(Job(
                    id=r.id, queue=r.queue, kind=r.kind, payload=decode(r.payload),
                    priority=r.priority, attempts=r.attempts, max_attempts=r.max_attempts,
                    unique_key=r.unique_key, lease_token=r.lease_token,
                    lease_until=_dt(r.lease_until), worker_id=worker_id,  # type: ignore[arg-type]
                    created_at=_dt(r.created_at), lease=lease,  # type: ignore[arg-type]
                ))
            return jobs

    def _held(self, job_id: int, token: int) -> _Row:
        r = self.live.get(job_id)
        if r is None or r.state != "running" or r.lease_token != token:
            raise LeaseLost(
                f"lease {token} on job {job_id} is no longer valid: the job was reclaimed, "
                "re-delivered or finished; nothing was changed"
            )
        return r

    def renew(self, job_id: int, token: int, extend: float) -> datetime:
        with self.lock:
            r = self._held(job_id, token)
            r.lease_until = self.clock() + extend
            until = _dt(r.lease_until)
            assert until is not None
            if r.cancel_requested:
                raise JobCancelled(f"job {job_id} was cancelled; stop work and release or nack it")
            return until

    def _archive(self, r: _Row, state: JobState, result: str | None, error: str | None) -> None:
        del self.live[r.id]
        if r.unique_key is not None:
            self.unique.pop((r.queue, r.unique_key), None)
        error = None if state == "completed" else (error if error is not None else r.error)
        self.history[r.id] = replace(r, state=state, result=result, error=error,
                                     finished_at=self.clock(), lease_until=None,
                                     cancel_requested=False)

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> None:
        if conn is not None:
            raise ConfigurationError("memory:// has no transactions to join")
        with self.lock:
            if self._completed_by(job_id, token):
                return  # a repeated ack of this very lease: already done
            self._archive(self._held(job_id, token), "completed", result, None)

    def _completed_by(self, job_id: int, token: int) -> bool:
        h = self.history.get(job_id)
        return h is not None and h.state == "completed" and h.lease_token == token

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> list[bool]:
        with self.lock:
            done = []
            for job_id, token, result in items:
                r = self.live.get(job_id)
                ok = r is not None and r.state == "running" and r.lease_token == token
                if ok:
                    self._archive(r, "completed", result, None)  # type: ignore[arg-type]
                done.append(ok or self._completed_by(job_id, token))
            return done

    def renew_many(
        self, items: Sequence[tuple[int, int, float]]
    ) -> list[tuple[datetime, bool] | None]:
        with self.lock:
            out: list[tuple[datetime, bool] | None] = []
            for job_id, token, extend in items:
                r = self.live.get(job_id)
                if r is None or r.state != "running" or r.lease_token != token:
                    out.append(None)
                    continue
                r.lease_until = self.clock() + extend
                out.append((_dt(r.lease_until), r.cancel_requested))  # type: ignore[arg-type]
            return out

    def _reschedule(self, r: _Row, delay: float, error: str | None) -> JobState:
        r.state, r.lease_until = "available", None
        r.available_at = self.clock() + delay
        r.error = error if error is not None else r.error
        return "scheduled" if delay > 0 else "available"

    def fail(self, job_id: int, token: int, error: str | None, delay: float) -> JobState:
        with self.lock:
            r = self._held(job_id, token)
            if r.cancel_requested:
                self._archive(r, "cancelled", None, error)
                return "cancelled"
            if r.attempts >= r.max_attempts:
                r.state, r.lease_until = "dead", None
                r.error = error if error is not None else r.error
                return "dead"
            return self._reschedule(r, delay, error)

    def release(self, job_id: int, token: int, delay: float) -> JobState:
        with self.lock:
            r = self._held(job_id, token)
            if r.cancel_requested:
                self._archive(r, "cancelled", None, None)
                return "cancelled"
            r.attempts -= 1
            return self._reschedule(r, delay, None)

    def bury(self, job_id: int, token: int, reason: str | None) -> None:
        with self.lock:
            r = self._held(job_id, token)
            r.state, r.lease_until = "dead", None
            r.error = reason if reason is not None else r.error

    def kick(self, queue: str, limit: int) -> int:
        with self.lock:
            dead = sorted(i for i, r in self.live.items() if r.queue == queue and r.state == "dead")
            for job_id in dead[:limit]:
                r = self.live[job_id]
                r.state, r.attempts, r.available_at = "available", 0, self.clock()
            return len(dead[:limit])

    def _state(self, r: _Row) -> JobState:
        if r.state == "available" and r.available_at > self.clock():
            return "scheduled"
        return r.state  # type: ignore[return-value]

    def _refuse(self, job_id: int, action: str, allowed: str) -> JobStateError | JobNotFound:
        r = self.live.get(job_id) or self.history.get(job_id)
        if r is None:
            return JobNotFound(f"no job with id {job_id}")
        return JobStateError(
            f"cannot {action} job {job_id}: it is {self._state(r)}; {action} works on "
            f"{allowed} jobs"
        )

    def retry(self, job_id: int) -> None:
        with self.lock:
            r = self.live.get(job_id)
            if r is None or self._state(r) not in ("dead", "scheduled"):
                raise self._refuse(job_id, "retry", "dead or scheduled")
            if r.state == "dead":
                r.attempts = 0
            r.state, r.available_at = "available", self.clock()

    def discard(self, job_id: int, reason: str | None) -> None:
        with self.lock:
            r = self.live.get(job_id)
            if r is None or r.state not in ("available", "dead"):
                raise self._refuse(job_id, "discard", "dead, scheduled or available")
            self._archive(r, "discarded", None, reason)

    def cancel(self, job_id: int) -> JobState:
        with self.lock:
            r = self.live.get(job_id)
            if r is None:
                h = self.history.get(job_id)
                if h is None:
                    raise JobNotFound(f"no job with id {job_id}")
                return h.state  # type: ignore[return-value]
            if r.state == "running":
                r.cancel_requested = True
                return "running"
            self._archive(r, "cancelled", None, "cancelled")
            return "cancelled"

    def get(self, job_id: int) -> JobInfo:
        with self.lock:
            r = self.live.get(job_id) or self.history.get(job_id)
            if r is None:
                raise JobNotFound(f"no job with id {job_id}")
            return self._info(r)

    def _info(self, r: _Row) -> JobInfo:
        live = r.finished_at is None
        return JobInfo(
            id=r.id, queue=r.queue, kind=r.kind, state=self._state(r),
            payload=decode(r.payload), priority=r.priority, attempts=r.attempts,
            max_attempts=r.max_attempts, unique_key=r.unique_key,
            available_at=_dt(r.available_at) if live else None,
            lease_until=_dt(r.lease_until), worker_id=r.worker_id,
            created_at=_dt(r.created_at), started_at=_dt(r.started_at),  # type: ignore[arg-type]
            finished_at=_dt(r.finished_at), result=decode(r.result), error=r.error,
            cancel_requested=r.cancel_requested,
        )

    def stats(self) -> dict[str, QueueStats]:
        with self.lock:
            counts: dict[str, dict[str, Any]] = {}
            for r in [*self.live.values(), *self.history.values()]:
                c = counts.setdefault(r.queue, {})
                state = self._state(r)
                c[state] = c.get(state, 0) + 1
            for queue in self.paused_queues:
                counts.setdefault(queue, {})["paused"] = True
            return {q: QueueStats(queue=q, **c) for q, c in sorted(counts.items())}

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]:
        with self.lock:
            rows = sorted(
                (r for r in [*self.live.values(), *self.history.values()]
                 if r.id > after and (queue is None or r.queue == queue)
                 and (state is None or self._state(r) == state)),
                key=lambda r: r.id,
            )
            return [self._info(r) for r in rows[:limit]]

    def set_paused(self, queue: str, paused: bool) -> None:
        with self.lock:
            (self.paused_queues.add if paused else self.paused_queues.discard)(queue)

    def paused(self) -> list[str]:
        with self.lock:
            return sorted(self.paused_queues)

    def reclaim(self, limit: int) -> int:
        with self.lock:
            now = self.clock()
            expired = sorted(
                (r for r in self.live.values()
                 if r.state == "running" and r.lease_until is not None and r.lease_until <= now),
                key=lambda r: r.lease_until or 0,
            )[:limit]
            for r in expired:
                if r.cancel_requested:
                    self._archive(r, "cancelled", None, "lease expired")
                elif r.attempts >= r.max_attempts:
                    r.state, r.lease_until, r.error = "dead", None, "lease expired"
                else:
                    r.state, r.lease_until, r.error = "available", None, "lease expired"
                    r.available_at = now
            return len(expired)

    def prune(self, older_than: float) -> int:
        with self.lock:
            cutoff = self.clock() - older_than
            old = [i for i, r in self.history.items() if (r.finished_at or 0) < cutoff]
            for job_id in old:
                del self.history[job_id]
            return len(old)

    def close(self) -> None:
        """Nothing to close."""


class AsyncMemoryBackend:
    """``MemoryBackend`` behind the async contract; its calls never block, so they run
    on the event loop directly."""

    name = "memory"
    supports_transactions = False

    def __init__(self, sync: MemoryBackend | None = None) -> None:
        self.sync = sync or MemoryBackend()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)  # a real suspension point, as every other backend has
            return method(*args, **kwargs)

        return call
