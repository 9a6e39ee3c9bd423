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

On Redis Cluster a step's ack is three calls (docs/design.md §45); the
cluster tests here stop a client between them and check that reclaim, racing processes
and repeated acks finish what it left exactly once.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import leaseq
from leaseq._core.flow import link as flow_link
from leaseq.backends.redis import ops as redis_ops
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


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis", "redis_cluster"])
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

        wait_for(finished, timeout=180, interval=0.2,
                 message="every flow to finish")  # 90 s ran out once at load 10
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


def crash_during_ack(q: leaseq.Queue, job: leaseq.Job, result: str, calls: int) -> None:
    """Acks flow step ``job`` on Redis Cluster as a client that dies after the first
    ``calls`` server calls of ``complete_step_sliced`` (the rest never run)."""
    backend: Any = q._backend
    found = flow_link(job.headers)
    assert found is not None
    plan = backend.ops.complete_step_sliced(job.id, job.lease_token, result, found)
    call = next(plan)
    for _ in range(calls - 1):
        call = plan.send(backend.runner.execute(call))
    backend.runner.execute(call)
    plan.close()


@pytest.fixture
def cluster_app() -> Iterator[leaseq.App]:
    """The flows app on the Redis Cluster, under a fresh prefix (``app.prefix``)."""
    require("redis_cluster")
    prefix = new_prefix()
    app = make_app(REDIS_CLUSTER_URL, prefix)
    app.prefix = prefix  # type: ignore[attr-defined]
    try:
        yield app
    finally:
        app.close()
        drop_tables("redis_cluster", prefix)


@pytest.mark.parametrize("calls", [1, 2], ids=["after-completion", "after-flow-step"])
def test_a_cluster_handoff_a_crash_left_is_finished_once_by_reclaim(
    cluster_app: leaseq.App, calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Redis Cluster a step's completion, the flow's update and the next step's enqueue
    are three calls (three slots). A client killed after the first or the second leaves a
    handoff: the step is completed, its follow-up not written. A waiter waits it out;
    reclaim finishes it, once however often it runs, and so does a repeated ack."""
    q, step = cluster_app.queue, cluster_app.tasks["step"]
    flow = leaseq.chain(step.s(0), step.options(queue="other").s(), step.s()).enqueue()
    [job] = q.dequeue("flows", worker_id="w", lease=60)
    crash_during_ack(q, job, "1", calls)
    assert q.get(job.id).state == "completed"
    assert q.jobs(queue="other", limit=10) == []
    state = flow.state()
    assert state.remaining == (3 if calls == 1 else 2)
    if calls == 2:  # the flow names the next step; its id is handed out, no job yet
        with pytest.raises(leaseq.JobNotFound):
            q.get(state.job_id)  # type: ignore[arg-type]

    waited: list[Any] = []
    waiter = threading.Thread(target=lambda: waited.append(flow.wait(timeout=60)))
    waiter.start()
    q.reclaim()  # the handoff is younger than HANDOFF_AGE: still the acking client's
    assert q.jobs(queue="other", limit=10) == []
    monkeypatch.setattr(redis_ops, "HANDOFF_AGE", 0.0)
    for _ in range(3):
        q.reclaim()
        assert q.ack_many([(job, 1)]) == [True]  # a repeated ack of the same lease
    [follow] = q.jobs(queue="other", limit=10)
    assert (follow.payload, follow.state) == ({"n": 1}, "available")
    assert flow.state().remaining == 2 and flow.state().job_id == follow.id
    for queue in ("other", "flows"):
        [job] = q.dequeue(queue, worker_id="w")
        q.ack(job, job.payload["n"] + 1)
    waiter.join(60)
    assert waited == [3]
    assert len(q.jobs(limit=10)) == 3 and flow.state().remaining == 0


HANDOFF_RACE = """
import sys, leaseq
from leaseq.backends.redis import ops
ops.HANDOFF_AGE = 0.0
q = leaseq.connect(sys.argv[1], table_prefix=sys.argv[2], reclaim_interval=None)
print(sys.stdin.readline())  # everyone starts together
for _ in range(5):
    q.reclaim()
q.close()
"""


def test_cluster_handoffs_finished_by_racing_processes_enqueue_each_follow_up_once(
    cluster_app: leaseq.App,
) -> None:
    """Forty chain steps and ten group members, completed by clients that died before
    their handoffs finished (half after the flow's update); four processes then reclaim
    at the same moment, five times each, while this one repeats every ack: each chain
    gets exactly one next step, each group exactly one callback with every result."""
    q, step = cluster_app.queue, cluster_app.tasks["step"]
    member, gather = cluster_app.tasks["member"], cluster_app.tasks["gather"]
    chains = [leaseq.chain(step.s(10 * n), step.options(queue="other").s())
              .enqueue() for n in range(40)]
    group = leaseq.group(*(member.s(0, i) for i in range(10))).then(gather.s(g=0)).enqueue()
    jobs = q.dequeue("flows", worker_id="w", limit=50, lease=60)
    assert len(jobs) == 50
    for n, job in enumerate(jobs):
        crash_during_ack(q, job, json.dumps(run_step(job)), 1 + n % 2)
    procs = [subprocess.Popen([sys.executable, "-c", HANDOFF_RACE, REDIS_CLUSTER_URL,
                               cluster_app.prefix],  # type: ignore[attr-defined]
                              stdin=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for _ in range(3):
        assert q.ack_many([(job, run_step(job)) for job in jobs]) == [True] * 50
    for proc in procs:
        assert proc.wait(60) == 0
        proc.stdin.close()  # type: ignore[union-attr]
    nexts = every_job(q, "step")[40:]
    assert sorted(j.payload["n"] for j in nexts) == [10 * n + 1 for n in range(40)]
    assert {c.state().job_id for c in chains} == {j.id for j in nexts}
    [callback] = every_job(q, "gather")
    assert callback.payload["results"] == [[0, i] for i in range(10)]
    assert group.state().job_id == callback.id
    assert q.stats()["other"].available == 40


def run_step(job: leaseq.Job) -> Any:
    """What the handler of a step or member returns, without logging it."""
    if job.kind == "step":
        return job.payload["n"] + 1
    return [job.payload["g"], job.payload["i"]]
