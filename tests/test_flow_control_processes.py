"""Flow-control limits hold across worker processes (issue 13, item 1): two `leaseq
worker` processes of 8 slots each race for the jobs of one limited queue.

The limits are the queue's, enforced by the database inside every claim, so the handlers'
own logs must show them: never more jobs running at once than ``concurrency_limit`` (a
handler's logged span lies inside the time the database counts its job as running), and
never more starts in any one-second window than a ``rate_per_sec`` bucket allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._processes import WorkerFleet
from tests.conftest import require
from tests.helpers import wait_for

WORKER = ("tests._limits_app:app", "--concurrency", "8", "--poll-interval", "0.2")


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerFleet]:
    require(request.param)
    scenario = WorkerFleet(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def finished(fleet: WorkerFleet, queue: str, n: int) -> bool:
    stats = fleet.q.stats().get(queue)
    return stats is not None and stats.completed == n


def most_at_once(events: list[dict[str, Any]]) -> int:
    """The most handlers running at one moment, from their start and end events (an end
    and a start at the same instant do not overlap)."""
    edges = sorted((e["t"], 0 if e["event"] == "end" else 1) for e in events)
    running = peak = 0
    for _, is_start in edges:
        running += 1 if is_start else -1
        peak = max(peak, running)
    return peak


def test_concurrency_limit_holds_across_worker_processes(fleet: WorkerFleet) -> None:
    jobs = 16
    fleet.q.configure_queue("limited", concurrency_limit=2)
    fleet.q.enqueue_many([{"queue": "limited", "kind": "hold", "payload": {"seconds": 0.15}}
                          for _ in range(jobs)])
    for _ in range(2):
        fleet.start(*WORKER, "--queues", "limited")
    wait_for(lambda: finished(fleet, "limited", jobs), timeout=60,
             message=f"{jobs} jobs completed; workers said:\n{fleet.outputs()}")
    events = fleet.events()
    starts = [e for e in events if e["event"] == "start"]
    assert sorted(e["job"] for e in starts) == sorted({e["job"] for e in starts})  # once each
    assert len(starts) == jobs
    assert most_at_once(events) == 2  # never more than the limit, and the limit reached


def test_rate_limit_holds_across_worker_processes(fleet: WorkerFleet) -> None:
    jobs = 30
    fleet.q.configure_queue("rated", rate_per_sec=10, rate_burst=1)
    fleet.q.enqueue_many([{"queue": "rated", "kind": "tick", "payload": {}}
                          for _ in range(jobs)])
    for _ in range(2):
        fleet.start(*WORKER, "--queues", "rated")
    wait_for(lambda: finished(fleet, "rated", jobs), timeout=60,
             message=f"{jobs} jobs completed; workers said:\n{fleet.outputs()}")
    times = sorted(e["t"] for e in fleet.events() if e["event"] == "start")
    assert len(times) == jobs
    # A bucket of 1 refilled at 10 a second allows 1 + 10 starts in any one second.
    busiest = max(sum(1 for t in times[i:] if t < start + 1.0)
                  for i, start in enumerate(times))
    assert busiest <= 11, times
    # And the limit is what paced them: 30 starts need about 2.9 s, not less.
    assert times[-1] - times[0] >= 2.5, times
