"""pgqueuer on PostgreSQL, with asyncpg (the driver its README starts with).

Configuration (pgqueuer's defaults throughout):
* storage: its own tables, installed with `Queries.install()` under a unique table prefix
  (`PGQUEUER_PREFIX=lqbench_pgqueuer_<hex>_`, which also names its NOTIFY channel); removed
  with `Queries.uninstall()`.
* producer: one asyncpg connection; `Queries.enqueue(entrypoint, payload)` per job; the batch
  API is the same call with lists (UNNEST arrays), 1,000 jobs per call. Concurrent
  producers: 32 asyncio tasks sharing `Queries(AsyncpgPoolDriver(pool))` over
  `asyncpg.create_pool(dsn)` with its default size (10 connections).
* worker: one OS process per worker running `pgqueuer.run(factory)`, which its docstring
  calls "Run a worker from *factory*, as ``pgq run`` does, without the CLI", on the CLI's
  own event loop helper (uvloop) and logger (at WARNING, see QUIET_LOGS in base.py; pgqueuer
  prints nothing per job at INFO either). The `pgq run` CLI itself fails to start
  in pgqueuer 1.6.0 with the typer this resolves to (its `--log-level` parser hands a str to
  `setup_fancy_logger`, which wants the enum). Defaults, as `pgq run`: batch size 10, no
  global concurrency limit, entrypoint `concurrency_limit=0` (unlimited), LISTEN/NOTIFY
  wake-ups, 30 s dequeue timeout. The handler is an `async def` (pgqueuer 1.x runs async
  handlers only).
* before a drain, once the backlog is in, `ANALYZE` its queue table, as for procrastinate
  (see `analyze_pg`; it makes little difference to pgqueuer).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.domain.settings import db_settings
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from benchmarks.adapters.base import (
    BATCH,
    PG_DSN,
    QUIET_LOGS,
    Recorder,
    analyze_pg,
    check_postgres,
    record,
    run_drain,
    run_pickup,
    tasks_enqueue,
    unique_name,
)

ENTRYPOINT = "noop"


# ------------------------------------------------------------------ worker side (pgq run)


@contextlib.asynccontextmanager
async def create_worker() -> AsyncIterator[PgQueuer]:
    """Factory for `pgq run` (1.x wants an async context manager); PGQUEUER_PREFIX comes
    from the environment like in any pgqueuer app."""
    conn = await asyncpg.connect(PG_DSN)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        record(float(job.payload or b"0"))

    try:
        yield pgq
    finally:
        await conn.close()


def worker_main() -> None:
    """What `pgq run benchmarks.adapters.pgqueuer_adapter:create_worker` does."""
    from pgqueuer.adapters.cli.cli import asyncio_run
    from pgqueuer.core.logconfig import LogLevel, setup_fancy_logger

    setup_fancy_logger(LogLevel.WARNING if QUIET_LOGS else LogLevel.INFO)
    asyncio_run(pgqueuer.run(create_worker))


# -------------------------------------------------------------------------- parent side


class PgqueuerAdapter:
    name = "pgqueuer"
    backend = "postgres"
    config = (
        f"pgqueuer {pgqueuer.__version__} + asyncpg {asyncpg.__version__}; `pgqueuer.run()` "
        "(= `pgq run`) with its defaults (batch size 10, unlimited concurrency, "
        "LISTEN/NOTIFY); async handler; batch enqueue = `Queries.enqueue` with lists of 1,000"
    )

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.conn: asyncpg.Connection | None = None
        self.q: Queries | None = None
        self.prefix = ""
        self.last_drain = None

    def available(self) -> str | None:
        return check_postgres()

    def _run(self, coro):  # type: ignore[no-untyped-def]
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def setup(self) -> None:
        self.prefix = unique_name("pgqueuer") + "_"
        os.environ["PGQUEUER_PREFIX"] = self.prefix
        db_settings.cache_clear()
        self.loop = asyncio.new_event_loop()
        self.conn = self._run(asyncpg.connect(PG_DSN))
        self.q = Queries(AsyncpgDriver(self.conn))
        self._run(self.q.install())

    def teardown(self) -> None:
        if self.loop is None:
            return
        try:
            if self.q is not None:
                self._run(self.q.uninstall())
            if self.conn is not None:
                self._run(self.conn.close())
        finally:
            self.loop.close()
            self.loop, self.conn, self.q = None, None, None
            os.environ.pop("PGQUEUER_PREFIX", None)
            db_settings.cache_clear()

    def _env(self) -> dict[str, str]:
        return {"PGQUEUER_PREFIX": self.prefix}

    def _worker_cmd(self) -> list[str]:
        return [sys.executable, "-m", "benchmarks.adapters.pgqueuer_adapter"]

    async def _enqueue_many(self, n: int) -> None:
        assert self.q is not None
        for start in range(0, n, BATCH):
            k = min(BATCH, n - start)
            t = repr(time.time()).encode()
            await self.q.enqueue([ENTRYPOINT] * k, [t] * k, [0] * k)

    def enqueue_single(self, n: int) -> float:
        q = self.q
        assert q is not None

        async def go() -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                await q.enqueue(ENTRYPOINT, repr(time.time()).encode())
            return time.perf_counter() - t0

        return self._run(go())

    def enqueue_batch(self, n: int) -> float:
        async def go() -> float:
            t0 = time.perf_counter()
            await self._enqueue_many(n)
            return time.perf_counter() - t0

        return self._run(go())

    def enqueue_concurrent(self, n: int) -> float:
        """`PRODUCERS` asyncio tasks (pgqueuer's client is async only), each enqueueing one
        job per call through one shared `Queries` over an asyncpg pool with asyncpg's
        default size (10 connections), as an async web app would set it up."""

        async def go() -> float:
            async with asyncpg.create_pool(PG_DSN) as pool:
                q = Queries(AsyncpgPoolDriver(pool))
                return await tasks_enqueue(
                    n, lambda: q.enqueue(ENTRYPOINT, repr(time.time()).encode()))

        return self._run(go())

    def enqueue_concurrent_async(self, n: int) -> float:
        """The same as `enqueue_concurrent`: pgqueuer's natural shape is already tasks."""
        return self.enqueue_concurrent(n)

    def drain(self, n: int, workers: int) -> float:
        self._run(self._enqueue_many(n))
        analyze_pg(f"{self.prefix}pgqueuer")
        rec = Recorder()
        try:
            cmds = [self._worker_cmd() for _ in range(workers)]
            return run_drain(cmds, self._env(), rec, n, self._set_timing)
        finally:
            rec.close()

    def _set_timing(self, timing: object) -> None:
        self.last_drain = timing

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        q = self.q
        assert q is not None

        def enqueue(t: float) -> None:
            self._run(q.enqueue(ENTRYPOINT, repr(t).encode()))

        rec = Recorder()
        try:
            return run_pickup(self._worker_cmd(), self._env(), rec, enqueue, rate, seconds)
        finally:
            rec.close()


def adapters() -> list[object]:
    return [PgqueuerAdapter()]


if __name__ == "__main__":
    worker_main()
