"""Chains and groups exactly once while workers are SIGKILLed (issue 15 part 5).

A chain of 1,000 steps (each adds 1) and 100 groups of 10 members, each with a callback,
run on two `leaseq worker` processes; three times, at random moments, one that holds a
lease is killed with SIGKILL and a fresh one started in its place. Leases are 1 s, so a
killed worker's jobs come back quickly. A handler appends (job id, lease token, what it
did) to a log with O_APPEND; a killed run may or may not have logged, and then runs again.

Afterwards: every step and member ran; each has exactly one job, completed once (a lost
follow-up would leave a step missing, a duplicated one a step twice); the chain's last
result is 1,000; each callback exists once, ran, and got its members' results in member
order; a job's runs each had a lease of their own.

Also here: Redis Cluster refuses flows with a clear error.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import leaseq
from tests._flows_app import make_app
from tests._processes import WorkerFleet
from tests.conftest import require
from tests.helpers import REDIS_CLUSTER_URL, drop_tables, new_prefix, wait_for

STEPS, GROUPS, MEMBERS = 1000, 100, 10
KILLS = 3
WORKER = ("tests._flows_app:app", "--concurrency", "8", "--poll-interval", "0.2",
          "--reclaim-interval", "0.2", "--grace", "1", "--log-level", "WARNING")


def every_job(q: leaseq.Queue, kind: str) -> list[leaseq.JobInfo]:
    found: list[leaseq.JobInfo] = []
    while page := q.jobs(kind=kind, limit=1000, after=found[-1].id if found else 0):
        found += page
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"])
def test_every_step_runs_and_is_recorded_once_while_workers_are_killed(
    backend: str, tmp_path: Path
) -> None:
    require(backend)
    fleet = WorkerFleet(backend, tmp_path)
    app = make_app(fleet.url, fleet.prefix)
    try:
        step, member, gather = (app.tasks[name] for name in ("step", "member", "gather"))
        chain = leaseq.chain(step.s(0), *(step.s() for _ in range(STEPS - 1))).enqueue()
        groups = [leaseq.group(*(member.s(g, i) for i in range(MEMBERS)))
                  .then(gather.s(g=g)).enqueue() for g in range(GROUPS)]
        workers = [fleet.start(*WORKER) for _ in range(2)]

        def finished() -> bool:
            return chain.state().remaining == 0 and all(
                g.state().remaining == 0 for g in groups)

        def holder() -> subprocess.Popen[str] | None:
            """A worker process that holds a lease now (worker ids are host:pid:suffix)."""
            running = fleet.q.jobs(state="running", limit=1000)
            pids = {int(j.worker_id.split(":")[1]) for j in running if j.worker_id}
            return next((w for w in workers if w.pid in pids), None)

        rng = random.Random()
        kills = 0
        deadline = time.monotonic() + 60
        while kills < KILLS and not finished() and time.monotonic() < deadline:
            # The victim holds jobs at this moment, so the kill lands mid-flight: a job
            # leased and perhaps run, never acked. Which jobs, and at what point of their
            # run, is up to chance and the random pause between kills.
            victim = holder()
            if victim is None:
                time.sleep(0.01)
                continue
            victim.kill()  # SIGKILL: no ack, no give-back, whatever it was doing
            victim.wait(10)
            kills += 1
            workers[workers.index(victim)] = fleet.start(*WORKER)
            time.sleep(rng.uniform(0.05, 0.5))
        assert kills, "the flows finished before any kill"

        wait_for(finished, timeout=90, interval=0.2, message="every flow to finish")
        assert chain.wait(timeout=30) == STEPS
        assert [g.wait(timeout=30) for g in groups] == list(range(GROUPS))

        runs = fleet.events()
        ran = {(e["job"], e["token"]) for e in runs}
        assert len(ran) == len(runs), "a lease ran its job twice"

        steps = every_job(fleet.q, "step")
        assert sorted(s.payload["n"] for s in steps) == list(range(STEPS))  # none lost, none twice
        assert all(s.state == "completed" and s.result == s.payload["n"] + 1 for s in steps)
        assert {e["n"] for e in runs if e["task"] == "step"} == set(range(STEPS))

        members = every_job(fleet.q, "member")
        assert Counter((m.payload["g"], m.payload["i"]) for m in members) == Counter(
            (g, i) for g in range(GROUPS) for i in range(MEMBERS))
        assert all(m.state == "completed" for m in members)

        callbacks = every_job(fleet.q, "gather")
        assert_callbacks(callbacks, runs, GROUPS)

        every = [*steps, *members, *callbacks]
        assert {e["job"] for e in runs} == {j.id for j in every}, "a job ran that no flow made"
        assert any(j.timeouts for j in every), "no kill hit a running job: it proved nothing"
    finally:
        app.close()
        fleet.close()


def assert_callbacks(callbacks: list[leaseq.JobInfo], runs: list[dict[str, Any]],
                     groups: int) -> None:
    """One callback job per group, completed, with its members' results in order; and
    it ran."""
    assert sorted(c.payload["g"] for c in callbacks) == list(range(groups))
    for c in callbacks:
        g = c.payload["g"]
        assert c.state == "completed"
        assert c.payload["results"] == [[g, i] for i in range(MEMBERS)]
    assert {e["g"] for e in runs if e["task"] == "gather"} == set(range(groups))


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_groups_completed_by_worker_processes_enqueue_each_callback_once(
    backend: str, tmp_path: Path
) -> None:
    """Members of one group complete at the same moment in different processes: the lock
    on the group's row orders them, so the last sees every result (MySQL's REPEATABLE
    READ included: it reads them with a locking read)."""
    require(backend)
    fleet = WorkerFleet(backend, tmp_path)
    app = make_app(fleet.url, fleet.prefix)
    groups = 30
    try:
        member, gather = app.tasks["member"], app.tasks["gather"]
        flows = [leaseq.group(*(member.s(g, i) for i in range(MEMBERS)))
                 .then(gather.s(g=g)).enqueue() for g in range(groups)]
        for _ in range(3):
            fleet.start(*WORKER)
        assert [f.wait(timeout=60) for f in flows] == list(range(groups))
        members = every_job(fleet.q, "member")
        assert len(members) == groups * MEMBERS and all(m.state == "completed" for m in members)
        assert_callbacks(every_job(fleet.q, "gather"), fleet.events(), groups)
    finally:
        app.close()
        fleet.close()


def test_redis_cluster_refuses_flows_with_a_clear_error() -> None:
    require("redis_cluster")
    prefix = new_prefix()
    app = make_app(REDIS_CLUSTER_URL, prefix)
    try:
        with pytest.raises(leaseq.ConfigurationError, match="Redis Cluster"):
            leaseq.chain(app.tasks["step"].s(0), app.tasks["step"].s()).enqueue()
        with pytest.raises(leaseq.ConfigurationError, match="Redis Cluster"):
            leaseq.group(app.tasks["member"].s(0, 0)).enqueue()
        assert app.queue.jobs(limit=10) == []  # refused before anything was written
    finally:
        app.close()
        drop_tables("redis_cluster", prefix)
