"""leaseq on each of its backends, measured exactly like the peers.

Configuration:
* producer: `Queue.enqueue` (one transaction per job) and `Queue.enqueue_many` in batches of
  1,000 (one statement per batch on PostgreSQL and MySQL, one transaction on SQLite);
  concurrent producers: 32 threads sharing one `Queue`, or 32 asyncio tasks sharing one
  `AsyncQueue`, default settings (group commit on: enqueues that arrive while one is
  being written share the next transaction);
* worker: the CLI, `leaseq worker benchmarks.adapters.leaseq_adapter:app` with its default
  concurrency per OS process, as a user who passes no options gets it; the task is a no-op
  that calls `record` and returns: an `async def` on the worker's event loop (1,000 jobs at
  once) for `leaseq-BACKEND`, a plain `def` on the worker's threads (10 at once) for
  `leaseq-def-BACKEND`, each on a queue of its own; default lease 30 s (renewed every 10 s),
  acks buffered and flushed in batches; poll interval 0.1 s
  (PostgreSQL also wakes on LISTEN/NOTIFY, Redis on pub/sub);
* storage: a fresh table prefix (or key prefix) per measurement, dropped in teardown.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import leaseq
from benchmarks.adapters.base import (
    BATCH,
    MYSQL_URL,
    PG_DSN,
    REDIS_URL,
    Recorder,
    record,
    run_drain,
    run_pickup,
    tasks_enqueue,
    threads_enqueue,
    unique_name,
)

URL_ENV, PREFIX_ENV = "LQBENCH_LEASEQ_URL", "LQBENCH_LEASEQ_PREFIX"
QUEUE = "bench"
DEF_QUEUE = "bench_def"  # the plain-`def` task's own queue: the worker sizes itself by it

# Worker side: `leaseq worker benchmarks.adapters.leaseq_adapter:app`.
app = leaseq.App(os.environ.get(URL_ENV, "memory://lqbench"),
                 table_prefix=os.environ.get(PREFIX_ENV, "leaseq_"))


@app.task(queue=QUEUE, name="noop")
async def noop(t: float) -> None:
    record(t)


@app.task(queue=DEF_QUEUE, name="noop_def")
def noop_def(t: float) -> None:
    record(t)


class LeaseqAdapter:
    def __init__(self, backend: str, url: str, plain: bool = False) -> None:
        self.backend = backend
        self.plain = plain
        self.name = f"leaseq-def-{backend}" if plain else f"leaseq-{backend}"
        self.queue, self.kind = (DEF_QUEUE, "noop_def") if plain else (QUEUE, "noop")
        handler = ("plain `def` no-op task: 10 threads per worker process" if plain else
                   "async no-op task: up to 1,000 concurrent jobs per worker process")
        self.config = (f"leaseq {leaseq.__version__}: `leaseq worker` with default options "
                       f"({handler}), batched claims/acks, poll 0.1 s (+NOTIFY on PostgreSQL, "
                       "pub/sub on Redis)")
        self.url = url
        self.q: leaseq.Queue | None = None
        self.prefix = ""
        self.last_drain = None

    def available(self) -> str | None:
        try:
            q = leaseq.connect(self.url, table_prefix=unique_name("probe")[:30] + "_")
            q.close()
        except leaseq.LeaseqError as exc:
            return f"{self.url.split('@')[-1]}: {exc}"
        return None

    def setup(self) -> None:
        self.prefix = unique_name("lq")[-20:] + "_"
        if self.backend == "sqlite":
            self.url = f"sqlite:///{os.environ.get('TMPDIR', '/tmp')}/{self.prefix}.db"
        self.q = leaseq.connect(self.url, table_prefix=self.prefix, reclaim_interval=None)
        self.q.migrate()

    def teardown(self) -> None:
        if self.q is not None:
            drop = getattr(self.q._backend, "drop", None)
            if drop is not None:
                drop()
            self.q.close()
            self.q = None
        if self.backend == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                path = self.url.split("sqlite:///", 1)[1] + suffix
                if os.path.exists(path):
                    os.unlink(path)

    def _job(self) -> dict[str, object]:
        return {"queue": self.queue, "payload": {"t": time.time()}, "kind": self.kind}

    def enqueue_single(self, n: int) -> float:
        assert self.q is not None
        start = time.perf_counter()
        for _ in range(n):
            self.q.enqueue(self.queue, {"t": time.time()}, kind=self.kind)
        return time.perf_counter() - start

    def enqueue_batch(self, n: int) -> float:
        assert self.q is not None
        start = time.perf_counter()
        for first in range(0, n, BATCH):
            self.q.enqueue_many([self._job() for _ in range(min(BATCH, n - first))])
        return time.perf_counter() - start

    def enqueue_concurrent(self, n: int) -> float:
        """`PRODUCERS` threads sharing one `Queue` (default settings: group commit on, pool
        of 10 connections), each calling `enqueue` once per job."""
        q = self.q
        assert q is not None
        return threads_enqueue(n, lambda: q.enqueue(QUEUE, {"t": time.time()}, kind="noop"))

    def enqueue_concurrent_async(self, n: int) -> float:
        """`PRODUCERS` asyncio tasks sharing one `AsyncQueue` (default settings), each
        awaiting `enqueue` once per job."""

        async def go() -> float:
            aq = leaseq.connect_async(self.url, table_prefix=self.prefix, reclaim_interval=None)
            try:
                await aq.queue_configs()  # opens the pool first, untimed, as pgqueuer's is
                return await tasks_enqueue(
                    n, lambda: aq.enqueue(QUEUE, {"t": time.time()}, kind="noop"))
            finally:
                await aq.close()

        return asyncio.run(go())

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "leaseq.cli", "worker",
                "benchmarks.adapters.leaseq_adapter:app", "--queues", self.queue,
                "--poll-interval", "0.1", "--log-level", "WARNING"]

    def _env(self) -> dict[str, str]:
        return {URL_ENV: self.url, PREFIX_ENV: self.prefix}

    def drain(self, n: int, workers: int) -> float:
        assert self.q is not None
        for first in range(0, n, 5000):
            self.q.enqueue_many([self._job() for _ in range(min(5000, n - first))])
        rec = Recorder()
        try:
            return run_drain([self._command()] * workers, self._env(), rec, n,
                             lambda timing: setattr(self, "last_drain", timing))
        finally:
            rec.close()

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        assert self.q is not None
        q = self.q
        rec = Recorder()
        try:
            return run_pickup(self._command(), self._env(), rec,
                              lambda t: q.enqueue(self.queue, {"t": t}, kind=self.kind),
                              rate, seconds)
        finally:
            rec.close()


def adapters() -> list[LeaseqAdapter]:
    urls = {"postgres": PG_DSN, "mysql": MYSQL_URL, "sqlite": "sqlite:///unused.db"}
    try:
        import redis  # noqa: F401

        urls["redis"] = REDIS_URL
    except ImportError:
        pass
    return [LeaseqAdapter(backend, url, plain) for plain in (False, True)
            for backend, url in urls.items()]
