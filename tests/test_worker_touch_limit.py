"""A heartbeat refused by the queue's touch limits stops the job as a lost lease would:
the handler is told, its outcome is never written, and a WARNING says why."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import wait_for
from tests.test_worker import running


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.App]:
    application = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)
    yield application
    application.close()


def test_a_refused_heartbeat_stops_the_job_and_writes_no_outcome(
    app: leaseq.App, caplog: pytest.LogCaptureFixture
) -> None:
    stopped: list[bool] = []
    app.queue.configure_queue("touchy", max_touches=1)

    @app.task(queue="touchy", lease=0.6)  # a heartbeat every 0.2 s: the second is refused
    def long() -> str:
        ctx = leaseq.current_job()
        assert ctx is not None
        deadline = time.monotonic() + 30
        while not ctx.should_stop and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped.append(ctx.lease_lost)
        return "finished"  # never recorded

    caplog.set_level(logging.WARNING, logger="leaseq.worker")
    job = long.enqueue().id
    with running(app, lease=0.6, reclaim_interval=3600):
        wait_for(lambda: stopped, message="the handler told to stop")
        wait_for(lambda: _warnings(caplog, "touch limit"), message="the warning")
    assert stopped == [True]
    info = app.queue.get(job)
    assert info.state == "running" and info.result is None  # left to run out, not acked
    [warning] = _warnings(caplog, "touch limit")
    assert warning.levelno == logging.WARNING and "max_touches" in warning.getMessage()


def test_heartbeats_capped_by_max_lease_keep_the_job_alive(app: leaseq.App) -> None:
    # The task asks for 60 s leases, the queue caps every lease and extension at 0.9 s: the
    # worker must renew by what the database granted, not by what it asked for, or it
    # would believe the lease good for a minute while it runs out under another claimer.
    app.queue.configure_queue("capped", max_lease=0.9)

    @app.task(queue="capped", lease=60)
    def slow() -> str:
        time.sleep(2.5)
        return "done"

    job = slow.enqueue().id
    with running(app, reclaim_interval=0.2):
        wait_for(lambda: app.queue.get(job).state == "completed", timeout=20,
                 message="the capped job to complete")
    info = app.queue.get(job)
    assert (info.result, info.reserves, info.timeouts) == ("done", 1, 0)
    assert info.lease == 60


def test_touches_inside_min_touch_interval_do_not_fool_the_self_fencing(
    app: leaseq.App, caplog: pytest.LogCaptureFixture
) -> None:
    # Heartbeats every 0.3 s that the queue answers without extending (min interval 60 s):
    # the lease runs out after 0.9 s, and the worker must notice rather than run on.
    app.queue.configure_queue("lazy", min_touch_interval=60)
    stopped: list[bool] = []

    @app.task(queue="lazy", lease=0.9)
    def long() -> None:
        ctx = leaseq.current_job()
        assert ctx is not None
        deadline = time.monotonic() + 30
        while not ctx.should_stop and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped.append(ctx.lease_lost)

    caplog.set_level(logging.WARNING, logger="leaseq.worker")
    long.enqueue()
    with running(app, reclaim_interval=3600):
        wait_for(lambda: stopped, message="the handler told to stop")
    assert stopped == [True]
    assert _warnings(caplog, "no lease renewal in time")


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "leaseq.worker" and text in r.getMessage()]
