"""`leaseq worker --processes N`: a supervisor and N worker processes, run as real processes
on real databases, stopped, killed and scraped. Jobs are tests/_worker_app.py's, whose
handlers log each start and end (with the pid) to one O_APPEND file: its line order is the
order in which the events happened across every process.
"""

from __future__ import annotations

import os
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from leaseq.cli import cli
from leaseq.metrics import merge_expositions
from leaseq.worker.supervisor import (
    RESTART_DELAY,
    RESTART_DELAY_MAX,
    cpu_count,
    restart_delay,
)
from tests._processes import WorkerFleet
from tests.conftest import require
from tests.helpers import wait_for

APP = "tests._worker_app:app"
FAST = ("--poll-interval", "0.1", "--reclaim-interval", "0.3", "--log-level", "INFO")


@pytest.fixture(params=["sqlite", "postgres"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerFleet]:
    require(request.param)
    scenario = WorkerFleet(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


@pytest.fixture
def sqlite_fleet(tmp_path: Path) -> Iterator[WorkerFleet]:
    scenario = WorkerFleet("sqlite", tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def children(fleet: WorkerFleet, n: int = 0) -> dict[int, list[int]]:
    """Each worker slot's pids, in start order, from supervisor ``n``'s log."""
    found: dict[int, list[int]] = {}
    for slot, pid in re.findall(r"worker process (\d+) started \(pid (\d+)\)", fleet.output(n)):
        found.setdefault(int(slot), []).append(int(pid))
    return found


def fetching(fleet: WorkerFleet, n: int = 0) -> int:
    """How many worker processes of supervisor ``n`` have started fetching."""
    return len(re.findall(r"leaseq-worker-\d+ leaseq.worker: worker \S+ started",
                          fleet.output(n)))


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def completed(fleet: WorkerFleet, n: int) -> bool:
    return fleet.q.stats()["work"].completed == n


def enqueue(fleet: WorkerFleet, n: int, seconds: float, first: int = 0) -> list[int]:
    return [r.id for r in fleet.q.enqueue_many(
        [{"queue": "work", "kind": "sleepy", "payload": {"seconds": seconds, "n": first + i}}
         for i in range(n)])]


def assert_never_twice_at_once(events: list[dict[str, Any]]) -> None:
    """No job's handler starts while another run of it is in its handler (by log order)."""
    open_runs: set[int] = set()
    for event in events:
        if event["event"] == "start":
            assert event["job"] not in open_runs, f"job {event['job']} ran twice at once"
            open_runs.add(event["job"])
        elif event["event"] == "end":
            open_runs.discard(event["job"])


def scrape(fleet: WorkerFleet) -> str:
    port = re.search(r"leaseq-supervisor leaseq.metrics: metrics at http://127.0.0.1:(\d+)/",
                     fleet.output(0))
    assert port, fleet.output(0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port[1]}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


# -- multi-process scenarios -------------------------------------------------------------


def test_three_processes_drain_once_merge_metrics_and_stop_gracefully(
        fleet: WorkerFleet) -> None:
    supervisor = fleet.start(APP, "--processes", "3", "--concurrency", "2", "--grace", "20",
                             "--metrics-port", "0", *FAST)
    wait_for(lambda: fetching(fleet) == 3, timeout=30, message="3 processes fetching")
    pids = {pid for [pid] in children(fleet).values()}
    assert len(pids) == 3
    jobs = enqueue(fleet, 60, seconds=0.05)
    wait_for(lambda: completed(fleet, 60), timeout=30, message="60 jobs completed")

    events = fleet.events()
    assert sorted(e["job"] for e in events if e["event"] == "start") == sorted(jobs)
    assert sorted(e["job"] for e in events if e["event"] == "end") == sorted(jobs)
    assert {e["attempt"] for e in events} == {1}
    assert_never_twice_at_once(events)
    assert {e["pid"] for e in events} == pids  # every process took a share

    text = scrape(fleet)
    done = samples(text, "leaseq_jobs_processed_total")
    assert sum(v for labels, v in done if labels["outcome"] == "completed") == 60
    assert sum(v for labels, v in done if labels["outcome"] != "completed") == 0
    assert text.count("# TYPE leaseq_jobs gauge") == 1  # the queue state once, not per child
    live = samples(text, "leaseq_jobs")
    assert len(live) == len({tuple(sorted(labels.items())) for labels, _ in live}) == 4
    assert samples(text, "leaseq_worker_processes") == [({}, 3.0)]
    assert samples(text, "leaseq_job_duration_seconds_count")[0][1] == 60

    # SIGTERM while every process runs two slow handlers: they finish, nothing is released.
    slow = enqueue(fleet, 6, seconds=1.5, first=100)
    wait_for(lambda: sum(e["event"] == "start" for e in fleet.events()) == 66, timeout=30,
             message="6 slow jobs running")
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0, fleet.output(0)
    for job in slow:
        info = fleet.q.get(job)
        assert (info.state, info.attempts) == ("completed", 1)
    assert len(re.findall(r"stopped with exit code 0", fleet.output(0))) == 3
    assert all(gone(pid) for pid in pids)


def test_a_killed_process_is_replaced_and_every_job_completes(fleet: WorkerFleet) -> None:
    fleet.start(APP, "--processes", "2", "--concurrency", "2", "--lease", "1.5",
                "--metrics-port", "0", *FAST)
    wait_for(lambda: fetching(fleet) == 2, timeout=30, message="2 processes fetching")
    jobs = enqueue(fleet, 8, seconds=1.0)
    first = wait_for(lambda: next((e for e in fleet.events() if e["event"] == "start"), None),
                     timeout=30, message="a job started")
    victim = first["pid"]
    slot = next(s for s, pids in children(fleet).items() if pids == [victim])
    os.kill(victim, signal.SIGKILL)
    replacement = wait_for(lambda: children(fleet).get(slot, [])[1:], timeout=30,
                           message="the supervisor starting a replacement")[0]
    assert replacement != victim
    killed_at = len(fleet.events())  # the victim wrote nothing after this line
    wait_for(lambda: gone(victim), timeout=10, message="the victim gone")
    wait_for(lambda: completed(fleet, 8), timeout=40, message="every job completed")

    events = fleet.events()
    assert_never_twice_at_once([e for e in events if e["pid"] != victim])
    lost = {e["job"] for e in events
            if e["event"] == "start" and e["pid"] == victim} - {
        e["job"] for e in events if e["event"] == "end" and e["pid"] == victim}
    assert lost, "the victim died holding no job"
    for job in jobs:
        info = fleet.q.get(job)
        assert info.state == "completed"
        runs = [i for i, e in enumerate(events) if e["event"] == "start" and e["job"] == job]
        if job in lost:  # reclaimed after its lease ran out: run again, after the kill
            assert info.attempts == 2 and len(runs) == 2 and runs[1] >= killed_at
        else:
            # Run once. A second attempt is the victim's lease of it, taken with the job it
            # ran (--concurrency 2) but killed before its handler started.
            assert len(runs) == 1 and info.attempts in (1, 2)
    assert re.search(rf"pid {victim}\) exited unasked with signal SIGKILL", fleet.output(0))
    wait_for(lambda: fetching(fleet) == 3, timeout=30, message="the replacement fetching")
    text = scrape(fleet)
    assert samples(text, "leaseq_worker_restarts_total") == [({}, 1.0)]
    assert samples(text, "leaseq_worker_processes") == [({}, 2.0)]


def test_auto_runs_one_process_per_cpu_and_a_second_signal_kills_them(
        sqlite_fleet: WorkerFleet) -> None:
    fleet = sqlite_fleet
    [job] = enqueue(fleet, 1, seconds=30)
    supervisor = fleet.start(APP, "--processes", "auto", "--grace", "60", *FAST)
    wait_for(lambda: fleet.events(), timeout=30, message="the job started")
    started = children(fleet)
    if cpu_count() == 1:  # auto is then one process, run without a supervisor
        assert started == {}
        return
    assert sorted(started) == list(range(1, cpu_count() + 1))
    supervisor.send_signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM: asking" in fleet.output(0), timeout=10, message="the stop")
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(10) == 1
    assert all(gone(pid) for [pid] in started.values())
    assert fleet.q.get(job).state == "running"  # killed, not given back: the lease expires


def test_sigkill_of_the_supervisor_leaves_no_orphans(sqlite_fleet: WorkerFleet) -> None:
    fleet = sqlite_fleet
    jobs = enqueue(fleet, 2, seconds=1.0)
    supervisor = fleet.start(APP, "--processes", "2", "--concurrency", "1", "--grace", "10",
                             *FAST)
    wait_for(lambda: len(fleet.events()) >= 2, timeout=30, message="both jobs started")
    pids = [pid for [pid] in children(fleet).values()]
    supervisor.kill()
    supervisor.wait(10)
    # Each child sees its pipe close, stops as on SIGTERM and lets its job finish.
    wait_for(lambda: all(gone(pid) for pid in pids), timeout=20, message="children exiting")
    for job in jobs:
        info = fleet.q.get(job)
        assert (info.state, info.attempts) == ("completed", 1)
    assert "the supervisor is gone" in fleet.output(0)


# -- in-process checks -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-2", "junk", "2.5", ""])
def test_processes_must_be_a_positive_whole_number_or_auto(value: str) -> None:
    result = CliRunner().invoke(cli, ["worker", APP, "--processes", value])
    assert result.exit_code == 2
    assert "Invalid value for '--processes'" in result.output


def test_restart_delay_doubles_while_a_child_keeps_dying_young() -> None:
    delays = [restart_delay(n) for n in range(1, 12)]
    assert delays[0] == RESTART_DELAY
    assert delays[1] == 2 * RESTART_DELAY
    assert delays == sorted(delays)
    assert delays[-1] == RESTART_DELAY_MAX
    assert restart_delay(10_000) == RESTART_DELAY_MAX


def test_merge_expositions_sums_counters_histograms_and_gauges() -> None:
    one = """# HELP c_total Things.
# TYPE c_total counter
c_total{q="a"} 2.0
# HELP h Seconds.
# TYPE h histogram
h_bucket{q="a",le="1.0"} 1.0
h_bucket{q="a",le="+Inf"} 2.0
h_count{q="a"} 2.0
h_sum{q="a"} 3.5
# HELP g Held.
# TYPE g gauge
g{q="a"} 1.0
"""
    two = """# HELP c_total Things.
# TYPE c_total counter
c_total{q="a"} 5.0
c_total{q="b"} 1.0
# HELP h Seconds.
# TYPE h histogram
h_bucket{q="a",le="1.0"} 0.0
h_bucket{q="a",le="+Inf"} 1.0
h_count{q="a"} 1.0
h_sum{q="a"} 7.0
"""
    merged = {f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
              for f in merge_expositions([one, two])}
    assert merged["c"] == {("c_total", (("q", "a"),)): 7.0, ("c_total", (("q", "b"),)): 1.0}
    assert merged["h"] == {
        ("h_bucket", (("le", "1.0"), ("q", "a"))): 1.0,
        ("h_bucket", (("le", "+Inf"), ("q", "a"))): 3.0,
        ("h_count", (("q", "a"),)): 3.0,
        ("h_sum", (("q", "a"),)): 10.5,
    }
    assert merged["g"] == {("g", (("q", "a"),)): 1.0}
    assert merge_expositions([]) == []
