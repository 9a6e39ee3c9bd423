"""Helpers for testing code that uses leaseq, with leaseq's own machinery.

    with leaseq.testing.inline(app):          # enqueue runs the task at once
        signup(user)

    signup(user)
    leaseq.testing.assert_enqueued(send_email, args={"to": "ada@example.com"})
    leaseq.testing.drain(app)                  # run what is due; re-raise the first failure

Point the app at ``memory://`` (or a throwaway SQLite file) in tests.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from leaseq import _hooks
from leaseq._core import outcome as decide
from leaseq._core.job import Job, JobInfo, JobState
from leaseq.errors import ValidationError
from leaseq.tasks import App, Task
from leaseq.worker.context import JobContext, set_current

__all__ = ["DrainResult", "assert_enqueued", "drain", "inline", "refute_enqueued", "run_job"]


@contextmanager
def inline(app: App) -> Iterator[App]:
    """Inside the block, ``task.enqueue`` runs the task immediately in the caller's
    thread (arguments still go through JSON) and exceptions propagate."""
    before = app.eager
    app.eager = True
    try:
        yield app
    finally:
        app.eager = before


def _waiting(task: Task[Any, Any], queue: str | None, args: Mapping[str, Any] | None
             ) -> list[JobInfo]:
    found = []
    for state in ("available", "scheduled"):
        after = 0
        while page := task.app.queue.jobs(queue, state=state, limit=1000, after=after):
            after = page[-1].id
            found += [
                j for j in page
                if j.kind == task.name and (args is None or _contains(j.payload, args))
            ]
    return sorted(found, key=lambda j: j.id)


def _contains(payload: Any, args: Mapping[str, Any]) -> bool:
    return isinstance(payload, dict) and all(payload.get(k, object()) == v for k, v in args.items())


def assert_enqueued(
    task: Task[Any, Any],
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    count: int | None = None,
) -> list[JobInfo]:
    """Assert that calls of ``task`` wait in the queue: with these ``args`` (a subset of
    the call's keyword arguments), on ``queue``, ``count`` of them (default: at least
    one). Returns the matching jobs."""
    jobs = _waiting(task, queue, args)
    if (count is None and not jobs) or (count is not None and len(jobs) != count):
        others = [(j.kind, j.queue, j.payload) for j in _waiting_all(task.app)][:20]
        want = "at least one" if count is None else str(count)
        raise AssertionError(
            f"expected {want} waiting {task.name} job(s) with args {dict(args or {})} "
            f"on {queue or 'any queue'}, found {len(jobs)}; waiting jobs: {others}"
        )
    return jobs


def refute_enqueued(
    task: Task[Any, Any], *, args: Mapping[str, Any] | None = None, queue: str | None = None
) -> None:
    """Assert that no matching call of ``task`` waits in the queue."""
    assert_enqueued(task, args=args, queue=queue, count=0)


def _waiting_all(app: App) -> list[JobInfo]:
    return [j for j in app.queue.jobs(limit=1000) if j.state in ("available", "scheduled")]


@dataclass(frozen=True)
class DrainResult:
    """What ``drain`` did: jobs that completed, jobs whose attempt failed, and jobs a
    handler put back with ``RetryAfter`` (no failure: they wait for their time, and
    ``drain`` does not wait with them)."""

    completed: int
    failed: int
    snoozed: int = 0


def run_job(app: App, job: Job) -> decide.Outcome:
    """Run one leased job through its task, as a worker would, and record the outcome
    (calling the task's failure hooks, as a worker would)."""
    return _run(app, job)[0]


def _run(app: App, job: Job) -> tuple[decide.Outcome, Exception | None]:
    task = app.tasks.get(job.kind or "")
    error: Exception | None = None
    if task is None:
        outcome = decide.unknown_task(job.kind, sorted(app.tasks))
    else:
        token = set_current(JobContext(job=job, lease=task.lease, started=True))
        try:
            outcome = decide.succeeded(_call(task, job.payload))
        except Exception as exc:
            outcome, error = decide.failed(exc), exc
        finally:
            set_current(None)
            del token
    outcome, state = _record(app, job, outcome, task)
    if error is None and outcome.exc is not None:  # the result could not be stored
        error = outcome.exc if isinstance(outcome.exc, Exception) else None
    if task is not None and outcome.exc is not None:
        hooks = [(w, h) for w in decide.hooks(outcome, state) if (h := task.hook(w)) is not None]
        info = app.queue.get(job.id) if hooks else None
        for which, hook in hooks:
            assert info is not None
            _hooks.call(hook, info, outcome.exc, task.name, which)
    return outcome, error


def _call(task: Task[Any, Any], payload: Any) -> Any:
    """The handler's result for this payload, as a worker calls it."""
    conversion = task.conversion
    arguments = payload if conversion is None else conversion.load_arguments(payload)
    result = task.fn(**arguments)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result if conversion is None else conversion.dump_result(result)


def _record(app: App, job: Job, outcome: decide.Outcome, task: Task[Any, Any] | None
            ) -> tuple[decide.Outcome, JobState | None]:
    """Write ``outcome`` as a worker does; returns what was written and the state a nack
    or a snooze left the job in."""
    backoff = task.retry_backoff(job) if task else None
    state: JobState | None = None
    try:
        for method, args, kwargs in decide.calls(job, outcome, backoff):
            returned = getattr(app.queue, method)(*args, **kwargs)
            state = returned if method in ("nack", "snooze") else state
    except ValidationError as exc:
        if outcome.action != "ack":
            raise
        outcome = decide.unstorable_result(exc)  # as the worker: the attempt failed
        state = app.queue.nack(job, outcome.error, backoff=backoff)
    return outcome, state


def drain(
    app: App, queues: str | Sequence[str] | None = None, *, raise_errors: bool = True,
    limit: int = 10_000,
) -> DrainResult:
    """Run every due job of ``queues`` (default: the app's task queues) in this thread,
    one at a time, until none is due; failures are recorded as a worker would (retry
    with backoff, dead after max attempts), and so are snoozes (``RetryAfter``). With
    ``raise_errors`` the first handler exception is re-raised as soon as it is recorded
    (a ``RetryAfter`` is not a failure: not raised)."""
    if queues is None:
        queues = sorted({t.defaults.queue for t in app.tasks.values()}) or ["default"]
    completed = failed = snoozed = 0
    for _ in range(limit):
        jobs = app.queue.dequeue(queues, worker_id="leaseq.testing.drain")
        if not jobs:
            break
        outcome, exc = _run(app, jobs[0])
        if outcome.action == "ack":
            completed += 1
            continue
        if outcome.action == "snooze":
            snoozed += 1
            continue
        failed += 1
        if raise_errors:
            if exc is not None:
                raise exc
            raise AssertionError(f"job {jobs[0].id} failed: {outcome.error}")
    return DrainResult(completed, failed, snoozed)


async def _await(awaitable: Any) -> Any:
    return await awaitable
