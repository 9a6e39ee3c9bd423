"""Redis failover under load, with and without ``wait_replicas`` (docs/redis.md,
"Replicated writes").

A primary, two replicas and a Sentinel on loopback (``scripts/redis-sentinel start DIR
6480``: data nodes 6480-6482, the Sentinel on 6580 watching ``leaseq``). Producer threads
keep enqueueing (each job carries a unique tag; every enqueue that returned is counted)
while ``leaseq worker`` processes drain; mid-drain the primary is SIGKILLed and the
Sentinel promotes a replica. Producers and workers follow it through the
``redis+sentinel://`` URL. Then the workers drain what is left and the books are checked:

- with ``wait_replicas=1``: every enqueue that returned ran and is completed, and the
  jobs that ran more than once are no more than the slots in flight at the kill
  (workers x concurrency, each slot's running job and its ack);
- without it: the replicas are cut off ``LEASEQ_FAILOVER_CUT`` seconds (1) before the
  kill, and what was lost is measured (the lost tail: enqueues that returned but whose
  job is gone) and printed, not asserted;
- either way no job id is handed out twice (design §59): the promoted replica's new
  ``master_replid`` moves ``{P}:ids`` past the next epoch, so every id returned after the
  promotion is above every id returned before the kill, and each names one job.

Short by default (about 10 s per variant); LEASEQ_FAILOVER_BEFORE / _AFTER (seconds of
producing before and after the kill), LEASEQ_FAILOVER_PACE (seconds between one
producer's enqueues, 0.01) and LEASEQ_FAILOVER_RUNS make it longer, busier and repeat it;
each run prints one line (appended to LEASEQ_CHAOS_REPORT when set).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import leaseq
from tests.chaos import history as hist
from tests.helpers import new_prefix

ROOT = Path(__file__).resolve().parents[2]
BASE = 6480
SENTINEL = BASE + 100
SERVICE = "leaseq"
WORKERS, CONCURRENCY, PRODUCERS = 2, 4, 3
BEFORE = float(os.environ.get("LEASEQ_FAILOVER_BEFORE", "3"))
AFTER = float(os.environ.get("LEASEQ_FAILOVER_AFTER", "4"))
RUNS = int(os.environ.get("LEASEQ_FAILOVER_RUNS", "1"))
# Seconds between one producer's enqueues: ~250 jobs/s in all by default, within the drain.
PACE = float(os.environ.get("LEASEQ_FAILOVER_PACE", "0.01"))
REPORT = os.environ.get("LEASEQ_CHAOS_REPORT")
# Without wait_replicas: seconds the replicas receive nothing before the primary dies (its
# replication links are cut), so the promoted one lacks the writes of that tail.
CUT = float(os.environ.get("LEASEQ_FAILOVER_CUT", "1"))

# -- the app the worker processes run ----------------------------------------------------

app = leaseq.App(
    os.environ.get("LEASEQ_FAILOVER_URL", "memory://failover"),
    table_prefix=os.environ.get("LEASEQ_FAILOVER_PREFIX", "leaseq_"),
    lease=2.0,
    backoff=leaseq.Backoff(base=0.05, cap=0.2, jitter=0.5),
)


@app.task(queue="failover", name="probe", max_attempts=50)
async def probe(tag: str) -> dict[str, Any]:
    """Records each delivery and run with its tag in this process's history (history.py)
    and returns its token, so the completion names its lease. Async, so the worker leases
    no jobs ahead of its slots."""
    ctx = leaseq.current_job()
    assert ctx is not None
    job = ctx.job
    recorder = hist.process_recorder("worker", env="LEASEQ_FAILOVER_HISTORY")
    recorder.observed("claim", key=tag, job=job.id, token=job.lease_token,
                      value={"pid": os.getpid()})
    with recorder.op("run", key=tag, job=job.id, token=job.lease_token,
                     classify=lambda exc: "failed"):
        await asyncio.sleep(0.005)
    return {"tag": tag, "token": job.lease_token}


# -- the topology --------------------------------------------------------------------------


@contextlib.contextmanager
def sentinel_topology(folder: Path) -> Iterator[None]:
    script = ROOT / "scripts" / "redis-sentinel"
    if not script.exists():
        pytest.fail("scripts/redis-sentinel is missing (the Sentinel topology script)")
    if shutil.which("redis-server") is None and not os.environ.get("CI"):
        pytest.skip("redis-server is not installed")
    try:
        started = subprocess.run([str(script), "start", str(folder), str(BASE)], timeout=180,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if started.returncode != 0:
            # The script's first version missed its readiness wait about 1 start in 10 on
            # a loaded machine (fixed since); one more try, and a second failure fails the
            # test (and still stops whatever it started, by the pids in the folder).
            print(f"scripts/redis-sentinel start failed once: {started.stderr.strip()}")
            subprocess.run([str(script), "start", str(folder), str(BASE)], check=True,
                           timeout=180, stdout=subprocess.DEVNULL)
        yield
    finally:
        subprocess.run([str(script), "stop", str(folder)], check=False, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def primary_port() -> int:
    with redis.Redis(port=SENTINEL, decode_responses=True) as sentinel:
        return int(sentinel.sentinel_get_master_addr_by_name(SERVICE)[1])


def failovers() -> int:
    """Failovers so far: the Sentinel's configuration epoch counts them. Under load a
    freshly promoted primary can miss the Sentinel's 1 s down-after and be replaced
    again, by a replica still resyncing: the lossiest case, which the line reports."""
    with redis.Redis(port=SENTINEL, decode_responses=True) as sentinel:
        return int(sentinel.sentinel_master(SERVICE)["config-epoch"])


def replicas_linked(port: int, wanted: int) -> bool:
    try:
        with redis.Redis(port=port, decode_responses=True, socket_timeout=2) as node:
            info = node.info("replication")
    except redis.RedisError:
        return False
    online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
              and v.get("state") == "online"]
    return info.get("role") == "master" and len(online) >= wanted


# -- one run -------------------------------------------------------------------------------


@dataclass
class Run:
    waited: bool
    returned: list[tuple[int, str, float]] = field(default_factory=list)  # id, tag, when
    errors: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    reissued: list[str] = field(default_factory=list)  # tags whose id names another job
    twice: list[int] = field(default_factory=list)  # ids returned for two tags
    crossed: list[int] = field(default_factory=list)  # returned after, not above before
    killed_at: float = 0.0  # time.monotonic()
    promoted_at: float = 0.0
    cut_at: float = 0.0  # time.time() when the replicas stopped receiving (no wait only)
    history: hist.Findings = field(default_factory=hist.Findings)
    not_completed: list[str] = field(default_factory=list)
    rerun_jobs: int = 0
    extra_runs: int = 0
    failover_s: float = 0.0
    failovers: int = 0

    def states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.not_completed:
            state = item.rsplit(":", 1)[1]
            counts[state] = counts.get(state, 0) + 1
        return counts

    def line(self) -> str:
        mode = "wait_replicas=1" if self.waited else "no wait"
        return (f"redis failover ({mode}): enqueues returned {len(self.returned)}, lost "
                f"tail {len(self.lost)}, ids naming another job {len(self.reissued)}, ids "
                f"handed out twice {len(self.twice)}, ids after the failover not above "
                f"those before {len(self.crossed)}, "
                f"returned but not completed {len(self.not_completed)} "
                f"{self.states()}, "
                f"jobs re-run {self.rerun_jobs} ({self.extra_runs} extra runs; slots "
                f"{WORKERS * CONCURRENCY}), failovers {self.failovers} (first took "
                f"{self.failover_s:.1f} s), errors {self.errors}; {self.history.line()}")


def produce(url: str, prefix: str, producer: int, stop: threading.Event, run: Run,
            lock: threading.Lock, recorder: hist.Recorder) -> None:
    q = leaseq.Queue(url, leaseq.Settings(table_prefix=prefix, reclaim_interval=None,
                                          connect_timeout=2))
    try:
        n = 0
        while not stop.is_set():
            tag = f"{producer}-{n}"
            n += 1
            try:
                with recorder.op("enqueue", key=tag) as call:
                    result = q.enqueue("failover", {"tag": tag}, kind="probe")
                    call.job = result.id
            except leaseq.LeaseqError as exc:
                with lock:
                    name = type(exc).__name__
                    run.errors[name] = run.errors.get(name, 0) + 1
                time.sleep(0.05)
                continue
            with lock:
                run.returned.append((result.id, tag, time.monotonic()))
            time.sleep(PACE)
    finally:
        q.close()


def spawn_worker(url: str, prefix: str, history: Path, out: Path
                 ) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LEASEQ_FAILOVER_URL": url, "LEASEQ_FAILOVER_PREFIX": prefix,
           "LEASEQ_FAILOVER_HISTORY": str(history), "PYTHONPATH": str(ROOT)}
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "worker",
             "tests.chaos.test_redis_failover:app", "--concurrency", str(CONCURRENCY),
             "--poll-interval", "0.1", "--reclaim-interval", "0.5", "--grace", "5",
             "--log-level", "WARNING"],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)


def failover_run(folder: Path, waited: bool) -> Run:
    """One run on a fresh topology in ``folder``."""
    run = Run(waited)
    prefix = new_prefix()
    url = f"redis+sentinel://127.0.0.1:{SENTINEL}/{SERVICE}"
    if waited:
        url += "?wait_replicas=1&wait_timeout=500"
    history = folder / "history"  # each process's operations (history.py)
    with sentinel_topology(folder / "nodes"):
        assert primary_port() == BASE
        deadline = time.monotonic() + 30
        while not replicas_linked(BASE, 2):
            assert time.monotonic() < deadline, "the two replicas never came online"
            time.sleep(0.1)
        workers = [spawn_worker(url, prefix, history, folder / f"worker-{i}.log")
                   for i in range(WORKERS)]
        stop, lock = threading.Event(), threading.Lock()
        producers = [threading.Thread(
            target=produce, args=(url, prefix, i, stop, run, lock,
                                  hist.Recorder(history, f"producer-{i}")),
            daemon=True) for i in range(PRODUCERS)]
        try:
            for thread in producers:
                thread.start()
            time.sleep(BEFORE)
            with redis.Redis(port=BASE) as primary:
                pid = int(primary.info("server")["process_id"])
                run.cut_at = time.time()
                if not waited and CUT > 0:
                    cut_replicas(primary)
                    time.sleep(CUT)
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            deadline = killed + 60
            while True:
                with contextlib.suppress(redis.RedisError):
                    if primary_port() != BASE:
                        break
                assert time.monotonic() < deadline, "the Sentinel promoted no replica"
                time.sleep(0.1)
            run.failover_s = time.monotonic() - killed
            run.killed_at, run.promoted_at = killed, time.monotonic()
            time.sleep(max(0.0, AFTER - run.failover_s))
            stop.set()
            for thread in producers:
                thread.join(30)
            settle(prefix, workers)
            run.failovers = failovers()
        finally:
            stop.set()
            for proc in workers:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
        check(run, prefix, history)
    return run


def cut_replicas(primary: redis.Redis) -> None:
    """The primary drops its replicas' links and refuses their resyncs (ACL changes are
    not replicated, so only this server refuses): from now on its writes reach no
    replica, as if the network between them had failed. The Sentinel and leaseq use
    none of these commands."""
    primary.execute_command("ACL", "SETUSER", "default", "-psync", "-sync", "-replconf")
    primary.client_kill_filter(_type="replica")


def primary_url() -> str:
    """A plain URL of the primary the Sentinel names now, once it answers as one: the
    books are read there, never through a pooled connection that may still reach a
    demoted node."""
    port = primary_port()
    assert replicas_linked(port, 0), f"the Sentinel's primary {port} is not a primary"
    return f"redis://127.0.0.1:{port}/0"


def settle(prefix: str, workers: list[subprocess.Popen[bytes]]) -> None:
    """Waits until the queue is drained on the primary the Sentinel names, and has stayed
    so for 2 s (a second failover can still be under way), then stops the workers."""
    deadline = time.monotonic() + 90
    calm: float | None = None
    while time.monotonic() < deadline:
        drained = False
        with contextlib.suppress(leaseq.LeaseqError, redis.RedisError, AssertionError), \
                leaseq.Queue(primary_url(), leaseq.Settings(table_prefix=prefix)) as q:
            s = q.stats().get("failover")
            drained = s is not None and s.available + s.scheduled + s.running == 0
        if not drained:
            calm = None
        elif calm is None:
            calm = time.monotonic()
        elif time.monotonic() - calm >= 2.0:
            break
        time.sleep(0.2)
    for proc in workers:
        assert proc.poll() is None, "a worker died during the failover"
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        proc.wait(30)


def check(run: Run, prefix: str, history: Path) -> None:
    ops = hist.load(history)
    starts = Counter(op.key for op in ops if op.name == "claim")
    with leaseq.Queue(primary_url(), leaseq.Settings(table_prefix=prefix)) as q:
        # Without wait_replicas, what was acknowledged after the cut may be lost.
        run.history = hist.check(ops, hist.final_state(q, "failover"),
                                    tail_from=None if run.waited else run.cut_at)
        for job_id, tag, _ in run.returned:
            try:
                info = q.get(job_id)
            except leaseq.JobNotFound:
                run.lost.append(tag)  # the lost tail: gone with the unreplicated writes
                continue
            if (info.payload or {}).get("tag") != tag:
                run.reissued.append(tag)  # its id was handed out again after the failover
            elif info.state != "completed":
                run.not_completed.append(f"{tag}:{info.state}")
    tags: dict[int, str] = {}
    for job_id, tag, _ in run.returned:
        if tags.setdefault(job_id, tag) != tag:
            run.twice.append(job_id)
    before = max((i for i, _, at in run.returned if at < run.killed_at), default=0)
    run.crossed = [i for i, _, at in run.returned if at > run.promoted_at and i <= before]
    reruns = [n for n in starts.values() if n > 1]
    run.rerun_jobs, run.extra_runs = len(reruns), sum(n - 1 for n in reruns)


def publish(run: Run) -> str:
    line = run.line()
    print(line)
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(line + "\n")
    mode = "wait_replicas=1" if run.waited else "no wait"
    hist.publish(run.history, scenario=f"S4R failover, Redis Sentinel, {mode}",
                    backend="redis", accepted=len(run.returned),
                    faults={"failover": run.failovers},
                    note="" if run.waited else f"replicas cut {CUT:g} s before the kill")
    return line


@pytest.mark.parametrize("waited", [True, False], ids=["wait_replicas=1", "no_wait"])
def test_a_sentinel_failover_mid_drain(tmp_path: Path, waited: bool) -> None:
    for n in range(RUNS):
        run = failover_run(tmp_path / f"run-{n}", waited)
        line = publish(run)
        assert len(run.returned) > 100, line  # the producers did run on both sides
        # Job ids never repeat, whatever the failover lost (design §59): the promoted
        # replica's new replication id moved them past the next epoch.
        assert run.twice == [] and run.reissued == [] and run.crossed == [], line
        assert all(i >= 1 << 40 for i, _, at in run.returned if at > run.promoted_at), line
        if waited:
            # Every enqueue that returned survived the failover and ran to completion...
            assert run.lost == [] and run.not_completed == [], line
            # ...and only jobs held at the kill ran again: a slot's running job and
            # the one whose ack it was writing.
            assert run.rerun_jobs <= 2 * WORKERS * CONCURRENCY, line
            # The history agrees: nothing lost, no lease ran twice or came back without
            # an end the new primary recorded, no stale write, nothing from nowhere.
            assert run.history.clean(), f"{line}\n{run.history.detail()}"
        else:
            # Nothing asserted about losses: this run measures them (docs/redis.md).
            assert run.not_completed == [], line
            assert run.history.unexpected == [], line
