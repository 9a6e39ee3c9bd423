"""The backend contract over SQL plans, for sync and async runners alike.

Each method builds a plan factory and hands it to the runner. A ``SyncRunner`` returns
the result; an async runner returns an awaitable of it. So one class serves as both
``Backend`` and ``AsyncBackend`` and the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from leaseq._core.job import JobState
from leaseq.backends._sql.ops import SqlOps
from leaseq.backends.base import FailItem, NewJob, PeekState
from leaseq.errors import JobCancelled


class SqlBackend:
    """A SQL database behind the backend contract (see ``backends.base``)."""

    supports_transactions = True

    def __init__(self, name: str, ops: SqlOps, runner: Any) -> None:
        self.name = name
        self.ops = ops
        self.runner = runner

    def migrate(self) -> Any:
        return self.runner.migrate()

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = ()
    ) -> Any:
        # Only the batch's own capped queues are locked and counted, in name order.
        caps = sorted({job.queue for job in jobs}.intersection(capped)) if capped else []
        return self.runner.run(lambda: self.ops.enqueue(jobs, caps), conn=conn,
                               single=not caps and self.ops.single("enqueue", jobs))

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0,
    ) -> Any:
        # A claim is safe to repeat: jobs a lost reply leased come back when it expires.
        return self.runner.run(
            lambda: self.ops.claim(queues, worker_id, lease, limit, default_lease),
            single=self.ops.single("claim"), idempotent=True,
        )

    def renew(self, job_id: int, token: int, extend: float) -> Any:
        def check(outcome: tuple[datetime, bool]) -> datetime:
            until, cancel_requested = outcome
            if cancel_requested:
                raise JobCancelled(
                    f"job {job_id} was cancelled; its lease runs to {until.isoformat()}, "
                    "stop work and release or nack it"
                )
            return until

        return self.runner.run(lambda: self.ops.renew(job_id, token, extend), after=check,
                               single=self.ops.single("renew"), idempotent=True)

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> Any:
        return self.runner.run(lambda: self.ops.complete(job_id, token, result, conn is None),
                               conn=conn, single=self.ops.single("complete"),
                               idempotent=True)

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> Any:
        return self.runner.run(lambda: self.ops.complete_many(items),
                               single=self.ops.single("complete_many"), idempotent=True)

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Any:
        return self.runner.run(lambda: self.ops.renew_many(items),
                               single=self.ops.single("renew_many"), idempotent=True)

    def fail(self, job_id: int, token: int, error: str | None, delay: float) -> Any:
        return self.runner.run(lambda: self.ops.fail(job_id, token, error, delay))

    def fail_many(self, items: Sequence[FailItem]) -> Any:
        # Not repeated after a dropped connection: the first attempt may have committed.
        return self.runner.run(lambda: self.ops.fail_many(items), idempotent=False)

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None
    ) -> Any:
        return self.runner.run(lambda: self.ops.release(job_id, token, delay, priority))

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None
    ) -> Any:
        return self.runner.run(lambda: self.ops.bury(job_id, token, reason, priority))

    def kick(self, queue: str, limit: int) -> Any:
        return self.runner.run(lambda: self.ops.kick(queue, limit))

    def retry(self, job_id: int) -> Any:
        return self.runner.run(lambda: self.ops.retry(job_id))

    def discard(self, job_id: int, reason: str | None) -> Any:
        return self.runner.run(lambda: self.ops.discard(job_id, reason))

    def cancel(self, job_id: int) -> Any:
        return self.runner.run(lambda: self.ops.cancel(job_id))

    def get(self, job_id: int) -> Any:
        return self.runner.run(lambda: self.ops.get(job_id), write=False, idempotent=True)

    def stats(self) -> Any:
        return self.runner.run(self.ops.stats, write=False, idempotent=True)

    def peek(self, queue: str, state: PeekState, limit: int) -> Any:
        return self.runner.run(lambda: self.ops.peek(queue, state, limit), write=False,
                               idempotent=True)

    def configure_queue(self, queue: str, changes: Mapping[str, int | float | None]) -> Any:
        # Storing the same values twice is harmless, so a dropped connection may retry it.
        return self.runner.run(lambda: self.ops.configure_queue(queue, changes),
                               idempotent=True)

    def queue_configs(self) -> Any:
        return self.runner.run(self.ops.queue_configs, write=False, idempotent=True)

    def server_version(self) -> Any:
        return self.runner.run(self.ops.server_version, write=False, idempotent=True)

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int
    ) -> Any:
        return self.runner.run(lambda: self.ops.list_jobs(queue, state, limit, after),
                               write=False, idempotent=True)

    def set_paused(self, queue: str, paused: bool) -> Any:
        return self.runner.run(lambda: self.ops.set_paused(queue, paused), idempotent=True)

    def paused(self) -> Any:
        return self.runner.run(self.ops.paused, write=False, idempotent=True)

    def reclaim(self, limit: int) -> Any:
        return self.runner.run(lambda: self.ops.reclaim(limit), idempotent=True)

    def prune(self, older_than: float) -> Any:
        return self.runner.run(lambda: self.ops.prune(older_than))

    def drop(self) -> Any:
        """Not part of the contract: drops this prefix's tables (``leaseq bench``)."""
        return self.runner.run(self.ops.drop)

    def close(self) -> Any:
        return self.runner.close()
