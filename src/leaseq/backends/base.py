"""The backend contract: what happens to a job, not how a database is spoken to.

Every backend (memory, SQLite, PostgreSQL, MySQL, Redis) implements ``Backend``; the async
twin ``AsyncBackend`` has the same methods, awaited. Arguments arrive validated and
encoded (the clients do that once for every backend), so a backend only carries out the
state change each method's docstring names. ``tests/conformance`` holds every backend to
this contract.

Fenced methods take ``(job_id, token)`` and raise ``LeaseLost`` without changing anything
when the job is not ``running`` under that token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from leaseq._core.job import EnqueueResult, Job, JobInfo, JobState, QueueStats


@dataclass(frozen=True, slots=True)
class NewJob:
    """One validated enqueue request. ``payload`` is already JSON text."""

    queue: str
    payload: str
    kind: str | None = None
    priority: int = 0
    delay: float = 0.0
    run_at: datetime | None = None
    unique_key: str | None = None
    max_attempts: int = 5


class Backend(Protocol):
    """The synchronous backend contract."""

    name: str
    supports_transactions: bool

    def migrate(self) -> None:
        """Create or upgrade the schema; idempotent and safe to race."""

    def enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[EnqueueResult]:
        """nothing → available or scheduled; a live ``(queue, unique_key)`` twin returns
        its id with ``created=False``. One transaction (the caller's, with ``conn``)."""

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float, limit: int
    ) -> list[Job]:
        """available → running for up to ``limit`` due jobs of queues that are not
        paused, by priority desc, available_at, id; attempts + 1; a fresh lease token
        each."""

    def renew(self, job_id: int, token: int, extend: float) -> datetime:
        """running → running with ``lease_until = now + extend``. Raises
        ``JobCancelled`` (after extending) when a cancel was requested."""

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> None:
        """running → completed: history row written, live row removed."""

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> list[bool]:
        """``complete`` for each ``(id, token, result)`` in one transaction: True per job
        completed, False (nothing changed) per stale lease."""

    def renew_many(
        self, items: Sequence[tuple[int, int, float]]
    ) -> list[tuple[datetime, bool] | None]:
        """``renew`` for each ``(id, token, extend)``: ``(lease_until, cancel_requested)``
        per job still held, None per stale lease."""

    def fail(self, job_id: int, token: int, error: str | None, delay: float) -> JobState:
        """running → available/scheduled after ``delay``; → dead when attempts are used
        up; → cancelled (history) when a cancel was requested."""

    def release(self, job_id: int, token: int, delay: float) -> JobState:
        """running → available/scheduled with the attempt given back; → cancelled when
        a cancel was requested."""

    def bury(self, job_id: int, token: int, reason: str | None) -> None:
        """running → dead with ``reason`` as its error."""

    def kick(self, queue: str, limit: int) -> int:
        """dead → available (fresh attempts) for up to ``limit`` jobs, oldest first."""

    def retry(self, job_id: int) -> None:
        """dead or scheduled → available now (dead jobs get fresh attempts)."""

    def discard(self, job_id: int, reason: str | None) -> None:
        """dead, scheduled or available → discarded (history)."""

    def cancel(self, job_id: int) -> JobState:
        """scheduled, available or dead → cancelled (history); running → flagged, so
        its holder's next heartbeat raises ``JobCancelled``. Returns the state after."""

    def get(self, job_id: int) -> JobInfo:
        """The job, live or historical; ``JobNotFound`` otherwise."""

    def stats(self) -> dict[str, QueueStats]:
        """Counts per queue, live and historical."""

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]:
        """Live and historical jobs with id > ``after``, by id, optionally of one queue
        and one state; at most ``limit``."""

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pauses (every claim skips the queue) or resumes a queue."""

    def paused(self) -> list[str]:
        """Names of the paused queues."""

    def reclaim(self, limit: int) -> int:
        """running with an expired lease → available (the attempt stays counted); → dead
        when attempts are used up; → cancelled when a cancel was requested."""

    def prune(self, older_than: float) -> int:
        """Deletes history rows finished more than ``older_than`` seconds ago."""

    def close(self) -> None:
        """Closes connections."""


class AsyncBackend(Protocol):
    """The asynchronous backend contract: ``Backend``'s methods, awaited."""

    name: str
    supports_transactions: bool

    async def migrate(self) -> None: ...
    async def enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[EnqueueResult]: ...
    async def claim(
        self, queues: Sequence[str], worker_id: str, lease: float, limit: int
    ) -> list[Job]: ...
    async def renew(self, job_id: int, token: int, extend: float) -> datetime: ...
    async def complete(
        self, job_id: int, token: int, result: str | None, conn: Any = None
    ) -> None: ...
    async def complete_many(
        self, items: Sequence[tuple[int, int, str | None]]
    ) -> list[bool]: ...
    async def renew_many(
        self, items: Sequence[tuple[int, int, float]]
    ) -> list[tuple[datetime, bool] | None]: ...
    async def fail(self, job_id: int, token: int, error: str | None, delay: float) -> JobState: ...
    async def release(self, job_id: int, token: int, delay: float) -> JobState: ...
    async def bury(self, job_id: int, token: int, reason: str | None) -> None: ...
    async def kick(self, queue: str, limit: int) -> int: ...
    async def retry(self, job_id: int) -> None: ...
    async def discard(self, job_id: int, reason: str | None) -> None: ...
    async def cancel(self, job_id: int) -> JobState: ...
    async def get(self, job_id: int) -> JobInfo: ...
    async def stats(self) -> dict[str, QueueStats]: ...
    async def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]: ...
    async def set_paused(self, queue: str, paused: bool) -> None: ...
    async def paused(self) -> list[str]: ...
    async def reclaim(self, limit: int) -> int: ...
    async def prune(self, older_than: float) -> int: ...
    async def close(self) -> None: ...
