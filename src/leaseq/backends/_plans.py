"""The backend contract over plans, written once for the SQL and Redis backends.

Both keep their logic in plans (``_sql/plan.py``, ``redis/ops.py``) driven by a sync or an
async runner. Each contract method here hands the matching plan of ``self.ops`` to the
runner and returns what it returns: a value from a sync runner, an awaitable from an async
one, so one class serves as ``Backend`` and ``AsyncBackend`` alike. A backend says how its
runner should run each operation (``flags``) and overrides only the methods whose plans
take other arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from leaseq._core.job import JobState
from leaseq.backends.base import (
    FailItem,
    NewFlow,
    NewJob,
    PauseEnd,
    PeekState,
    SnoozeScope,
    StepItem,
)
from leaseq.errors import BackendUnavailable, LeaseqError, OutcomeUnknown

REPEATABLE = frozenset({
    # Safe to run again on a fresh connection after the reply was lost: a claim's jobs come
    # back when their lease expires, fenced writes refuse a second time or are no-ops,
    # settings and pause store the same values, and reads change nothing.
    "claim", "renew", "complete", "complete_many", "complete_steps", "renew_many", "reclaim",
    "configure_queue", "set_paused",
    "get", "stats", "peek", "queue_configs", "server_version", "oldest_transaction_age",
    "list_jobs", "paused", "configure_server", "server_config",
    "next_due", "get_flow",
    "priority_counts",
})
# A write leaseq does not repeat (enqueue, nack, ...) whose connection dropped may have
# committed before the reply was lost (reliability research S6): the error says so.
UNKNOWN = ("; if the connection dropped after the request was sent, the write may have "
           "committed: its outcome is unknown (repeat an enqueue only with a unique_key; "
           "see docs/reliability.md)")
READS = frozenset({"get", "stats", "peek", "queue_configs", "server_version", "server_config",
                   "oldest_transaction_age", "list_jobs",
                   "paused", "next_due", "get_flow",
                   "priority_counts", "schema_versions", "due_now"})


def outcome_unknown(error: LeaseqError) -> LeaseqError:
    """``error``, raised for a write that is not repeated after a dropped connection, as
    an ``OutcomeUnknown``: the write may have committed. The client names the public
    operation (``_shared.names_outcome``)."""
    if type(error) is BackendUnavailable:
        unknown = OutcomeUnknown(f"{error}{UNKNOWN}")
        return unknown
    return error


class PlanBackend:
    """A backend whose operations are plans of ``ops`` run by ``runner``."""

    name: str
    supports_transactions: bool
    repeatable: frozenset[str] = REPEATABLE

    def __init__(self, ops: Any, runner: Any) -> None:
        self.ops = ops
        self.runner = runner

    def flags(self, operation: str) -> dict[str, Any]:
        """How the runner runs ``operation`` (keyword arguments of ``runner.run``)."""
        return {"idempotent": operation in self.repeatable}

    def run(self, operation: str, factory: Callable[[], Any]) -> Any:
        return self.runner.run(factory, **self.flags(operation))

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = (),
        fresh: Collection[str] = (),
    ) -> Any:
        return self.run("enqueue", lambda: self.ops.enqueue(jobs, conn, capped))

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0, limited: Collection[str] = (),
    ) -> Any:
        # ``limited`` is only a hint for backends that must choose how to claim (SQL);
        # plans that check every queue's limits anyway do not take it.
        return self.run("claim",
                        lambda: self.ops.claim(queues, worker_id, lease, limit, default_lease))

    def next_due(self, queues: Sequence[str]) -> Any:
        return self.run("next_due", lambda: self.ops.next_due(queues))

    def renew(self, job_id: int, token: int, extend: float) -> Any:
        return self.run("renew", lambda: self.ops.renew(job_id, token, extend))

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> Any:
        return self.run("complete", lambda: self.ops.complete(job_id, token, result, conn))

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> Any:
        return self.run("complete_many", lambda: self.ops.complete_many(items))

    def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], capped: Collection[str] = (),
        conn: Any = None, fresh: Collection[str] = (),
    ) -> Any:
        # Not repeated after a dropped connection, as enqueue: it may have committed.
        # ``capped`` as in enqueue: Redis checks every queue's cap in its script anyway.
        return self.run("start_flow", lambda: self.ops.start_flow(flow, jobs, conn, fresh))

    def complete_steps(self, items: Sequence[StepItem]) -> Any:
        return self.run("complete_steps", lambda: self.ops.complete_steps(items))

    def get_flow(self, flow_id: str) -> Any:
        return self.run("get_flow", lambda: self.ops.get_flow(flow_id))

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Any:
        return self.run("renew_many", lambda: self.ops.renew_many(items))

    def fail(
        self, job_id: int, token: int, error: str | None, delay: float,
        detail: str | None = None,
    ) -> Any:
        return self.run("fail", lambda: self.ops.fail(job_id, token, error, delay, detail))

    def fail_many(self, items: Sequence[FailItem]) -> Any:
        # Not repeated after a dropped connection: the first attempt may have committed.
        return self.run("fail_many", lambda: self.ops.fail_many(items))

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None,
        error: str | None = None, detail: str | None = None,
    ) -> Any:
        return self.run("release", lambda: self.ops.release(job_id, token, delay, priority,
                                                            error, detail))

    def snooze(
        self, job_id: int, token: int, delay: float, scope: SnoozeScope = "job"
    ) -> Any:
        # Not repeated after a dropped connection, as release: a second snooze would
        # count twice.
        return self.run("snooze", lambda: self.ops.snooze(job_id, token, delay, scope))

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None,
        detail: str | None = None,
    ) -> Any:
        return self.run("bury", lambda: self.ops.bury(job_id, token, reason, priority, detail))

    def kick(self, queue: str, limit: int) -> Any:
        return self.run("kick", lambda: self.ops.kick(queue, limit))

    def retry(self, job_id: int) -> Any:
        return self.run("retry", lambda: self.ops.retry(job_id))

    def discard(self, job_id: int, reason: str | None) -> Any:
        return self.run("discard", lambda: self.ops.discard(job_id, reason))

    def cancel(self, job_id: int) -> Any:
        return self.run("cancel", lambda: self.ops.cancel(job_id))

    def get(self, job_id: int) -> Any:
        return self.run("get", lambda: self.ops.get(job_id))

    def due_now(self, queues: Sequence[str]) -> Any:
        return self.run("due_now", lambda: self.ops.due_now(queues))

    def schema_versions(self) -> Any:
        return self.run("schema_versions", self.ops.schema_versions)

    def stats(self) -> Any:
        return self.run("stats", self.ops.stats)

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int,
        kind: str | None = None, unique_key: str | None = None, tag: str | None = None,
    ) -> Any:
        return self.run("list_jobs", lambda: self.ops.list_jobs(queue, state, limit, after,
                                                                kind, unique_key, tag))

    def peek(self, queue: str, state: PeekState, limit: int) -> Any:
        return self.run("peek", lambda: self.ops.peek(queue, state, limit))

    def priority_counts(self, queue: str) -> Any:
        return self.run("priority_counts", lambda: self.ops.priority_counts(queue))

    def configure_queue(self, queue: str, changes: Mapping[str, int | float | None]) -> Any:
        return self.run("configure_queue", lambda: self.ops.configure_queue(queue, changes))

    def queue_configs(self) -> Any:
        return self.run("queue_configs", self.ops.queue_configs)

    def configure_server(self, changes: Mapping[str, int | None]) -> Any:
        return self.run("configure_server", lambda: self.ops.configure_server(changes))

    def server_config(self) -> Any:
        return self.run("server_config", self.ops.server_config)

    def server_version(self) -> Any:
        return self.run("server_version", self.ops.server_version)

    def oldest_transaction_age(self) -> Any:
        return self.run("oldest_transaction_age", self.ops.oldest_transaction_age)

    def set_paused(self, queue: str, paused: bool, until: PauseEnd = None) -> Any:
        return self.run("set_paused", lambda: self.ops.set_paused(queue, paused, until))

    def paused(self) -> Any:
        return self.run("paused", self.ops.paused)

    def reclaim(self, limit: int) -> Any:
        return self.run("reclaim", lambda: self.ops.reclaim(limit))

    def prune(self, older_than: float) -> Any:
        return self.run("prune", lambda: self.ops.prune(older_than))

    def drop(self) -> Any:
        """Not part of the contract: removes this prefix's tables or keys (``leaseq
        bench`` and the tests clean up with it)."""
        return self.run("drop", self.ops.drop)

    def close(self) -> Any:
        return self.runner.close()
