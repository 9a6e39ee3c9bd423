"""Celery with the Redis broker, no result backend.

Configuration (Celery's defaults otherwise):
* storage: Redis broker; every key under kombu's `global_keyprefix` = the unique name
  `lqbench_celery_<hex>:`, which is also the queue's name (`task_default_queue`); no result
  backend, `task_ignore_result=True`; teardown deletes the prefix's keys.
* producer: `noop.delay(t)` per job. Celery has no batch enqueue (a `group` publishes its
  messages one by one), so enqueue_batch is not applicable.
* worker: the CLI, `celery -A module:app worker -Q <queue> --pool=prefork --concurrency=W
  --without-gossip --without-mingle`: one worker (its main process consumes from Redis and
  hands tasks to W forked pool processes, W = the workload's worker count; Celery's default
  is one per CPU), default prefetch multiplier 4, early ack (default), log level WARNING
  (default). Gossip and mingle only exchange state between workers at start-up (mingle
  waits for replies before consuming), which every Celery performance guide turns off on
  Redis; they do nothing for one worker.
"""

from __future__ import annotations

import os
import time

from celery import Celery

from benchmarks.adapters.base import (
    REDIS_URL,
    Recorder,
    check_redis,
    delete_redis_keys,
    pkg_version,
    record,
    run_drain,
    run_pickup,
    unique_name,
    venv_script,
)

QUEUE_ENV = "LQBENCH_CELERY_QUEUE"


def make_app(queue: str) -> tuple[Celery, object]:
    app = Celery("lqbench", broker=REDIS_URL, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_ignore_result=True,
        broker_transport_options={"global_keyprefix": f"{queue}:"},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=True,
    )

    @app.task(name="noop")
    def noop(t: float) -> None:
        record(t)

    return app, noop


# Worker side: `celery -A benchmarks.adapters.celery_adapter:app worker`.
app = None
if os.environ.get(QUEUE_ENV):
    app, _noop = make_app(os.environ[QUEUE_ENV])


class CeleryAdapter:
    name = "celery"
    backend = "redis"
    config = (
        f"celery {pkg_version('celery')} / kombu {pkg_version('kombu')}; `celery worker "
        "--pool=prefork --concurrency=W --without-gossip --without-mingle` (W = workers), "
        "Redis broker, no result backend, prefetch multiplier 4; no batch enqueue"
    )

    def __init__(self) -> None:
        self.queue = ""
        self.app: Celery | None = None
        self.task = None
        self.last_drain = None

    def available(self) -> str | None:
        return check_redis()

    def setup(self) -> None:
        self.queue = unique_name("celery")
        self.app, self.task = make_app(self.queue)

    def teardown(self) -> None:
        if self.app is not None:
            self.app.close()
        self.app, self.task = None, None
        if self.queue:
            delete_redis_keys(f"{self.queue}:*")
        self.queue = ""

    def _env(self) -> dict[str, str]:
        return {QUEUE_ENV: self.queue}

    def _worker_cmd(self, concurrency: int) -> list[str]:
        return [
            venv_script("celery"),
            "-A", "benchmarks.adapters.celery_adapter:app",
            "worker",
            "-Q", self.queue,
            "--pool=prefork",
            f"--concurrency={concurrency}",
            "--without-gossip",
            "--without-mingle",
        ]

    def _send(self, t: float) -> None:
        self.task.delay(t)  # type: ignore[attr-defined]

    def enqueue_single(self, n: int) -> float:
        task = self.task
        assert task is not None
        t0 = time.perf_counter()
        for _ in range(n):
            task.delay(time.time())  # type: ignore[attr-defined]
        return time.perf_counter() - t0

    def enqueue_batch(self, n: int) -> float:
        raise NotImplementedError("celery has no batch enqueue (a group publishes one by one)")

    def drain(self, n: int, workers: int) -> float:
        for _ in range(n):
            self._send(time.time())
        rec = Recorder()
        try:
            return run_drain([self._worker_cmd(workers)], self._env(), rec, n, self._set_timing)
        finally:
            rec.close()

    def _set_timing(self, timing: object) -> None:
        self.last_drain = timing

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        rec = Recorder()
        try:
            return run_pickup(self._worker_cmd(1), self._env(), rec, self._send, rate, seconds)
        finally:
            rec.close()


def adapters() -> list[object]:
    return [CeleryAdapter()]
