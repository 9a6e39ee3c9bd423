"""The worker in this process, on every backend: outcomes, timeouts, cancellation, pause,
concurrency limits, wake-ups and graceful stop. Real-process crashes and signals are in
test_worker_processes.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

import leaseq
from tests.helpers import running, wait_for


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.App]:
    """An App on the test's fresh tables (``q`` migrated them)."""
    application = leaseq.App(url, table_prefix=prefix, lease=5,
                             backoff=leaseq.Backoff(base=0.05, cap=0.1, jitter=0))
    yield application
    application.close()


def state(app: leaseq.App, job_id: int, *wanted: str) -> leaseq.JobInfo | None:
    info = app.queue.get(job_id)
    return info if info.state in wanted else None


def test_sync_and_async_tasks_complete_with_their_results(app: leaseq.App) -> None:
    @app.task(queue="w")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(queue="w")
    async def mul(x: int, y: int) -> int:
        await asyncio.sleep(0.01)
        return x * y

    a, b = add.enqueue(x=2, y=3).id, mul.enqueue(x=2, y=3).id
    with running(app):
        assert wait_for(lambda: state(app, a, "completed")).result == 5
        assert wait_for(lambda: state(app, b, "completed")).result == 6


def test_failures_retry_with_backoff_then_go_dead_with_the_traceback(app: leaseq.App) -> None:
    seen: list[int] = []

    @app.task(queue="w", max_attempts=3)
    def fails_twice() -> str:
        ctx = leaseq.current_job()
        assert ctx is not None
        seen.append(ctx.job.attempts)
        if ctx.job.attempts < 3:
            raise ConnectionError("upstream busy")
        return "ok"

    @app.task(queue="w", max_attempts=2)
    def always_fails() -> None:
        raise ValueError("bad record 7")

    ok, bad = fails_twice.enqueue().id, always_fails.enqueue().id
    with running(app):
        assert wait_for(lambda: state(app, ok, "completed")).attempts == 3
        dead = wait_for(lambda: state(app, bad, "dead"))
    assert seen == [1, 2, 3]
    assert dead.attempts == 2
    assert "ValueError: bad record 7" in (dead.error or "")
    assert "Traceback" in (dead.error or "")
    detail = dead.error_detail or {}
    assert (detail.get("type"), detail.get("message")) == ("ValueError", "bad record 7")
    assert "always_fails" in detail.get("traceback", "")


def test_retry_bury_and_discard_signals(app: leaseq.App) -> None:
    @app.task(queue="w")
    def later() -> None:
        raise leaseq.Retry(delay=3600)

    @app.task(queue="w")
    def hopeless() -> None:
        raise leaseq.Bury("needs a human")

    @app.task(queue="w")
    def pointless() -> None:
        raise leaseq.Discard("stale request")

    r, b, d = later.enqueue().id, hopeless.enqueue().id, pointless.enqueue().id
    with running(app):
        assert wait_for(lambda: state(app, r, "scheduled")).attempts == 1
        assert wait_for(lambda: state(app, b, "dead")).error == "needs a human"
        assert wait_for(lambda: state(app, d, "discarded")).error == "stale request"


def test_a_job_of_an_unknown_task_is_handed_back_then_buried_after_the_grace(
    app: leaseq.App,
) -> None:
    """A rolling deploy: a job of a task this worker does not know yet is handed back (no
    attempt used), with when it was first seen; it goes dead only once it has stayed
    unknown for the grace, counted from then."""
    @app.task(queue="w")
    def known() -> None: ...

    job = app.queue.enqueue("w", {}, kind="gone.task").id
    with running(app, unknown_task_delay=0.2, unknown_task_grace=1.5):
        seen = wait_for(lambda: app.queue.get(job).releases >= 1 and app.queue.get(job))
        assert seen.state in ("scheduled", "available", "running")
        assert "no task named 'gone.task'" in (seen.error or "")
        detail = seen.error_detail or {}
        assert (detail["type"], detail["kind"]) == ("UnknownTask", "gone.task")
        first_seen = datetime.fromisoformat(detail["first_seen"])
        assert seen.attempts == 0  # a hand-back gives its attempt back
        dead = wait_for(lambda: state(app, job, "dead"), timeout=15)
    assert "no task named 'gone.task'" in (dead.error or "")
    assert "handed back for 1.5 s" in (dead.error or "")
    assert dead.releases >= 2 and dead.attempts == 1  # every hand-back gave its attempt back
    # Buried no sooner than the grace after the first sight, both by the database's clock
    # (a check that holds however late this test looked).
    assert dead.updated_at is not None  # when it went dead
    assert (dead.updated_at - first_seen).total_seconds() >= 1.5


