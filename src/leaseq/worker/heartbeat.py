"""The worker's hold on its leases: the heartbeat thread that renews them and the
self-fencing that gives up a job whose renewal is late (a mixin of ``Worker``).

A **heartbeat thread** with its own client renews every held lease each lease/3, off the
handlers' threads and the event loop, so a CPU-bound handler cannot starve it. A lost
lease or a missed renewal deadline marks the job lost (async handlers are cancelled,
sync ones see ``current_job().lease_lost``) and its outcome is never written; a cancel
request stops the handler; a renewal refused by the queue's touch limits counts as a
lost lease. The event loop checks the deadlines too (``_fence``): a renewal on a dead
connection blocks the thread while the lease runs out (design §37).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime

from leaseq._client import Queue
from leaseq._core import outage as _outage
from leaseq.errors import (
    JobCancelled,
    LeaseLost,
    LeaseqError,
    NotReplicated,
    TouchLimitExceeded,
)
from leaseq.tasks import App
from leaseq.worker.context import JobContext

log = logging.getLogger("leaseq.worker")

FENCE_MARGIN = 0.1
"""A job whose lease is within this share of its length of running out, unrenewed, is
treated as lost (self-fencing)."""
FENCE_TICK = 0.05
"""How often the event loop looks for a lease past its self-fencing deadline: the check
does not wait for a renewal to come back, which on a dead network takes seconds."""


class Heartbeats:
    """Renews and fences the leases in ``inflight``; ``Worker`` provides the state."""

    app: App
    inflight: dict[int, tuple[JobContext, asyncio.Task[None]]]
    _beats_stop: threading.Event
    _beats_poke: threading.Event
    _loop: asyncio.AbstractEventLoop | None

    async def _fence(self) -> None:
        """Self-fencing on the event loop, independent of the heartbeat thread: a renewal
        on a dead connection blocks that thread until the connection is declared dead,
        while the lease runs out meanwhile (design §37)."""
        while True:
            now = time.monotonic()
            soonest = now + 0.5
            for ctx, runner in list(self.inflight.values()):
                if ctx.lease_lost or runner.done():
                    continue
                if now >= ctx.deadline:
                    self._lose(ctx, runner, "no lease renewal in time")
                else:
                    soonest = min(soonest, ctx.deadline)
            # Asleep until the soonest deadline (a renewal may move it: looked at again
            # then), at most half a second (jobs claimed meanwhile), never a busy loop.
            await asyncio.sleep(max(FENCE_TICK, soonest - now))

    def _heartbeats(self) -> None:
        """Renew held leases from a thread of its own, with a client of its own, opened
        when the first job is held (not at start, where it would compete with the first
        claim for the CPU; nor when its first renewal is due, which the connect would
        delay: the event loop self-fences a job whose renewal is late, design §37)."""
        q: Queue | None = None
        try:
            while not self._beats_stop.is_set():
                self._beats_poke.clear()
                now = time.monotonic()
                held = [(c, r) for c, r in list(self.inflight.values())
                        if not (c.lease_lost or r.done())]
                due = [(c, r) for c, r in held if now >= c.next_beat]
                if held and q is None:
                    try:
                        q = Queue(self.app.url, self.app.settings)
                    except LeaseqError as exc:
                        # As a failed renewal: the next pass tries again, and the deadline
                        # check below self-fences if it keeps failing.
                        log.log(_outage.level_for(exc), "heartbeat of %d jobs failed (%s)",
                                len(held), exc)
                        for ctx, _ in due:
                            ctx.next_beat = now + min(1.0, ctx.lease / 10)
                if due and q is not None:
                    self._beat(q, due)
                for ctx, runner in held:
                    # (a handler that returned meanwhile has nothing left to stop: its
                    # ack is tried only while the lease lasts, see Completer._again)
                    if (time.monotonic() >= ctx.deadline and not ctx.lease_lost
                            and not runner.done()):
                        self._lose(ctx, runner, "no lease renewal in time")
                soonest = min((c.next_beat for c, _ in held), default=now + 0.5)
                # Poked awake by new jobs (their first renewal may come sooner) and stop.
                self._beats_poke.wait(max(0.01, min(soonest, now + 0.5) - time.monotonic()))
        finally:
            if q is not None:
                q.close()

    def _beat(self, q: Queue, due: list[tuple[JobContext, asyncio.Task[None]]]) -> None:
        """Renews every due lease, one transaction per distinct lease length."""
        by_lease: dict[float, list[tuple[JobContext, asyncio.Task[None]]]] = {}
        for ctx, runner in due:
            by_lease.setdefault(ctx.lease, []).append((ctx, runner))
        for lease, group in by_lease.items():
            started = time.monotonic()
            try:
                states = q.heartbeat_many([c.job for c, _ in group], extend=lease)
            except NotReplicated as exc:
                # Extended on the primary, which is what fences other claimers out.
                unreplicated(exc, f"heartbeat of {len(group)} jobs")
                for ctx, _ in group:
                    ctx.deadline = started + lease * (1 - FENCE_MARGIN)
                    ctx.next_beat = started + lease / 3
                continue
            except LeaseqError as exc:
                # Retry soon; the deadline check self-fences if renewals keep failing.
                for ctx, _ in group:
                    ctx.next_beat = started + min(1.0, lease / 10)
                log.log(_outage.level_for(exc), "heartbeat of %d jobs failed (%s)",
                        len(group), exc)
                continue
            for (ctx, runner), state in zip(group, states, strict=True):
                if isinstance(state, LeaseLost):
                    self._lose(ctx, runner, "lease lost")
                    continue
                if isinstance(state, TouchLimitExceeded):
                    # The lease was not extended and will run out: stop now, as if lost.
                    self._lose(ctx, runner, f"heartbeat refused by the touch limit ({state})")
                    continue
                if isinstance(state, datetime):
                    self._extended(ctx, state, started)
                else:  # cancelled, and extended (by up to ``lease``) all the same
                    ctx.deadline = started + lease * (1 - FENCE_MARGIN)
                    ctx.next_beat = started + lease / 3
                if isinstance(state, JobCancelled) and not ctx.cancelled:
                    ctx.cancelled = True
                    log.info("job %s cancelled while running", ctx.job.id)
                    self._interrupt(runner)

    @staticmethod
    def _extended(ctx: JobContext, until: datetime, started: float) -> None:
        """The lease now ends at ``until`` (database clock). It moved by as much as the
        database says, which can be less than asked (the queue's ``max_lease``) or nothing
        (a touch inside ``min_touch_interval``), so the self-fencing deadline moves by
        exactly that, never by the lease asked for."""
        if ctx.until is not None:
            ctx.expires += (until - ctx.until).total_seconds()
        ctx.until = until
        ctx.deadline = ctx.expires - ctx.job.lease * FENCE_MARGIN
        ctx.next_beat = started + max(0.01, min(ctx.lease, ctx.expires - started) / 3)

    def _lose(self, ctx: JobContext, runner: asyncio.Task[None], why: str) -> None:
        ctx.lease_lost = True
        log.warning("job %s: %s; stopping its work, its outcome will not be written",
                    ctx.job.id, why)
        self._interrupt(runner)

    def _interrupt(self, runner: asyncio.Task[None]) -> None:
        """Cancel an async handler; a sync one can only be told (``current_job()``)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(runner.cancel)


def unreplicated(exc: NotReplicated, what: str) -> None:
    """Logs a write the primary made but too few replicas confirmed (``wait_replicas``):
    the worker carries on with what the primary answered (docs/redis.md)."""
    log.warning("%s written on the primary but not replicated in time (%d of %d replicas); "
                "carrying on, a failover now may run the job again", what,
                exc.acknowledged, exc.wanted)
