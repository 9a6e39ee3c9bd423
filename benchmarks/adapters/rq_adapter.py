"""RQ on Redis, two adapters: `rq` (its default forking `Worker`) and `rq-simple`
(`SimpleWorker`, which runs jobs in the worker process; RQ's own benchmark page uses both).

Configuration (RQ's defaults otherwise):
* storage: every key under `RQ_KEY_PREFIX=lqbench_rq_<hex>` (RQ reads that variable at
  import; this module sets it for the parent and passes it to the workers), queue name
  unique per measurement; teardown deletes the prefix's keys.
* producer: `Queue.enqueue(noop, t)` per job; the batch API is `Queue.enqueue_many` of
  `Queue.prepare_data(...)` in one pipeline, 1,000 per call.
* worker: the CLI, `rq worker -u <url> <queue>` (default worker class `Worker`: forks a
  work horse per job), or with `-w rq.worker.SimpleWorker`; one OS process per worker,
  default result TTL (500 s), `--logging_level WARNING` instead of its default INFO, which
  prints several lines per job (see QUIET_LOGS in base.py).
"""

from __future__ import annotations

import os
import time
import uuid

# Before rq is imported: its key prefix is read once, at import.
KEY_PREFIX = os.environ.setdefault("RQ_KEY_PREFIX", f"lqbench_rq_{uuid.uuid4().hex[:12]}")

import redis  # noqa: E402
from rq import Queue  # noqa: E402

from benchmarks.adapters.base import (  # noqa: E402
    BATCH,
    QUIET_LOGS,
    REDIS_URL,
    Recorder,
    check_redis,
    delete_redis_keys,
    pkg_version,
    record,
    run_drain,
    run_pickup,
    threads_enqueue,
    unique_name,
    venv_script,
)


def noop(t: float) -> None:
    record(t)


class RqAdapter:
    backend = "redis"

    def __init__(self, worker_class: str | None) -> None:
        self.worker_class = worker_class
        self.name = "rq" if worker_class is None else "rq-simple"
        # The forking worker runs a few dozen jobs/s here: drain 2,000 jobs, not 20,000,
        # to keep a full run under an hour (run.py reports the N used).
        self.max_drain_jobs = 2_000 if worker_class is None else None
        self.config = (
            f"rq {pkg_version('rq')}; `rq worker` "
            + ("(default `Worker`: a forked work horse per job)" if worker_class is None
               else f"`-w {worker_class}` (no fork)")
            + ("; WARNING logging" if QUIET_LOGS else "")
            + "; batch = `enqueue_many` of 1,000 in one pipeline"
        )
        self.conn: redis.Redis | None = None
        self.queue: Queue | None = None
        self.qname = ""
        self.last_drain = None

    def available(self) -> str | None:
        return check_redis()

    def setup(self) -> None:
        self.qname = unique_name("rq")
        self.conn = redis.Redis.from_url(REDIS_URL)
        self.queue = Queue(self.qname, connection=self.conn)

    def teardown(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.queue = None, None
        delete_redis_keys(f"{KEY_PREFIX}:*")

    def _env(self) -> dict[str, str]:
        return {"RQ_KEY_PREFIX": KEY_PREFIX}

    def _worker_cmd(self) -> list[str]:
        cmd = [venv_script("rq"), "worker", "-u", REDIS_URL]
        if QUIET_LOGS:
            cmd += ["--logging_level", "WARNING"]
        if self.worker_class:
            cmd += ["-w", self.worker_class]
        return [*cmd, self.qname]

    def _enqueue_many(self, n: int) -> None:
        q = self.queue
        assert q is not None and self.conn is not None
        for start in range(0, n, BATCH):
            k = min(BATCH, n - start)
            t = time.time()
            with self.conn.pipeline() as pipe:
                q.enqueue_many([Queue.prepare_data(noop, (t,)) for _ in range(k)], pipeline=pipe)
                pipe.execute()

    def enqueue_single(self, n: int) -> float:
        q = self.queue
        assert q is not None
        t0 = time.perf_counter()
        for _ in range(n):
            q.enqueue(noop, time.time())
        return time.perf_counter() - t0

    def enqueue_concurrent(self, n: int) -> float:
        """`PRODUCERS` threads sharing one `rq.Queue` (redis-py's connection pool is
        thread-safe)."""
        q = self.queue
        assert q is not None
        return threads_enqueue(n, lambda: q.enqueue(noop, time.time()))

    def enqueue_batch(self, n: int) -> float:
        t0 = time.perf_counter()
        self._enqueue_many(n)
        return time.perf_counter() - t0

    def drain(self, n: int, workers: int) -> float:
        self._enqueue_many(n)
        rec = Recorder()
        try:
            cmds = [self._worker_cmd() for _ in range(workers)]
            return run_drain(cmds, self._env(), rec, n, self._set_timing)
        finally:
            rec.close()

    def _set_timing(self, timing: object) -> None:
        self.last_drain = timing

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        q = self.queue
        assert q is not None

        def enqueue(t: float) -> None:
            q.enqueue(noop, t)

        rec = Recorder()
        try:
            return run_pickup(self._worker_cmd(), self._env(), rec, enqueue, rate, seconds)
        finally:
            rec.close()


def adapters() -> list[object]:
    return [RqAdapter(None), RqAdapter("rq.worker.SimpleWorker")]