def test_a_job_of_an_unknown_task_delayed_past_the_grace_is_handed_back_first(
    app: leaseq.App,
) -> None:
    """The grace counts from the first sight, not from created_at: a job enqueued long
    before it comes due is not buried on sight."""
    @app.task(queue="w")
    def known() -> None: ...

    job = app.queue.enqueue("w", {}, kind="later.task", delay=1.0).id
    with running(app, unknown_task_delay=30, unknown_task_grace=0.5):
        seen = wait_for(lambda: app.queue.get(job).releases >= 1 and app.queue.get(job))
    assert seen.state == "scheduled"


def test_a_job_of_an_unknown_task_with_no_grace_goes_dead_at_once(app: leaseq.App) -> None:
    @app.task(queue="w")
    def known() -> None: ...

    job = app.queue.enqueue("w", {}, kind="gone.task").id
    kindless = app.queue.enqueue("w", {}).id
    with running(app, unknown_task_grace=0):
        dead = wait_for(lambda: state(app, job, "dead"))
        nameless = wait_for(lambda: state(app, kindless, "dead"))
    assert "no task named 'gone.task'" in (dead.error or "")
    assert dead.attempts == 1  # no looping
    assert "the job has no kind" in (nameless.error or "")


@pytest.mark.parametrize("is_async", [True, False])
def test_a_stored_traceback_starts_at_the_users_frame(app: leaseq.App, is_async: bool) -> None:
    """leaseq's own frames (the job's task, the handler thread, asyncio) say nothing about
    the failure: the stored traceback starts at the handler."""
    if is_async:
        @app.task(queue="w", max_attempts=1, name="explodes")
        async def explodes_async() -> None:
            raise ValueError("boom")
    else:
        @app.task(queue="w", max_attempts=1, name="explodes")
        def explodes() -> None:
            raise ValueError("boom")

    job = app.queue.enqueue("w", {}, kind="explodes").id
    with running(app):
        dead = wait_for(lambda: state(app, job, "dead"))
    for trace in ((dead.error_detail or {})["traceback"], dead.error or ""):
        frames = [line for line in trace.splitlines() if line.lstrip().startswith("File ")]
        assert frames and __file__ in frames[0], trace
        assert "leaseq" not in "".join(f.split(__file__)[0] for f in frames), trace
        assert trace.rstrip().endswith("ValueError: boom")


@pytest.mark.parametrize("is_async", [True, False])
def test_timeout_counts_as_a_failure(app: leaseq.App, is_async: bool) -> None:
    if is_async:
        @app.task(queue="w", timeout=0.2, max_attempts=1)
        async def slow() -> None:
            await asyncio.sleep(30)
    else:
        @app.task(queue="w", timeout=0.2, max_attempts=1)
        def slow() -> None:
            ctx = leaseq.current_job()
            while ctx is not None and not ctx.should_stop:
                time.sleep(0.01)

    job = slow.enqueue().id
    with running(app):
        dead = wait_for(lambda: state(app, job, "dead"))
    assert "timeout of 0.2 s" in (dead.error or "")


def test_cancelling_running_jobs_stops_them_and_records_cancelled(app: leaseq.App) -> None:
    seen_by_sync: list[bool] = []

    @app.task(queue="w", lease=0.6)
    async def long_async() -> None:
        await asyncio.sleep(60)

    @app.task(queue="w", lease=0.6)
    def long_sync() -> None:
        ctx = leaseq.current_job()
        assert ctx is not None
        deadline = time.monotonic() + 30
        while not ctx.should_stop and time.monotonic() < deadline:
            time.sleep(0.01)
        seen_by_sync.append(ctx.cancelled)

    a, s = long_async.enqueue().id, long_sync.enqueue().id
    with running(app):
        wait_for(lambda: state(app, a, "running") and state(app, s, "running"))
        assert app.queue.cancel(a) == "running"
        assert app.queue.cancel(s) == "running"
        wait_for(lambda: state(app, a, "cancelled"))
        wait_for(lambda: state(app, s, "cancelled"))
        wait_for(lambda: seen_by_sync)
    assert seen_by_sync == [True]


