"""The backend contract over SQL plans, for sync and async runners alike.

``PlanBackend`` (``backends/_plans.py``) hands each operation's plan to the runner; this
class adds what SQL runners need to know: whether the dialect runs the operation as one
statement (no explicit transaction), whether it only reads, and the caller's connection
for transactional enqueue and ack.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from leaseq.backends._plans import READS, PlanBackend
from leaseq.backends._sql.ops import SqlOps
from leaseq.backends.base import NewFlow, NewJob
from leaseq.errors import JobCancelled


class SqlBackend(PlanBackend):
    """A SQL database behind the backend contract (see ``backends.base``)."""

    supports_transactions = True
    ops: SqlOps

    def __init__(self, name: str, ops: SqlOps, runner: Any) -> None:
        super().__init__(ops, runner)
        self.name = name

    def flags(self, operation: str) -> dict[str, Any]:
        return {**super().flags(operation), "single": self.ops.single(operation),
                "write": operation not in READS}

    def migrate(self) -> Any:
        return self.runner.migrate()

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = (),
        fresh: Collection[str] = (),
    ) -> Any:
        # Only the batch's own capped queues are locked and counted, in name order.
        caps = sorted({job.queue for job in jobs}.intersection(capped)) if capped else []
        new = sorted({job.queue for job in jobs}.intersection(fresh)) if fresh else []
        return self.runner.run(lambda: self.ops.enqueue(jobs, caps, new), conn=conn,
                               single=not caps and not new
                               and self.ops.single("enqueue", jobs))

    def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], capped: Collection[str] = (),
        conn: Any = None, fresh: Collection[str] = (),
    ) -> Any:
        caps = sorted({job.queue for job in jobs}.intersection(capped)) if capped else []
        new = sorted(set(flow.queues(jobs)).intersection(fresh)) if fresh else []
        return self.runner.run(lambda: self.ops.start_flow(flow, jobs, caps, new), conn=conn)

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0, limited: Collection[str] = (),
    ) -> Any:
        # Limited queues are claimed under their settings rows' locks, which takes more
        # than one statement even where a plain claim is one.
        hold = sorted(set(queues).intersection(limited)) if limited else []
        # The rows become jobs after the commit (``after``): decoding holds no lock, and
        # a value that does not decode cannot roll the claim back.
        return self.runner.run(
            lambda: self.ops.claim(queues, worker_id, lease, limit, default_lease, hold),
            idempotent=True, single=not hold and self.ops.single("claim"), write=True,
            after=self.ops.jobs)

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
                               **self.flags("renew"))

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> Any:
        # In the caller's transaction a repeated ack must raise: see SqlOps.complete.
        return self.runner.run(lambda: self.ops.complete(job_id, token, result, conn is None),
                               conn=conn, **self.flags("complete"))
