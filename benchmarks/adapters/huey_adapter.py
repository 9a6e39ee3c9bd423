"""huey, two adapters: SqliteHuey on a temporary file, and RedisHuey.

Configuration (huey's defaults throughout):
* storage: `SqliteHuey(name, filename=<temp dir>/huey.db)` (WAL, its default) or
  `RedisHuey(name, url=...)` (blocking BRPOP dequeue with a 1 s read timeout, its default);
  the name is unique per measurement, teardown deletes the file or the `huey.*.<name>` keys.
* producer: calling the task, `noop(t)`, one job per call. huey has no batch enqueue
  (`task.map()` is a loop of single enqueues), so enqueue_batch is not applicable.
* worker: the CLI, `huey_consumer module.huey` with its defaults: one worker thread
  (`-w 1 -k thread`), polling delay 0.1 s backing off x1.15 up to 10 s when the queue is
  empty (SQLite; Redis blocks instead), scheduler every second; `--quiet` (WARNING) instead
  of its default INFO, which prints two lines per task (see QUIET_LOGS in base.py). One
  consumer OS process per worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time

from huey import RedisHuey, SqliteHuey

from benchmarks.adapters.base import (
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

KIND_ENV, NAME_ENV, FILE_ENV = "LQBENCH_HUEY_KIND", "LQBENCH_HUEY_NAME", "LQBENCH_HUEY_FILE"


def make_huey(kind: str, name: str, filename: str) -> tuple[object, object]:
    h = SqliteHuey(name, filename=filename) if kind == "sqlite" else RedisHuey(name, url=REDIS_URL)

    @h.task(name="noop")
    def noop(t: float) -> None:
        record(t)

    return h, noop


# Worker side: `huey_consumer benchmarks.adapters.huey_adapter.huey`.
huey = None
if os.environ.get(NAME_ENV):
    huey, _noop = make_huey(
        os.environ[KIND_ENV], os.environ[NAME_ENV], os.environ.get(FILE_ENV, "")
    )


class HueyAdapter:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"huey-{kind}"
        self.backend = kind
        self.config = (
            f"huey {pkg_version('huey')}; `huey_consumer` with its defaults (1 worker thread, "
            + ("WAL, polling 0.1 s backing off to 10 s" if kind == "sqlite" else "blocking BRPOP")
            + (", `--quiet`" if QUIET_LOGS else ", INFO logging") + "); no batch enqueue"
        )
        self.qname = ""
        self.tmpdir = ""
        self.huey = None
        self.task = None
        self.last_drain = None

    def available(self) -> str | None:
        return check_redis() if self.kind == "redis" else None

    def setup(self) -> None:
        self.qname = unique_name("huey")
        self.tmpdir = tempfile.mkdtemp(prefix="lqbench-huey-")
        self.huey, self.task = make_huey(self.kind, self.qname, self._file())

    def _file(self) -> str:
        return os.path.join(self.tmpdir, "huey.db")

    def teardown(self) -> None:
        if self.huey is not None:
            storage = self.huey.storage  # type: ignore[attr-defined]
            with contextlib.suppress(Exception):
                storage.close()
        if self.kind == "redis" and self.qname:
            delete_redis_keys(f"huey.*{self.qname}*")
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        self.huey, self.task, self.qname, self.tmpdir = None, None, "", ""

    def _env(self) -> dict[str, str]:
        return {KIND_ENV: self.kind, NAME_ENV: self.qname, FILE_ENV: self._file()}

    def _worker_cmd(self) -> list[str]:
        cmd = [venv_script("huey_consumer"), "benchmarks.adapters.huey_adapter.huey"]
        return [*cmd, "--quiet"] if QUIET_LOGS else cmd

    def enqueue_single(self, n: int) -> float:
        task = self.task
        assert task is not None
        t0 = time.perf_counter()
        for _ in range(n):
            task(time.time())  # type: ignore[operator]
        return time.perf_counter() - t0

    def enqueue_concurrent(self, n: int) -> float:
        """`PRODUCERS` threads calling the task (huey is thread-safe: a connection per
        thread on SQLite, a connection pool on Redis)."""
        task = self.task
        assert task is not None
        return threads_enqueue(n, lambda: task(time.time()))  # type: ignore[operator]

    def enqueue_batch(self, n: int) -> float:
        raise NotImplementedError("huey has no batch enqueue (task.map loops over enqueue)")

    def drain(self, n: int, workers: int) -> float:
        task = self.task
        assert task is not None
        for _ in range(n):
            task(time.time())  # type: ignore[operator]
        rec = Recorder()
        try:
            cmds = [self._worker_cmd() for _ in range(workers)]
            return run_drain(cmds, self._env(), rec, n, self._set_timing)
        finally:
            rec.close()

    def _set_timing(self, timing: object) -> None:
        self.last_drain = timing

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        task = self.task
        assert task is not None
        rec = Recorder()
        try:
            return run_pickup(self._worker_cmd(), self._env(), rec, task, rate, seconds)
        finally:
            rec.close()


def adapters() -> list[object]:
    return [HueyAdapter("sqlite"), HueyAdapter("redis")]
