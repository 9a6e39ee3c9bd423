"""``leaseq bench``: the three workloads that matter, on any backend, with no peer needed.

* **enqueue**: jobs/s one ``enqueue`` at a time, and with ``enqueue_many`` batches of 1,000;
* **drain**: jobs/s for ``workers`` worker processes to run N pre-enqueued no-op jobs,
  timed from the moment the queue is resumed (the workers start against a paused queue,
  so process start-up is not measured) to the last completion, which the bench watches
  for (a ``--burst`` worker would exit at once: a paused queue has nothing due);
* **naps**: seconds for one worker to run 1,000 ``async`` jobs that each sleep 1 s (with
  the default concurrency they all run at once);
* **pickup latency**: one worker; a producer enqueues at a steady rate; each job records
  ``time.time()`` at enqueue and its handler returns the delay to its own start.

Each run uses a fresh table prefix and drops its tables at the end. ``benchmarks/`` runs
the same functions next to peer systems.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import leaseq

QUEUE = "bench"
NAPS = 1000  # async jobs that each await asyncio.sleep(1): concurrency, not throughput
Progress = Callable[[str, int, int], None]


def _quiet(stage: str, done: int, total: int) -> None:
    """The default progress callback: says nothing."""


@dataclass
class Bench:
    """One benchmark target: a URL and a fresh table prefix."""

    url: str
    prefix: str = ""

    def __post_init__(self) -> None:
        self.prefix = self.prefix or f"bench{secrets.token_hex(3)}_"
        self.q = leaseq.connect(self.url, table_prefix=self.prefix, reclaim_interval=None)
        self.q.migrate()

    def close(self) -> None:
        drop = getattr(self.q._backend, "drop", None)
        if drop is not None:
            drop()
        self.q.close()

    def enqueue_single(self, n: int, progress: Progress = _quiet) -> float:
        """Seconds to enqueue ``n`` jobs one call (and one transaction) at a time."""
        start = time.perf_counter()
        for i in range(n):
            self.q.enqueue(QUEUE, {"i": i}, kind="noop")
            if i % 500 == 0:
                progress("enqueue one at a time", i, n)
        elapsed = time.perf_counter() - start
        self.clear()
        return elapsed

    def enqueue_batch(self, n: int, batch: int = 1000, progress: Progress = _quiet) -> float:
        """Seconds to enqueue ``n`` jobs with ``enqueue_many`` in batches of ``batch``."""
        items = [{"queue": QUEUE, "payload": {"i": i}, "kind": "noop"} for i in range(n)]
        start = time.perf_counter()
        for first in range(0, n, batch):
            self.q.enqueue_many(items[first:first + batch])
            progress("enqueue_many", first, n)
        elapsed = time.perf_counter() - start
        self.clear()
        return elapsed

    def clear(self) -> None:
        """Empties the queue between workloads (bounded batches; no timing)."""
        while jobs := self.q.dequeue(QUEUE, limit=5000, lease=600, worker_id="bench-clear"):
            self.q.ack_many(jobs)
        self.q.prune(older_than=0)

    def drain(self, n: int, workers: int = 1, concurrency: int | None = None, kind: str = "noop",
              progress: Progress = _quiet) -> float:
        """Seconds for ``workers`` processes to run ``n`` pre-enqueued jobs."""
        items = [{"queue": QUEUE, "payload": {}, "kind": kind} for _ in range(n)]
        for first in range(0, n, 5000):
            self.q.enqueue_many(items[first:first + 5000])
        self.q.pause(QUEUE)
        procs = [self._worker(concurrency, burst=False) for _ in range(workers)]
        try:
            self._wait_started(procs)
            start = time.perf_counter()
            self.q.resume(QUEUE)
            deadline = time.monotonic() + max(120.0, n / 100)
            while self.q.stats()[QUEUE].completed < n:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"drain of {n} jobs did not finish")
                if not any(p.poll() is None for p in procs):
                    raise RuntimeError("every bench worker exited before the drain ended")
                time.sleep(0.01)
            elapsed = time.perf_counter() - start
        finally:
            self._stop(procs)
        completed = self.q.stats()[QUEUE].completed
        if completed != n:
            raise RuntimeError(f"drain completed {completed} of {n} jobs")
        self.clear()
        return elapsed

    def pickup_latency(self, rate: float = 200.0, seconds: float = 10.0,
                       progress: Progress = _quiet) -> list[float]:
        """Delays from enqueue to handler start, at a steady ``rate`` jobs/s."""
        proc = self._worker(concurrency=None, burst=False)
        n = int(rate * seconds)
        try:
            self._wait_started([proc])
            time.sleep(0.5)  # let the worker settle into its idle polling rhythm
            start = time.perf_counter()
            for i in range(n):
                due = start + i / rate
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                self.q.enqueue(QUEUE, {"t": time.time()}, kind="stamp")
                if i % 100 == 0:
                    progress("pickup latency", i, n)
            deadline = time.monotonic() + 60
            while self.q.stats()[QUEUE].completed < n and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            self._stop([proc])
        latencies: list[float] = []
        after = 0
        while page := self.q.jobs(QUEUE, state="completed", limit=5000, after=after):
            latencies += [float(j.result) for j in page if isinstance(j.result, (int, float))]
            after = page[-1].id
        self.clear()
        return sorted(latencies)

    def _worker(self, concurrency: int | None, burst: bool) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LEASEQ_BENCH_URL": self.url, "LEASEQ_BENCH_PREFIX": self.prefix}
        args = [sys.executable, "-m", "leaseq.cli", "worker", "leaseq.bench:app", "--queues", QUEUE,
                *(["--concurrency", str(concurrency)] if concurrency else []),
                "--poll-interval", "0.05",
                "--log-level", "INFO"]
        return subprocess.Popen([*args, "--burst"] if burst else args, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    @staticmethod
    def _wait_started(procs: list[subprocess.Popen[bytes]]) -> None:
        """Returns once every worker logged that it is fetching (imports done)."""
        for proc in procs:
            assert proc.stdout is not None
            seen = b""
            while b" started: " not in seen:
                line = proc.stdout.readline()  # EOF (b"") when the worker died
                if not line:
                    raise RuntimeError(f"bench worker did not start: {seen[-2000:].decode()}")
                seen += line

    @staticmethod
    def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of sorted ``values``, nearest rank."""
    if not values:
        return float("nan")
    rank = max(0, min(len(values) - 1, round(p / 100 * len(values) + 0.5) - 1))
    return values[rank]