def test_a_paused_queue_is_skipped_until_resumed(app: leaseq.App) -> None:
    @app.task(queue="paused")
    def held() -> None: ...

    @app.task(queue="open")
    def flowing() -> None: ...

    app.queue.pause("paused")
    h, f = held.enqueue().id, flowing.enqueue().id
    with running(app):
        wait_for(lambda: state(app, f, "completed"))
        assert app.queue.get(h).state == "available"
        app.queue.resume("paused")
        wait_for(lambda: state(app, h, "completed"))


def test_retry_after_holds_the_queue_on_every_worker_and_uses_no_attempt(
    app: leaseq.App,
) -> None:
    """Issue 33 item 5: a handler's ``RetryAfter(1, scope="queue")`` holds its whole queue
    on both workers for that second, by the database's clock (every job of it starts at
    or after ``paused_until``), while another queue runs meanwhile; idle workers wake at
    the pause's end (their poll interval is far longer); and the ``max_attempts=1`` job
    completes on its second run, having used one attempt."""

    @app.task(queue="upstream", max_attempts=1)
    def call_upstream(n: int) -> int:
        ctx = leaseq.current_job()
        assert ctx is not None
        if ctx.job.snoozes == 0:
            raise leaseq.RetryAfter(1, scope="queue")  # the upstream said 429, Retry-After: 1
        return n

    @app.task(queue="local")
    def local(n: int) -> int:
        return n

    def finished(ids: list[int]) -> list[leaseq.JobInfo] | None:
        infos = [app.queue.get(job_id) for job_id in ids]
        return infos if all(i.state == "completed" for i in infos) else None

    gate = call_upstream.enqueue(n=0).id
    with running(app, concurrency=2, poll_interval=5), \
            running(app, concurrency=2, poll_interval=5):
        wait_for(lambda: app.queue.get(gate).snoozes == 1, message="the snooze")
        until = app.queue.stats()["upstream"].paused_until
        assert until is not None
        held = [r.id for r in call_upstream.enqueue_many([{"n": n} for n in range(1, 7)])]
        free = [r.id for r in local.enqueue_many([{"n": n} for n in range(3)])]
        ran = wait_for(lambda: finished([gate, *held, *free]), timeout=20,
                       message="every job")
    info = {i.id: i for i in ran}
    starts = [info[job_id].started_at for job_id in held]
    assert all(start is not None and start >= until for start in starts), (until, starts)
    # Woken by next_due at the pause's end, not by the 5 s poll.
    assert max(s for s in starts if s is not None) < until + timedelta(seconds=2.5)
    assert all((info[j].started_at or until) < until for j in free)  # ran meanwhile
    done = info[gate]
    assert (done.attempts, done.snoozes, done.result) == (1, 1, 0)
    assert done.finished_at is not None and done.finished_at >= until
    assert not app.queue.stats()["upstream"].paused


def test_never_runs_more_jobs_than_its_concurrency(app: leaseq.App) -> None:
    now = {"running": 0, "peak": 0}
    lock = threading.Lock()

    @app.task(queue="w")
    async def busy() -> None:
        with lock:
            now["running"] += 1
            now["peak"] = max(now["peak"], now["running"])
        await asyncio.sleep(0.05)
        with lock:
            now["running"] -= 1

    busy.enqueue_many([{} for _ in range(30)])
    with running(app, concurrency=3) as worker:
        wait_for(lambda: app.queue.stats()["w"].completed == 30, timeout=30)
        # A job leaves the worker's count just after its ack is written.
        wait_for(lambda: len(worker.inflight) == 0, message="nothing left in flight")
    assert now["peak"] == 3


def test_a_local_enqueue_wakes_an_idle_worker_at_once(app: leaseq.App) -> None:
    @app.task(queue="w")
    def ping() -> None: ...

    with running(app, poll_interval=60):  # without the wake-up this would take a minute
        time.sleep(0.3)  # let it go idle
        job = ping.enqueue().id
        wait_for(lambda: state(app, job, "completed"), timeout=10)


def test_stop_lets_running_jobs_finish(app: leaseq.App) -> None:
    @app.task(queue="w")
    def slowish() -> str:
        time.sleep(0.5)
        return "finished"

    job = slowish.enqueue().id
    with running(app, grace=10):
        wait_for(lambda: state(app, job, "running"))
    assert app.queue.get(job).state == "completed"


