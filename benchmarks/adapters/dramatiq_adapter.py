"""Dramatiq with its Redis broker.

Configuration (Dramatiq's defaults otherwise):
* storage: `RedisBroker(url=..., namespace="lqbench_dramatiq_<hex>")`, unique per
  measurement, default middleware (AgeLimit, TimeLimit, ShutdownNotifications, Callbacks,
  Pipelines, Retries), no result backend; teardown deletes the namespace's keys.
* producer: `actor.send(t)` per job. Dramatiq has no batch enqueue (a `group` sends its
  messages one by one), so enqueue_batch is not applicable.
* worker: the CLI, `dramatiq module:broker --processes W --threads 8`: one supervisor
  process that forks W worker processes (W = the workload's worker count) of 8 threads each
  (its default thread count; its default process count is the number of CPUs), default
  prefetch (2 x threads).
"""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks.adapters.base import (
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

NS_ENV = "LQBENCH_DRAMATIQ_NS"
THREADS = 8  # dramatiq's default


def make_broker(namespace: str) -> tuple[RedisBroker, dramatiq.Actor]:  # type: ignore[type-arg]
    broker = RedisBroker(url=REDIS_URL, namespace=namespace)

    def noop(t: float) -> None:
        record(t)

    actor = dramatiq.actor(noop, broker=broker, actor_name="noop", queue_name="default")
    return broker, actor


# Worker side: `dramatiq benchmarks.adapters.dramatiq_adapter:broker`.
broker = None
if os.environ.get(NS_ENV):
    broker, _actor = make_broker(os.environ[NS_ENV])


class DramatiqAdapter:
    name = "dramatiq"
    backend = "redis"
    config = (
        f"dramatiq {pkg_version('dramatiq')}; `dramatiq --processes W --threads {THREADS}` "
        "(W = workers), Redis broker, default middleware; no batch enqueue"
    )

    def __init__(self) -> None:
        self.ns = ""
        self.broker: RedisBroker | None = None
        self.actor = None
        self.last_drain = None

    def available(self) -> str | None:
        return check_redis()

    def setup(self) -> None:
        self.ns = unique_name("dramatiq")
        self.broker, self.actor = make_broker(self.ns)

    def teardown(self) -> None:
        if self.broker is not None:
            self.broker.close()
            self.broker.client.close()
        self.broker, self.actor = None, None
        if self.ns:
            delete_redis_keys(f"{self.ns}*")
        self.ns = ""

    def _env(self) -> dict[str, str]:
        return {NS_ENV: self.ns}

    def _worker_cmd(self, processes: int) -> list[str]:
        return [
            venv_script("dramatiq"),
            "benchmarks.adapters.dramatiq_adapter:broker",
            "--processes", str(processes),
            "--threads", str(THREADS),
        ]

    def enqueue_single(self, n: int) -> float:
        actor = self.actor
        assert actor is not None
        t0 = time.perf_counter()
        for _ in range(n):
            actor.send(time.time())
        return time.perf_counter() - t0

    def enqueue_concurrent(self, n: int) -> float:
        """`PRODUCERS` threads calling `actor.send` on one broker (redis-py's connection
        pool is thread-safe)."""
        actor = self.actor
        assert actor is not None
        return threads_enqueue(n, lambda: actor.send(time.time()))

    def enqueue_batch(self, n: int) -> float:
        raise NotImplementedError("dramatiq has no batch enqueue (a group sends one by one)")

    def drain(self, n: int, workers: int) -> float:
        actor = self.actor
        assert actor is not None
        for _ in range(n):
            actor.send(time.time())
        rec = Recorder()
        try:
            # One supervisor with W worker processes, as dramatiq is deployed.
            return run_drain([self._worker_cmd(workers)], self._env(), rec, n, self._set_timing)
        finally:
            rec.close()

    def _set_timing(self, timing: object) -> None:
        self.last_drain = timing

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        actor = self.actor
        assert actor is not None
        rec = Recorder()
        try:
            return run_pickup(self._worker_cmd(1), self._env(), rec, actor.send, rate, seconds)
        finally:
            rec.close()


def adapters() -> list[object]:
    return [DramatiqAdapter()]
