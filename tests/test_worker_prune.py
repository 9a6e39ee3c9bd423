"""The worker keeps history unless asked to prune it: ``Worker(prune_after=...)`` and
``leaseq worker --prune-history-after``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from leaseq import testing
from tests.conftest import require
from tests.helpers import new_prefix, wait_for
from tests.test_worker import running, state

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.App]:
    """Only the worker's maintenance pass reclaims (``dequeue`` does not), so a reclaimed
    job shows that a pass ran."""
    application = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)
    yield application
    application.close()


def finished_job(app: leaseq.App) -> int:
    """A job completed now, kept in history."""

    @app.task(queue="p", name="noop")
    def noop() -> None: ...

    job = noop.enqueue().id
    assert testing.drain(app, "p") == testing.DrainResult(1, 0)
    return job


def gone(q: leaseq.Queue, job_id: int) -> bool:
    try:
        q.get(job_id)
    except leaseq.JobNotFound:
        return True
    return False


def test_history_is_kept_by_default(app: leaseq.App) -> None:
    old = finished_job(app)
    stuck = app.queue.enqueue("p", {}, kind="noop").id
    assert app.queue.dequeue("p", worker_id="crashed", lease=0.2)  # its holder is gone
    assert leaseq.Worker(app).prune_after is None
    with running(app, reclaim_interval=0.05):
        # A maintenance pass reclaimed the stuck job, and a pass that would prune does
        # so right after it reclaims: had this worker pruned, ``old`` would be gone now.
        wait_for(lambda: state(app, stuck, "completed"), message="the reclaimed job done")
    assert app.queue.get(old).state == "completed"


def test_prune_after_prunes_history(app: leaseq.App) -> None:
    old = finished_job(app)
    with running(app, reclaim_interval=0.05, prune_after=0):
        wait_for(lambda: gone(app.queue, old), message="history pruned")


def test_the_cli_flag_prunes_history(tmp_path: Path) -> None:
    url, prefix = f"sqlite:///{tmp_path}/w.db", new_prefix()
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()
        job = q.enqueue("work", {"seconds": 0}, kind="sleepy").id
        [held] = q.dequeue("work")
        q.ack(held)
        env = {**os.environ, "LEASEQ_TEST_URL": url, "LEASEQ_TEST_PREFIX": prefix,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        with open(tmp_path / "worker.log", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leaseq.cli", "worker", "tests._worker_app:app",
                 "--reclaim-interval", "0.05", "--prune-history-after", "0s"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )
        try:
            wait_for(lambda: gone(q, job) or proc.poll() is not None, timeout=30,
                     message="the worker pruned history")
            assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert proc.returncode == 0
    assert "pruned 1 history rows" in (tmp_path / "worker.log").read_text()


def test_the_cli_flag_takes_a_duration_and_is_documented() -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "leaseq.cli", "worker", *args],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)

    bad = cli("tests._worker_app:app", "--prune-history-after", "soon")
    assert bad.returncode == 2
    assert "'soon' is not a duration like 90s, 15m, 12h or 7d" in bad.stderr
    assert "--prune-history-after DURATION" in cli("--help").stdout