def test_stop_gives_back_jobs_that_outlive_the_grace_period(app: leaseq.App) -> None:
    @app.task(queue="w")
    async def endless() -> None:
        await asyncio.sleep(60)

    job = endless.enqueue().id
    with running(app, grace=0.2):
        wait_for(lambda: state(app, job, "running"))
    info = app.queue.get(job)
    assert info.state == "available"
    assert info.attempts == 0  # released without penalty


def enqueue_elsewhere(url: str, prefix: str) -> int:
    """A "ping" job enqueued by another process (`leaseq enqueue`): no in-process wake-up."""
    out = subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "enqueue", "w", "{}", "--kind", "ping",
         "--url", url, "--table-prefix", prefix, "--json"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    return int(json.loads(out.stdout)["id"])


def test_a_push_wake_up_wakes_a_worker_in_another_process(
    backend: str, app: leaseq.App, url: str, prefix: str
) -> None:
    if backend not in ("postgres", "redis", "sqlite"):
        pytest.skip("push wake-ups: PostgreSQL LISTEN/NOTIFY, Redis pub/sub, SQLite's watch")

    @app.task(queue="w", name="ping")
    def ping() -> None: ...

    with running(app, poll_interval=60):
        time.sleep(0.3)
        job = enqueue_elsewhere(url, prefix)
        wait_for(lambda: state(app, job, "completed"), timeout=10)


def test_a_killed_listen_connection_comes_back_and_polling_covers_the_gap(
    backend: str, app: leaseq.App, url: str, prefix: str
) -> None:
    if backend != "postgres":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    import psycopg

    @app.task(queue="w", name="ping")
    def ping() -> None: ...

    def listeners() -> list[int]:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE query = %s",
                [f'LISTEN "{prefix}jobs"'],
            ).fetchall()
        return [pid for (pid,) in rows]

    with running(app, poll_interval=60):
        first = wait_for(listeners, message="the worker's LISTEN connection")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", [first[0]])
        # The worker reconnects by itself, and the new listener hears enqueues again.
        wait_for(lambda: (pids := listeners()) and pids != first, timeout=30,
                 message="a new LISTEN connection")
        time.sleep(0.3)
        job = enqueue_elsewhere(url, prefix)
        wait_for(lambda: state(app, job, "completed"), timeout=10)


def test_default_concurrency_is_wide_for_async_tasks_and_ten_with_plain_ones() -> None:
    app = leaseq.App("memory://default-concurrency")

    @app.task(queue="a", name="a")
    async def a() -> None: ...

    @app.task(queue="b", name="b")
    def b() -> None: ...

    assert leaseq.Worker(app, ["a"]).concurrency == 1000
    assert leaseq.Worker(app, ["b"]).concurrency == 10
    assert leaseq.Worker(app).concurrency == 10  # both queues: one task needs a thread each
    assert leaseq.Worker(app, ["a"], concurrency=3).concurrency == 3


def test_plain_handlers_lease_jobs_ahead_yet_never_run_more_than_concurrency(
    app: leaseq.App,
) -> None:
    now = {"running": 0, "peak": 0, "held": 0}
    lock = threading.Lock()
    seen: list[leaseq.Worker] = []

    @app.task(queue="w")
    def quick() -> None:
        with lock:
            now["running"] += 1
            now["peak"] = max(now["peak"], now["running"])
            now["held"] = max(now["held"], seen[0].running)
        time.sleep(0.001)  # long enough for the three threads to overlap
        with lock:
            now["running"] -= 1

    with running(app, concurrency=3) as worker:
        seen.append(worker)
        quick.enqueue_many([{} for _ in range(600)])
        wait_for(lambda: app.queue.stats()["w"].completed == 600, timeout=60)
    assert now["peak"] <= 3
    assert now["held"] > 3  # quick handlers: one claim leased jobs for the threads to come


def test_slow_plain_handlers_are_not_leased_ahead(app: leaseq.App) -> None:
    @app.task(queue="w")
    def slow() -> None:
        time.sleep(0.25)

    slow.enqueue_many([{} for _ in range(8)])
    held: list[int] = []
    with running(app, concurrency=2) as worker:
        def done() -> bool:
            held.append(worker.running)
            return app.queue.stats()["w"].completed == 8

        wait_for(done, timeout=30, interval=0.01)
    assert max(held) <= 2