def run_all(url: str, jobs: int, workers: int, concurrency: int | None,
            progress: Progress = _quiet, seconds: float = 10.0) -> dict[str, Any]:
    """Every workload once; the figures ``leaseq bench`` prints."""
    bench = Bench(url)
    try:
        single = bench.enqueue_single(min(jobs, 2000), progress)
        batch = bench.enqueue_batch(jobs, progress=progress)
        drain = bench.drain(jobs, workers, concurrency, progress=progress)
        naps = bench.drain(NAPS, 1, concurrency, kind="nap", progress=progress)
        latency = bench.pickup_latency(seconds=seconds, progress=progress)
    finally:
        bench.close()
    return {
        "url": url.split("@")[-1],
        "jobs": jobs,
        "workers": workers,
        "concurrency": concurrency,
        "enqueue_single_per_s": round(min(jobs, 2000) / single),
        "enqueue_batch_per_s": round(jobs / batch),
        "drain_per_s": round(jobs / drain),
        "naps_seconds": round(naps, 2),
        "pickup_ms": {f"p{p}": round(percentile(latency, p) * 1000, 2) for p in (50, 95, 99)},
    }


def _worker_app() -> leaseq.App:
    """The app ``leaseq.bench:app`` that bench workers run: a no-op, a nap and a latency
    stamp, all ``async def``."""
    application = leaseq.App(os.environ.get("LEASEQ_BENCH_URL", "memory://bench"),
                             table_prefix=os.environ.get("LEASEQ_BENCH_PREFIX", "leaseq_"))

    @application.task(queue=QUEUE, name="noop")
    async def noop() -> None:
        return None

    @application.task(queue=QUEUE, name="nap")
    async def nap(seconds: float = 1.0) -> None:
        await asyncio.sleep(seconds)

    @application.task(queue=QUEUE, name="stamp")
    async def stamp(t: float) -> float:
        return time.time() - t

    return application


app = _worker_app()
