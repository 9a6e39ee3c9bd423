"""Buffered acks: the worker completes jobs in batches, still fenced per job.

A finished handler hands its job to ``Completer.submit`` and is done; one flush at a time
writes everything pending in one ``ack_many`` call. While a flush is in flight new acks pile
up, so batches grow with load by themselves; an idle worker flushes on the next turn of the
loop (or after ``delay`` seconds), so handlers finishing in the same turn share a write.
``on_done`` learns, per job, whether it completed (True), its lease was lost (False), or the
write failed (the exception). ``timed``, when given (metrics on), learns how many seconds
each write took.

A write that fails with ``BackendUnavailable`` (the connection dropped for longer than
the client's own reconnects; the write may or may not have committed) is tried again,
pausing 0.1 s doubling to 2 s, for the jobs whose leases ``lease_ends`` says the worker
still holds: repeating an ack is safe (a repeat by the same lease is a success, a lease
lost meanwhile refuses it), and a job whose ack gets through is not run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from leaseq._aclient import AsyncQueue
from leaseq._core import outage as _outage
from leaseq._core.job import Job
from leaseq.errors import BackendUnavailable, NotReplicated

log = logging.getLogger("leaseq.worker")

Done = Callable[[Job, bool | BaseException], None]
RETRY_FIRST, RETRY_MAX = 0.1, 2.0  # pauses between tries of an ack write that failed


class Completer:
    def __init__(
        self, aq: AsyncQueue, on_done: Done, max_batch: int = 500, delay: float = 0.0,
        timed: Callable[[float], None] | None = None,
        lease_ends: Callable[[Job], float] | None = None,
    ) -> None:
        self.aq = aq
        self.on_done = on_done
        self.timed = timed
        self.lease_ends = lease_ends
        self.pause = RETRY_FIRST
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
        failure: Exception | None
        try:
            done: list[bool] = await self.aq.ack_many(batch)
        except NotReplicated as exc:
            if isinstance(exc.result, list) and len(exc.result) == len(batch):
                # Completed on the primary: counted done. Lost in a failover, a job runs
                # again (its lease is undone with it), within the slots that held it.
                log.warning("ack of %d jobs written on the primary but not replicated in "
                            "time (%d of %d replicas); carrying on", len(batch),
                            exc.acknowledged, exc.wanted)
                done, failure = exc.result, None
            else:
                failure = exc  # a flow's acks stopped halfway: as a failed write
        except Exception as exc:
            failure = exc
        else:
            failure = None
        finally:
            if self.timed is not None:
                self.timed(time.perf_counter() - began)
        if failure is None:
            self.pause = RETRY_FIRST
            for (job, _), ok in zip(batch, done, strict=True):
                self.on_done(job, ok)
            return
        # Every job of the batch learns of the failed write, but those tried again.
        again = self._again(batch, failure)
        for job, _ in batch:
            if job.id not in again:
                self.on_done(job, failure)
        if again:
            # WARNING unless the fetch loop is reporting an outage: a lost ack reply
            # with the database otherwise answering shows nowhere else.
            log.log(_outage.level(),
                    "ack of %d jobs failed (%s); trying again in %.1f s while their "
                    "leases last", len(again), failure, self.pause)
            await asyncio.sleep(self.pause)
            self.pause = min(RETRY_MAX, self.pause * 2)
            self.pending[:0] = [item for item in batch if item[0].id in again]

    def _again(self, batch: list[tuple[Job, Any]], exc: Exception) -> set[int]:
        """The ids of the jobs whose failed ack is worth another try: the outcome is
        unknown (``BackendUnavailable``) and the lease lasts past the pause."""
        if self.lease_ends is None or not isinstance(exc, BackendUnavailable):
            return set()
        after = time.monotonic() + self.pause
        return {job.id for job, _ in batch if self.lease_ends(job) > after}

    async def close(self) -> None:
        """Writes what is pending, then stops (never in the middle of a write)."""
        await self.flush()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
