"""Which backoff a worker retries a failed job with (issue 24, item 1): given on the call
(``Task.options(backoff=...)``) > given on the task (``@app.task(backoff=...)``) > the
queue's stored settings (``configure_queue``, ``leaseq queue set``) > the app's default.

Each job fails once in a real `leaseq worker` process; the test reads when the job is
due again, ``available_at - failed_at``, both stamped by the database clock in the same
write, instead of waiting the delay out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from leaseq import testing
from tests import _backoff_app
from tests._processes import ROOT, WorkerFleet
from tests.conftest import require
from tests.helpers import running, wait_for


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerFleet]:
    require(request.param)
    scenario = WorkerFleet(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def retry_delay(q: leaseq.Queue, job_id: int) -> float | None:
    """Seconds from the job's first failure to when it is due again; None until then."""
    info = q.get(job_id)
    if info.attempts != 1 or info.state != "scheduled":
        return None
    assert info.available_at is not None and info.failed_at is not None
    return (info.available_at - info.failed_at).total_seconds()


def enqueue_each_way(app: leaseq.App) -> dict[int, float]:
    """One job per rule of the order, with the retry delay it must get."""
    fails = app.task(queue="bk", name="fails")(_backoff_app.fails.fn)
    own = app.task(queue="bk", name="fails_own", backoff=_backoff_app.TASK_BACKOFF)(
        _backoff_app.fails_own.fn)
    plain = app.task(queue="plain", name="fails_plain")(_backoff_app.fails_plain.fn)
    per_call = leaseq.Backoff(base=90, cap=90, jitter=0)
    return {
        fails.enqueue().id: 500,  # the queue's stored backoff over the app's
        own.enqueue().id: _backoff_app.TASK_BACKOFF.base,  # the task's over the queue's
        fails.options(backoff=per_call).enqueue().id: 90,  # the call's over the queue's
        own.options(backoff=leaseq.Backoff(60, 60, 0)).enqueue().id: 60,  # over the task's
        plain.enqueue().id: _backoff_app.APP_BACKOFF.base,  # no queue setting: the app's
        # A producer without the task sets the header that options(backoff=) sets.
        app.queue.enqueue("bk", kind="fails", headers={"leaseq-backoff": "70,70,0"}).id: 70,
    }


def test_a_worker_process_retries_in_the_order_call_task_queue_app(
        fleet: WorkerFleet) -> None:
    # As a user would: `leaseq queue set bk --base-backoff 500 --max-backoff 500 --jitter 0`.
    subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "queue", "set", "bk", "--base-backoff", "500",
         "--max-backoff", "500", "--jitter", "0", "--url", fleet.url,
         "--table-prefix", fleet.prefix],
        check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True)
    app = leaseq.App(fleet.url, table_prefix=fleet.prefix)
    try:
        wanted = enqueue_each_way(app)
    finally:
        app.close()
    fleet.start("tests._backoff_app:app", "--poll-interval", "0.1")
    for job_id, delay in wanted.items():
        got = wait_for(lambda job_id=job_id: retry_delay(fleet.q, job_id), timeout=30,
                       message=f"job {job_id} failed once; workers said:\n{fleet.outputs()}")
        assert got == pytest.approx(delay, abs=1.5), (job_id, got, delay)


def test_an_in_process_worker_follows_the_same_order(q: leaseq.Queue, url: str,
                                                     prefix: str) -> None:
    """Every backend, memory included (a worker thread of this process)."""
    q.configure_queue("bk", base_backoff=500, max_backoff=500, jitter=0)
    app = leaseq.App(url, table_prefix=prefix, backoff=_backoff_app.APP_BACKOFF)
    try:
        wanted = enqueue_each_way(app)
        with running(app):
            for job_id, delay in wanted.items():
                got = wait_for(lambda job_id=job_id: retry_delay(app.queue, job_id))
                assert got == pytest.approx(delay, abs=1.5), (job_id, got, delay)
    finally:
        app.close()


def test_testing_drain_follows_the_same_order(q: leaseq.Queue, url: str,
                                              prefix: str) -> None:
    """``leaseq.testing.drain`` records failures as the worker does."""
    q.configure_queue("bk", base_backoff=500, max_backoff=500, jitter=0)
    app = leaseq.App(url, table_prefix=prefix, backoff=_backoff_app.APP_BACKOFF)
    try:
        wanted = enqueue_each_way(app)
        assert testing.drain(app, ["bk", "plain"], raise_errors=False).failed == len(wanted)
        got = {job_id: retry_delay(app.queue, job_id) for job_id in wanted}
        assert got == pytest.approx(wanted, abs=1.5)
    finally:
        app.close()
