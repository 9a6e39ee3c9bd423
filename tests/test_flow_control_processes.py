"""Flow-control limits hold across worker processes (issue 13, item 1): two `leaseq
worker` processes of 8 slots each race for the jobs of one limited queue.

The limits are the queue's, enforced by the database inside every claim, so the handlers'
own logs must show them: never more jobs running at once than ``concurrency_limit`` (a
handler's logged span lies inside the time the database counts its job as running), and
never more starts in any one-second window than a ``rate_per_sec`` bucket allows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import (
    MYSQL_URL,
    POSTGRES_URL,
    REDIS_URL,
    drop_tables,
    new_prefix,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent


class Fleet:
    """A database, an event log and the worker processes of one test."""

    def __init__(self, backend: str, tmp: Path) -> None:
        self.backend = backend
        self.url = {"sqlite": f"sqlite:///{tmp}/limits.db", "postgres": POSTGRES_URL,
                    "mysql": MYSQL_URL, "redis": REDIS_URL}[backend]
        self.prefix = new_prefix()
        self.log = tmp / "events.jsonl"
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []
        self.q = leaseq.connect(self.url, table_prefix=self.prefix)
        self.q.migrate()

    def start(self, workers: int, queue: str) -> None:
        env = {**os.environ, "LEASEQ_TEST_URL": self.url, "LEASEQ_TEST_PREFIX": self.prefix,
               "LEASEQ_TEST_LOG": str(self.log), "PYTHONPATH": str(ROOT)}
        for n in range(workers):
            with open(self.tmp / f"worker{n}.log", "w") as out:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "leaseq.cli", "worker", "tests._limits_app:app",
                     "--queues", queue, "--concurrency", "8", "--poll-interval", "0.2"],
                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True))

    def events(self) -> list[dict[str, float]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def finished(self, queue: str, n: int) -> bool:
        stats = self.q.stats().get(queue)
        return stats is not None and stats.completed == n

    def outputs(self) -> str:
        return "\n".join((self.tmp / f"worker{i}.log").read_text()
                         for i in range(len(self.procs)))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.q.close()
        drop_tables(self.backend, self.prefix)


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    require(request.param)
    scenario = Fleet(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def most_at_once(events: list[dict[str, float]]) -> int:
    """The most handlers running at one moment, from their start and end events (an end
    and a start at the same instant do not overlap)."""
    edges = sorted((e["t"], 0 if e["event"] == "end" else 1) for e in events)
    running = peak = 0
    for _, is_start in edges:
        running += 1 if is_start else -1
        peak = max(peak, running)
    return peak


def test_concurrency_limit_holds_across_worker_processes(fleet: Fleet) -> None:
    jobs = 16
    fleet.q.configure_queue("limited", concurrency_limit=2)
    fleet.q.enqueue_many([{"queue": "limited", "kind": "hold", "payload": {"seconds": 0.15}}
                          for _ in range(jobs)])
    fleet.start(2, "limited")
    wait_for(lambda: fleet.finished("limited", jobs), timeout=60,
             message=f"{jobs} jobs completed; workers said:\n{fleet.outputs()}")
    events = fleet.events()
    starts = [e for e in events if e["event"] == "start"]
    assert sorted(e["job"] for e in starts) == sorted({e["job"] for e in starts})  # once each
    assert len(starts) == jobs
    assert most_at_once(events) == 2  # never more than the limit, and the limit reached


def test_rate_limit_holds_across_worker_processes(fleet: Fleet) -> None:
    jobs = 30
    fleet.q.configure_queue("rated", rate_per_sec=10, rate_burst=1)
    fleet.q.enqueue_many([{"queue": "rated", "kind": "tick", "payload": {}}
                          for _ in range(jobs)])
    fleet.start(2, "rated")
    wait_for(lambda: fleet.finished("rated", jobs), timeout=60,
             message=f"{jobs} jobs completed; workers said:\n{fleet.outputs()}")
    times = sorted(e["t"] for e in fleet.events() if e["event"] == "start")
    assert len(times) == jobs
    # A bucket of 1 refilled at 10 a second allows 1 + 10 starts in any one second.
    busiest = max(sum(1 for t in times[i:] if t < start + 1.0)
                  for i, start in enumerate(times))
    assert busiest <= 11, times
    # And the limit is what paced them: 30 starts need about 2.9 s, not less.
    assert times[-1] - times[0] >= 2.5, times
