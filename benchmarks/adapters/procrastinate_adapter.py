"""procrastinate on PostgreSQL, with its psycopg 3 connector.

Configuration:
* storage: procrastinate's schema (`App.schema_manager.apply_schema()`) created inside a
  PostgreSQL schema of its own, `lqbench_procrastinate_<hex>`, chosen through the connection's
  `search_path`; teardown drops that schema. The queue has the same unique name.
* producer: the synchronous API inside `app.open()` (a psycopg connection pool);
  `task.defer(t=...)` per job; the batch API is `task.batch_defer(*kwargs)`, 1,000 per call.
* worker: the CLI, `procrastinate --app=... worker --queues=<q> --concurrency=10`, one OS
  process per worker, LISTEN/NOTIFY on (default), 5 s polling fallback (default), jobs kept
  after completion (default `--delete-jobs never`), `--log-level=warning` (see QUIET_LOGS in
  base.py). The task is an `async def`. procrastinate's default concurrency is 1 (one job at
  a time per worker); we give it 10 concurrent job slots because that is faster here (one
  process drained 10-40 % more jobs/s with 10 than with 1; with two processes they were
  even). LQBENCH_PROCRASTINATE_CONCURRENCY overrides it.
* before a drain, once the backlog is in, `ANALYZE procrastinate_jobs` (see `analyze_pg`):
  on a table filled a moment ago its claim query plans a bitmap scan of the whole backlog
  per fetch (12 ms at 20,000 jobs, 0.04 ms after ANALYZE) and drained 52 jobs/s instead of
  about 500. Autovacuum would have analyzed the table within a minute on a live database.
"""

from __future__ import annotations

import contextlib
import os
import time

import psycopg
from procrastinate import App, PsycopgConnector, tasks

from benchmarks.adapters.base import (
    BATCH,
    PG_DSN,
    QUIET_LOGS,
    Recorder,
    analyze_pg,
    check_postgres,
    pkg_version,
    record,
    run_drain,
    run_pickup,
    unique_name,
    venv_script,
)

CONCURRENCY = int(os.environ.get("LQBENCH_PROCRASTINATE_CONCURRENCY", "10"))
SCHEMA_ENV = "LQBENCH_PROCRASTINATE_SCHEMA"


def make_app(schema: str) -> tuple[App, tasks.Task]:  # type: ignore[type-arg]
    app = App(
        connector=PsycopgConnector(conninfo=PG_DSN, kwargs={"options": f"-c search_path={schema}"})
    )

    @app.task(name="noop", queue=schema)
    async def noop(t: float) -> None:
        record(t)

    return app, noop


# Worker side: `procrastinate --app=benchmarks.adapters.procrastinate_adapter.app worker`.
app, noop_task = make_app(os.environ.get(SCHEMA_ENV, "public"))


class ProcrastinateAdapter:
    name = "procrastinate"
    backend = "postgres"
    config = (
        f"procrastinate {pkg_version('procrastinate')} + psycopg {psycopg.__version__}; "
        f"`procrastinate worker --concurrency={CONCURRENCY}` "
        "(default 1; faster here), LISTEN/NOTIFY, async task, WARNING logging; sync `defer`; "
        "batch = `batch_defer` of 1,000"
    )

    def __init__(self) -> None:
        self.schema = ""
        self.app: App | None = None
        self.task = None
        self.last_drain = None

    def available(self) -> str | None:
        return check_postgres()

    def setup(self) -> None:
        self.schema = unique_name("procrastinate")
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.schema}")
        self.app, self.task = make_app(self.schema)
        self.app.open()
        self.app.schema_manager.apply_schema()

    def teardown(self) -> None:
        if self.app is not None:
            with contextlib.suppress(Exception):  # setup may have failed before open()
                self.app.close()
            self.app = None
        if self.schema:
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            self.schema = ""

    def _worker_cmd(self) -> list[str]:
        return [
            venv_script("procrastinate"),
            "--app=benchmarks.adapters.procrastinate_adapter.app",
            *(["--log-level=warning"] if QUIET_LOGS else []),
            "worker",
            f"--queues={self.schema}",
            f"--concurrency={CONCURRENCY}",
        ]

    def _env(self) -> dict[str, str]:
        return {SCHEMA_ENV: self.schema}

    def _defer_many(self, n: int) -> None:
        assert self.task is not None
        for start in range(0, n, BATCH):
            k = min(BATCH, n - start)
            t = time.time()
            self.task.batch_defer(*({"t": t} for _ in range(k)))

    def enqueue_single(self, n: int) -> float:
        task = self.task
        assert task is not None
        t0 = time.perf_counter()
        for _ in range(n):
            task.defer(t=time.time())
        return time.perf_counter() - t0

    def enqueue_batch(self, n: int) -> float:
        t0 = time.perf_counter()
        self._defer_many(n)
        return time.perf_counter() - t0

    def drain(self, n: int, workers: int) -> float:
        self._defer_many(n)
        analyze_pg(f"{self.schema}.procrastinate_jobs")
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

        def enqueue(t: float) -> None:
            task.defer(t=t)

        rec = Recorder()
        try:
            return run_pickup(self._worker_cmd(), self._env(), rec, enqueue, rate, seconds)
        finally:
            rec.close()


def adapters() -> list[object]:
    return [ProcrastinateAdapter()]
