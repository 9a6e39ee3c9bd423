"""Faults around the queue rather than inside it: a client whose clock is wrong (S8) and
a database that refuses writes (S22)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import POSTGRES_URL, new_prefix, wait_for

ROOT = Path(__file__).resolve().parent.parent
SKEWED = (
    "import sys, time, runpy; _real, _skew = time.time, float(sys.argv.pop(1)); "
    "time.time = lambda: _real() + _skew; "
    "runpy.run_module('leaseq.cli', run_name='__main__')"
)


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_s8_a_worker_with_a_wrong_clock_keeps_database_time(
    q: leaseq.Queue, backend: str, url: str, prefix: str, skew: float, tmp_path: Path
) -> None:
    if backend == "memory":
        pytest.skip("memory:// lives in one process: it has no database clock")
    now = q.enqueue("w", {}, kind="ping").id
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LEASEQ_TEST_URL": url,
           "LEASEQ_TEST_PREFIX": prefix, "LEASEQ_TEST_LEASE": "1"}
    with open(tmp_path / "worker.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SKEWED, str(skew), "worker", "tests._worker_app:app",
             "--queues", "w", "--poll-interval", "0.1", "--reclaim-interval", "0.2",
             # Handed back, then buried a second of database time after the first sight:
             # a grace read on the skewed clock would bury at once or never.
             "--unknown-task-delay", "0.2", "--unknown-task-grace", "1"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: q.get(now).state == "dead", timeout=30)  # no "ping" task: buried
        # Enqueued once the worker runs (its start-up on a busy machine can take seconds):
        # an hour ahead or behind, the worker neither runs the delayed job early nor
        # loses its leases: every comparison uses the database's clock.
        late = q.enqueue("w", {}, kind="ping", delay=3).id
        time.sleep(1)  # a second of polls (every 0.1 s) that must not take the job
        assert q.get(late).state == "scheduled"
        wait_for(lambda: q.get(late).state == "dead", timeout=30)
        assert q.get(now).attempts == 1 and q.get(late).attempts == 1
        started = q.get(late).started_at
        created = q.get(late).created_at
        assert started is not None and (started - created).total_seconds() >= 2.9
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture
def readonly_postgres() -> Iterator[str]:
    """A database of its own that is switched to read-only after leaseq migrated it."""
    require("postgres")
    import psycopg

    name = f"leaseq_ro_{new_prefix().rstrip('_')}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_s22_a_read_only_database_fails_loudly_and_loses_nothing(readonly_postgres: str) -> None:
    import psycopg

    url = readonly_postgres
    with leaseq.connect(url) as q:
        q.migrate()
        kept = q.enqueue("w", {"n": 1}).id
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    with leaseq.connect(url) as q:
        # Unavailable, as a standby is (design §31): retried a few times, then reported.
        with pytest.raises(leaseq.BackendUnavailable, match="read-only"):
            q.enqueue("w", {"n": 2})
        with pytest.raises(leaseq.BackendUnavailable):
            q.dequeue("w")
        assert q.get(kept).state == "available"  # reads still work; nothing was half-written
        assert q.stats()["w"].available == 1
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = off")
    with leaseq.connect(url) as q:
        job = q.dequeue("w")[0]
        assert job.id == kept
        q.ack(job)
        time.sleep(0)  # the database is writable again and everything resumes
        assert q.get(kept).state == "completed"
