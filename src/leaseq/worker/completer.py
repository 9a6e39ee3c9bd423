"""Buffered acks: the worker completes jobs in batches, still fenced per job.

A finished handler hands its job to ``Completer.submit`` and is done; one flush at a time
writes everything pending in one ``ack_many`` call. While a flush is in flight new acks pile
up, so batches grow with load by themselves; an idle worker flushes on the next turn of the
loop (or after ``delay`` seconds), so handlers finishing in the same turn share a write.
``on_done`` learns, per job, whether it completed (True), its lease was lost (False), or the
write failed (the exception). ``timed``, when given (metrics on), learns how many seconds
each write took.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from leaseq._client import AsyncQueue
from leaseq._core.job import Job
from leaseq.errors import NotReplicated

log = logging.getLogger("leaseq")

Done = Callable[[Job, bool | BaseException], None]


class Completer:
    def __init__(
        self, aq: AsyncQueue, on_done: Done, max_batch: int = 500, delay: float = 0.0,
        timed: Callable[[float], None] | None = None,
    ) -> None:
        self.aq = aq
        self.on_done = on_done
        self.timed = timed
        self.max_batch = max_batch
        self.delay = delay
        self.pending: list[tuple[Job, Any]] = []
        self.wake = asyncio.Event()
        self.writing = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="leaseq-completer")

    def submit(self, job: Job, result: Any) -> None:
        """Queues ``job`` to be completed with ``result`` by the next flush."""
        self.pending.append((job, result))
        self.wake.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if len(self.pending) < self.max_batch:
                await asyncio.sleep(self.delay)  # let a few more acks join this batch
            await self.flush()

    async def flush(self) -> None:
        """Writes everything submitted so far, after any write already in flight."""
        async with self.writing:
            while self.pending:
                batch = self.pending[: self.max_batch]
                self.pending = self.pending[self.max_batch:]
                await self._write(batch)

    async def _write(self, batch: list[tuple[Job, Any]]) -> None:
        began = time.perf_counter() if self.timed is not None else 0.0
        try:
            done: list[bool] = await self.aq.ack_many(batch)
        except NotReplicated as exc:
            if not (isinstance(exc.result, list) and len(exc.result) == len(batch)):
                for job, _ in batch:  # a flow's acks stopped halfway: as a failed write
                    self.on_done(job, exc)
                return
            # Completed on the primary: counted done. Lost in a failover, a job runs
            # again (its lease is undone with it), within the slots that held it.
            log.warning("ack of %d jobs written on the primary but not replicated in time "
                        "(%d of %d replicas); carrying on", len(batch), exc.acknowledged,
                        exc.wanted)
            done = exc.result
        except Exception as exc:  # every job of the batch learns of the failed write
            for job, _ in batch:
                self.on_done(job, exc)
            return
        finally:
            if self.timed is not None:
                self.timed(time.perf_counter() - began)
        for (job, _), ok in zip(batch, done, strict=True):
            self.on_done(job, ok)

    async def close(self) -> None:
        """Writes what is pending, then stops (never in the middle of a write)."""
        await self.flush()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
