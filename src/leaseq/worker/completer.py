"""Buffered acks: the worker completes jobs in batches, still fenced per job.

Handlers hand their results to ``Completer.ack`` and wait; one flush at a time sends
everything pending in one ``ack_many`` transaction. While a flush is in flight new acks
pile up, so batches grow with load by themselves, and an idle worker flushes after
``delay`` seconds (by default it yields to the loop once, so handlers finishing in the
same turn share a write). Each waiter learns whether its own job completed or its lease was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from leaseq._client import AsyncQueue
from leaseq._core.job import Job


class Completer:
    def __init__(self, aq: AsyncQueue, max_batch: int = 500, delay: float = 0.0) -> None:
        self.aq = aq
        self.max_batch = max_batch
        self.delay = delay
        self.pending: list[tuple[Job, Any, asyncio.Future[bool]]] = []
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="leaseq-completer")

    async def ack(self, job: Job, result: Any) -> bool:
        """Completes ``job``; False when its lease was lost (nothing was written)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending.append((job, result, future))
        self.wake.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if len(self.pending) < self.max_batch:
                await asyncio.sleep(self.delay)  # let a few more acks join this batch
            while self.pending:
                batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch:]
                await self._flush(batch)

    async def _flush(self, batch: list[tuple[Job, Any, asyncio.Future[bool]]]) -> None:
        try:
            done = await self.aq.ack_many([(job, result) for job, result, _ in batch])
        except Exception as exc:  # every waiter sees the failure of its own write
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), ok in zip(batch, done, strict=True):
            if not future.done():
                future.set_result(ok)

    async def close(self) -> None:
        """Flushes what is pending, then stops."""
        while self.pending:
            batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch:]
            await self._flush(batch)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
