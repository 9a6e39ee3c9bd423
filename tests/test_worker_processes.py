"""Workers as real processes (`leaseq worker tests._worker_app:app`), killed, stopped and
signalled while they hold jobs. After each scenario every job is accounted for exactly once
and no stale holder's write was accepted.
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
from tests.helpers import MYSQL_URL, POSTGRES_URL, drop_tables, new_prefix, wait_for

ROOT = Path(__file__).resolve().parent.parent


class Env:
    """One scenario's database, log file and worker processes."""

    def __init__(self, backend: str, tmp: Path) -> None:
        self.backend = backend
        self.url = {"sqlite": f"sqlite:///{tmp}/w.db", "postgres": POSTGRES_URL,
                    "mysql": MYSQL_URL}[backend]
        self.prefix = new_prefix()
        self.log = tmp / "events.jsonl"
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []
        self.q = leaseq.connect(self.url, table_prefix=self.prefix)
        self.q.migrate()

    def worker(self, lease: float = 2.0, grace: float = 10.0) -> subprocess.Popen[str]:
        env = {**os.environ, "LEASEQ_TEST_URL": self.url, "LEASEQ_TEST_PREFIX": self.prefix,
               "LEASEQ_TEST_LOG": str(self.log), "LEASEQ_TEST_LEASE": str(lease),
               "PYTHONPATH": str(ROOT)}
        with open(self.tmp / f"worker{len(self.procs)}.log", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leaseq.cli", "worker", "tests._worker_app:app",
                 "--concurrency", "2", "--grace", str(grace), "--poll-interval", "0.1",
                 "--reclaim-interval", "0.3", "--log-level", "INFO"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
            )
        self.procs.append(proc)
        return proc

    def events(self, event: str | None = None, job: int | None = None) -> list[dict[str, int]]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [r for r in rows if (event is None or r["event"] == event)
                and (job is None or r["job"] == job)]

    def output(self, proc: subprocess.Popen[str]) -> str:
        return (self.tmp / f"worker{self.procs.index(proc)}.log").read_text()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(10)
        self.q.close()
        drop_tables(self.backend, self.prefix)


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    require(request.param)
    scenario = Env(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def enqueue(env: Env, task: str, **args: object) -> int:
    return env.q.enqueue("work", args, kind=task).id


def test_kill_9_mid_job_another_worker_finishes_it_with_one_extra_attempt(env: Env) -> None:
    job = enqueue(env, "sleepy", seconds=1.0)
    first = env.worker(lease=1.5)
    wait_for(lambda: env.events("start", job), timeout=30, message="first start")
    first.kill()
    first.wait(10)
    second = env.worker(lease=1.5)
    info = wait_for(lambda: (i := env.q.get(job)).state == "completed" and i, timeout=60,
                    message="completion by the second worker")
    assert info.attempts == 2
    ends = env.events("end", job)
    assert [e["pid"] for e in ends] == [second.pid]
    assert len(env.events("start", job)) == 2


def test_sigterm_lets_the_running_job_finish_and_exits_0(env: Env) -> None:
    jobs = [enqueue(env, "sleepy", seconds=1.0, n=i) for i in range(2)]
    proc = env.worker(lease=5, grace=20)
    wait_for(lambda: len(env.events("start")) == 2, timeout=30, message="both started")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, env.output(proc)
    for job in jobs:
        info = env.q.get(job)
        assert (info.state, info.attempts) == ("completed", 1)


def test_sigterm_past_the_grace_period_gives_jobs_back_without_penalty(env: Env) -> None:
    job = enqueue(env, "sleepy", seconds=30.0)
    proc = env.worker(lease=5, grace=0.5)
    wait_for(lambda: env.events("start", job), timeout=30, message="start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, env.output(proc)
    info = env.q.get(job)
    assert (info.state, info.attempts) == ("available", 0)


def test_a_second_signal_exits_at_once(env: Env) -> None:
    enqueue(env, "sleepy", seconds=30.0)
    proc = env.worker(lease=5, grace=60)
    wait_for(lambda: env.events("start"), timeout=30, message="start")
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "stop signal" in env.output(proc), timeout=10, message="first signal")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) != 0


def test_a_zombie_worker_cannot_record_a_job_that_moved_on(env: Env) -> None:
    job = enqueue(env, "sleepy", seconds=2.0)
    zombie = env.worker(lease=1.0)
    wait_for(lambda: env.events("start", job), timeout=30, message="zombie start")
    zombie.send_signal(signal.SIGSTOP)
    rescuer = env.worker(lease=1.0)
    done = wait_for(lambda: (i := env.q.get(job)).state == "completed" and i, timeout=60,
                    message="completion by the rescuer")
    zombie.send_signal(signal.SIGCONT)
    wait_for(lambda: "lease lost" in env.output(zombie)
             or "no lease renewal in time" in env.output(zombie), timeout=30,
             message="the zombie noticing it lost the lease")
    zombie.send_signal(signal.SIGTERM)
    zombie.wait(30)
    after = env.q.get(job)
    assert after == done  # nothing the zombie did changed the finished job
    assert after.attempts == 2
    assert [e["pid"] for e in env.events("end", job)][-1] == rescuer.pid or len(
        env.events("end", job)) == 2
    assert env.q.stats()["work"].completed == 1


def test_a_poison_job_that_kills_its_worker_ends_dead_after_max_attempts(env: Env) -> None:
    # Every attempt SIGKILLs its worker, so no exception is ever caught or recorded.
    job = env.q.enqueue("work", {}, kind="killer", max_attempts=2).id

    def respawn_until_dead() -> leaseq.JobInfo | None:
        info = env.q.get(job)
        if info.state == "dead":
            return info
        if all(p.poll() is not None for p in env.procs):
            env.worker(lease=0.5)
        return None

    env.worker(lease=0.5)
    dead = wait_for(respawn_until_dead, timeout=90, interval=0.2, message="the poison job dead")
    assert dead.attempts == 2
    assert dead.error == "lease expired"
    assert len(env.events("start", job)) == 2
