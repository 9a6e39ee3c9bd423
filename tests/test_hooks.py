"""Failure hooks (``on_failure``, ``on_dead``) in a worker on real backends and in
``leaseq.testing.drain``: when they run, with which job and exception, app defaults and
task overrides, and that a hook that raises is logged without touching the job."""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

import leaseq
from leaseq import testing
from tests.conftest import require
from tests.helpers import wait_for
from tests.test_worker import running, state

SLOW_RETRY = leaseq.Backoff(base=0.3, cap=0.3, jitter=0)
"""Long enough that a hook reads the job before the retry is claimed again."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@dataclass
class Calls:
    """What the hooks saw: (hook, job as stored, exception, thread name)."""

    seen: list[tuple[str, leaseq.JobInfo, BaseException, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, which: str, job: leaseq.JobInfo, exc: BaseException) -> None:
        with self.lock:
            self.seen.append((which, job, exc, threading.current_thread().name))

    def hook(self, which: str, is_async: bool = False) -> Any:
        if is_async:
            async def async_hook(job: leaseq.JobInfo, exc: BaseException) -> None:
                asyncio.get_running_loop()  # runs on a loop
                await asyncio.sleep(0)
                self.record(which, job, exc)

            return async_hook

        def sync_hook(job: leaseq.JobInfo, exc: BaseException) -> None:
            self.record(which, job, exc)

        return sync_hook

    def of(self, which: str, job_id: int | None = None) -> list[tuple[leaseq.JobInfo,
                                                                       BaseException, str]]:
        with self.lock:
            return [(j, e, t) for w, j, e, t in self.seen
                    if w == which and (job_id is None or j.id == job_id)]


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str, calls: Calls) -> Iterator[leaseq.App]:
    """An App whose default hooks record into ``calls`` as "app_failure"/"app_dead"."""
    application = leaseq.App(url, table_prefix=prefix, lease=5,
                             on_failure=calls.hook("app_failure"), on_dead=calls.hook("app_dead"),
                             backoff=leaseq.Backoff(base=0.05, cap=0.1, jitter=0))
    yield application
    application.close()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync_hooks", "async_hooks"])
def test_on_failure_after_every_failed_attempt_and_on_dead_once_dead(
    app: leaseq.App, calls: Calls, is_async: bool
) -> None:
    @app.task(queue="h", max_attempts=3, backoff=SLOW_RETRY,
              on_failure=calls.hook("failure", is_async), on_dead=calls.hook("dead", is_async))
    def flaky() -> None:
        ctx = leaseq.current_job()
        assert ctx is not None
        raise ValueError(f"attempt {ctx.job.attempts}")

    job = flaky.enqueue().id
    with running(app):
        wait_for(lambda: calls.of("dead"), message="on_dead")
    failures = sorted(calls.of("failure"), key=lambda c: c[0].attempts)
    assert [(j.id, j.attempts, j.state) for j, _, _ in failures] == [
        (job, 1, "scheduled"), (job, 2, "scheduled"), (job, 3, "dead")]
    assert [str(e) for _, e, _ in failures] == ["attempt 1", "attempt 2", "attempt 3"]
    assert all(type(e) is ValueError for _, e, _ in failures)
    assert "ValueError: attempt 2" in (failures[1][0].error or "")  # as stored after the nack
    [(dead, exc, thread)] = calls.of("dead")
    assert (dead.id, dead.state, dead.attempts, str(exc)) == (job, "dead", 3, "attempt 3")
    assert not calls.of("app_failure") and not calls.of("app_dead")  # the task's own win
    # A plain hook runs in a thread of the hooks' pool, off the loop; an async one on it.
    assert thread.startswith("leaseq-job-hook") is not is_async


def test_bury_calls_both_hooks_and_success_retry_cancel_call_what_they_should(
    app: leaseq.App, calls: Calls
) -> None:
    @app.task(queue="h")
    def hopeless() -> None:
        raise leaseq.Bury("needs a human")

    @app.task(queue="h")
    def fine() -> int:
        return 1

    @app.task(queue="h", max_attempts=5)
    def later() -> None:
        raise leaseq.Retry(delay=3600, reason="not yet")

    @app.task(queue="h", lease=0.6)
    async def long() -> None:
        await asyncio.sleep(60)

    buried, ok, retried, cancelled = (hopeless.enqueue().id, fine.enqueue().id,
                                      later.enqueue().id, long.enqueue().id)
    with running(app):
        wait_for(lambda: state(app, ok, "completed") and state(app, retried, "scheduled"))
        wait_for(lambda: state(app, cancelled, "running"))
        app.queue.cancel(cancelled)
        wait_for(lambda: state(app, cancelled, "cancelled"))
        wait_for(lambda: calls.of("app_dead"), message="on_dead")
    # The worker has stopped, and it waits for running hooks: every call is in.
    [(failed, exc, _)] = calls.of("app_failure", buried)
    assert isinstance(exc, leaseq.Bury) and failed.state == "dead"
    [(dead, exc, _)] = calls.of("app_dead")
    assert (dead.id, dead.state, dead.error, exc.reason) == (buried, "dead", "needs a human",
                                                             "needs a human")
    [(scheduled, exc, _)] = calls.of("app_failure", retried)
    assert isinstance(exc, leaseq.Retry) and scheduled.state == "scheduled"
    assert not calls.of("app_failure", ok) and not calls.of("app_failure", cancelled)
    assert len(calls.seen) == 3


def test_timeouts_call_the_hooks_with_a_timeout_error(app: leaseq.App, calls: Calls) -> None:
    @app.task(queue="h", timeout=0.2, max_attempts=1)
    async def slow() -> None:
        await asyncio.sleep(30)

    job = slow.enqueue().id
    with running(app):
        wait_for(lambda: calls.of("app_dead"), message="on_dead")
    [(info, exc, _)] = calls.of("app_failure", job)
    assert isinstance(exc, TimeoutError) and "timeout of 0.2 s" in str(exc)
    assert info.state == "dead"


def test_app_defaults_apply_unless_the_task_has_its_own(app: leaseq.App, calls: Calls) -> None:
    @app.task(queue="h", max_attempts=1)
    def plain() -> None:
        raise KeyError("plain")

    @app.task(queue="h", max_attempts=1, on_failure=calls.hook("own_failure"))
    def own() -> None:
        raise KeyError("own")

    assert plain.on_failure is app.on_failure and own.on_dead is app.on_dead
    a, b = plain.enqueue().id, own.enqueue().id
    with running(app):
        wait_for(lambda: calls.of("app_dead", a) and calls.of("app_dead", b), message="hooks")
    assert len(calls.of("app_failure", a)) == 1 and not calls.of("own_failure", a)
    assert len(calls.of("own_failure", b)) == 1 and not calls.of("app_failure", b)
    assert len(calls.of("app_dead", b)) == 1  # no on_dead of its own: the app's


@pytest.mark.parametrize("is_async", [False, True], ids=["sync_hook", "async_hook"])
def test_a_raising_hook_is_logged_and_the_job_is_recorded_once(
    q: leaseq.Queue, url: str, prefix: str, caplog: pytest.LogCaptureFixture, is_async: bool
) -> None:
    runs: list[int] = []

    def broken(job: leaseq.JobInfo, exc: BaseException) -> None:
        raise RuntimeError("hook is broken")

    async def broken_async(job: leaseq.JobInfo, exc: BaseException) -> None:
        raise RuntimeError("hook is broken")

    hook = broken_async if is_async else broken
    app = leaseq.App(url, table_prefix=prefix, on_failure=hook, on_dead=hook)

    @app.task(queue="h", max_attempts=1)
    def fails() -> None:
        runs.append(1)
        raise ValueError("boom")

    caplog.set_level(logging.ERROR, logger="leaseq.worker")
    job = fails.enqueue().id
    try:
        with running(app):
            wait_for(lambda: len(_hook_errors(caplog)) == 2, message="both hook errors logged")
            dead = wait_for(lambda: state(app, job, "dead"))
    finally:
        app.close()
    assert runs == [1]  # never re-run
    assert (dead.attempts, dead.state) == (1, "dead")
    assert "ValueError: boom" in (dead.error or "")
    for record in _hook_errors(caplog):
        assert record.exc_info is not None and "hook is broken" in str(record.exc_info[1])
    messages = sorted(r.getMessage() for r in _hook_errors(caplog))
    assert "on_dead hook of task" in messages[0] and "on_failure hook of task" in messages[1]
    assert q.stats()["h"].dead == 1


def _hook_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "leaseq.worker" and "hook" in r.getMessage()]


# -- leaseq.testing.drain: the same hooks, in the caller's thread ----------------------


@pytest.fixture
def memory_app(calls: Calls) -> leaseq.App:
    return leaseq.App(f"memory://{secrets.token_hex(4)}",
                      backoff=leaseq.Backoff(base=0, cap=0, jitter=0),
                      on_dead=calls.hook("app_dead", is_async=True))


def test_drain_runs_the_same_hooks(memory_app: leaseq.App, calls: Calls) -> None:
    app = memory_app

    @app.task(max_attempts=2, on_failure=calls.hook("failure"))
    def flaky() -> None:
        raise ValueError("nope")

    @app.task(max_attempts=2, on_failure=calls.hook("failure", is_async=True))
    def hopeless() -> None:
        raise leaseq.Bury("never")

    a, b = flaky.enqueue().id, hopeless.enqueue().id
    assert testing.drain(app, raise_errors=False) == testing.DrainResult(0, 3)
    assert [(j.attempts, j.state) for j, _, _ in calls.of("failure", a)] == [
        (1, "available"), (2, "dead")]
    assert [j.state for j, _, _ in calls.of("app_dead", a)] == ["dead"]
    [(info, exc, _)] = calls.of("failure", b)
    assert isinstance(exc, leaseq.Bury) and info.state == "dead"
    assert len(calls.of("app_dead", b)) == 1


def test_a_snooze_is_no_failure_and_calls_on_dead_only_past_max_snoozes(
    memory_app: leaseq.App, calls: Calls,
) -> None:
    app = memory_app
    app.queue.configure_queue("default", max_snoozes=2)

    @app.task(max_attempts=1, on_failure=calls.hook("failure"))
    def busy_upstream() -> None:
        raise leaseq.RetryAfter(0)  # due again at once: drain runs it again

    job = busy_upstream.enqueue().id
    assert testing.drain(app) == testing.DrainResult(0, 0, 3)  # nothing raised
    assert not calls.of("failure")  # RetryAfter is not a failed attempt
    [(dead, exc, _)] = calls.of("app_dead", job)
    assert isinstance(exc, leaseq.RetryAfter)
    assert (dead.state, dead.snoozes, dead.attempts) == ("dead", 2, 1)
    assert "snoozed 2 times" in (dead.error or "")


def test_retry_after_checks_its_arguments() -> None:
    assert leaseq.RetryAfter(timedelta(minutes=1), scope="queue").seconds == 60.0
    assert leaseq.RetryAfter(0).scope == "job"
    for bad in (-1, math.nan, math.inf, True, "30"):
        with pytest.raises(leaseq.InvalidArgument):
            leaseq.RetryAfter(bad)  # type: ignore[arg-type]
    with pytest.raises(leaseq.InvalidArgument, match="scope"):
        leaseq.RetryAfter(1, scope="tenant")  # type: ignore[arg-type]


def test_retry_after_with_partition_scope_fails_the_attempt_until_partitions_exist(
    memory_app: leaseq.App,
) -> None:
    app = memory_app

    @app.task(max_attempts=1)
    def per_tenant() -> None:
        raise leaseq.RetryAfter(5, scope="partition")

    job = per_tenant.enqueue().id
    assert testing.drain(app, raise_errors=False) == testing.DrainResult(0, 1)
    dead = app.queue.get(job)
    assert dead.state == "dead" and "partitions" in (dead.error or "")
    assert (dead.error_detail or {}).get("type") == "InvalidArgument"


def test_drain_logs_a_raising_hook_and_still_raises_the_handler_error(
    memory_app: leaseq.App, caplog: pytest.LogCaptureFixture
) -> None:
    app = memory_app

    def broken(job: leaseq.JobInfo, exc: BaseException) -> None:
        raise RuntimeError("hook is broken")

    @app.task(max_attempts=1, on_failure=broken)
    def fails() -> None:
        raise ValueError("boom")

    job = fails.enqueue().id
    with pytest.raises(ValueError, match="boom"):
        testing.drain(app)
    assert app.queue.get(job).state == "dead"
    [record] = [r for r in _hook_errors(caplog) if "on_failure" in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info is not None


def test_hooks_must_be_callable(memory_app: leaseq.App) -> None:
    with pytest.raises(leaseq.ConfigurationError, match="on_failure must be a function"):
        leaseq.App("memory://x", on_failure="notify")  # type: ignore[arg-type]
    with pytest.raises(leaseq.ConfigurationError, match="on_dead must be a function"):
        memory_app.task(on_dead=42)(lambda: None)  # type: ignore[call-overload]
