"""The scheduler: turns an app's schedules into jobs, one per tick.

Every worker of the app runs one; there is no leader. Each tick's job carries the unique
key ``leaseq:schedule:<name>:<tick as UTC ISO>`` and an idempotency window (``unique_for``)
longer than any worker may still try that tick, so however many workers on however many
hosts enqueue the same tick, the queue keeps one job, and a tick whose job already ran is
not enqueued again.

The loop sleeps until the next tick of any schedule, recomputed from the wall clock every
quarter second (so clock jumps heal, and a stop is noticed promptly), then enqueues each
schedule's latest due tick. Ticks it woke too late for are skipped and logged; a failed
enqueue is logged and retried on the next pass, about a second later, while the tick is
still the latest. At start-up a tick missed while no worker ran is enqueued when younger
than the schedule's ``catch_up``, else logged as skipped (docs/schedules.md).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from leaseq._core import outage as _outage
from leaseq.errors import ValidationError
from leaseq.schedules import Schedule

if TYPE_CHECKING:
    from leaseq._aclient import AsyncQueue
    from leaseq.tasks import App, Task

log = logging.getLogger("leaseq.scheduler")

STOP_POLL = 0.25
"""Longest single sleep: how soon a stop or a wall-clock jump is noticed."""
MAX_SLEEP = 60.0
"""Longest wait before the next ticks are recomputed from scratch."""
RETRY = 1.0
"""Seconds before a failed enqueue is tried again (with jitter, so a fleet that lost
its database does not come back in step)."""
KEY_MARGIN = timedelta(hours=1)
"""Added to each tick's idempotency window, for clock skew between hosts and slow
enqueues: the window must outlast the last moment any worker may still try the tick."""
MAX_KEY_WINDOW = timedelta(days=3650)
"""The longest ``unique_for`` the queue accepts."""
LATE_LIST = 100
"""At most this many skipped ticks are counted one by one when the loop woke late."""


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Scheduler:
    """Enqueues the job of each tick of ``app.schedules``, through ``aq``.

    Args:
        app: The app whose schedules to run.
        aq: The client to enqueue with (the worker's own).
        clock: Returns the current time as an aware datetime; the wall clock unless a
            test injects another.
    """

    def __init__(
        self, app: App, aq: AsyncQueue, *, clock: Callable[[], datetime] = _utcnow
    ) -> None:
        self.app = app
        self.aq = aq
        self.clock = clock
        self.schedules = list(app.schedules.values())
        # Per schedule, the latest tick this scheduler has dealt with (enqueued, found
        # enqueued, or skipped); later ticks are due once the clock reaches them.
        self.handled: dict[str, datetime] = {}

    async def run(self, stopping: Callable[[], bool]) -> None:
        """Run until ``stopping()`` is true (or the task is cancelled)."""
        if not self.schedules:
            return
        log.info("scheduler started: %s", ", ".join(
            f"{s.name} ({s.describe()})" for s in self.schedules))
        retry = not await self._guarded(self.start_up())
        while not stopping():
            wake = self._next_wake(retry)
            await self._sleep_until(wake, stopping)
            if stopping():
                break
            retry = not await self._guarded(self.run_once())

    async def start_up(self) -> bool:
        """Deal with each schedule's latest past tick: enqueue it when younger than
        ``catch_up``, else log it as skipped unless some worker enqueued it. False when an
        enqueue failed (the next pass retries it)."""
        now = self.clock()
        ok = True
        for schedule in self.schedules:
            tick = schedule.last_tick(now)
            if tick is None:
                continue
            if now - tick < schedule.catch_up:
                ok = await self._enqueue(schedule, tick, "missed tick caught up") and ok
                continue
            self.handled[schedule.name] = tick
            await self._report_missed(schedule, tick)
        return ok

    async def run_once(self) -> bool:
        """Enqueue each schedule's latest due tick not yet dealt with; False when an
        enqueue failed (the next pass retries it)."""
        now = self.clock()
        ok = True
        for schedule in self.schedules:
            tick = schedule.last_tick(now)
            last = self.handled.get(schedule.name)
            if tick is None or (last is not None and tick <= last):
                continue
            if last is not None:
                self._report_late(schedule, last, tick)
            ok = await self._enqueue(schedule, tick, "tick") and ok
        return ok

    async def _guarded(self, step: Awaitable[bool]) -> bool:
        """Awaits a pass; an unexpected error is logged and counts as a failed pass, so
        the worker never loses its scheduler to it."""
        try:
            return await step
        except Exception:
            log.exception("scheduler pass failed; retrying")
            return False

    async def _enqueue(self, schedule: Schedule[Task[Any, Any]], tick: datetime, why: str) -> bool:
        task = schedule.task
        key = schedule.key(tick)
        try:
            conversion = task.conversion
            kwargs = dict(schedule.kwargs)
            payload = kwargs if conversion is None else conversion.dump_arguments(kwargs)
            result = await self.aq.enqueue(
                task.defaults.queue, payload, kind=task.name,
                priority=task.defaults.priority, max_attempts=task.defaults.max_attempts,
                lease=task.defaults.lease, headers=task.defaults.headers,
                unique_key=key, unique_for=self._window(schedule, tick),
                tags=task.defaults.tags,
            )
        except ValidationError as exc:
            # The same arguments will be refused at every retry: give up on this tick.
            log.error("schedule %s: tick %s cannot be enqueued: %s", schedule.name,
                      tick.isoformat(), exc)
            self.handled[schedule.name] = tick
            return True
        except Exception as exc:
            log.log(_outage.level_for(exc),
                    "schedule %s: enqueue of tick %s failed, will retry: %s",
                    schedule.name, tick.isoformat(), exc)
            return False
        self.handled[schedule.name] = tick
        if result.created:
            log.debug("schedule %s: %s %s enqueued as job %d", schedule.name, why,
                      tick.isoformat(), result.id)
        return True

    def _window(self, schedule: Schedule[Task[Any, Any]], tick: datetime) -> float:
        """``unique_for`` of ``tick``'s job. A worker tries a tick only while it is its
        schedule's latest (until the next tick) or, at start-up, while it is younger than
        ``catch_up``; the job finishes after the tick, so the window, counted from the
        finish, covers both, plus a margin for skew and slow enqueues."""
        reach = max(schedule.next_tick(tick) - tick, schedule.catch_up)
        return min(reach + KEY_MARGIN, MAX_KEY_WINDOW).total_seconds()

    async def _report_missed(self, schedule: Schedule[Task[Any, Any]], tick: datetime) -> None:
        try:
            found = await self.aq.jobs(schedule.task.defaults.queue, kind=schedule.task.name,
                                       unique_key=schedule.key(tick), limit=1)
        except Exception as exc:
            log.log(_outage.level_for(exc), "schedule %s: could not check tick %s: %s",
                    schedule.name, tick.isoformat(), exc)
            return
        if not found:
            log.info("schedule %s: tick %s was missed (no worker ran) and is skipped: older "
                     "than catch_up=%s", schedule.name, tick.isoformat(),
                     schedule.catch_up)

    def _report_late(self, schedule: Schedule[Task[Any, Any]], last: datetime,
                     tick: datetime) -> None:
        skipped: list[datetime] = []
        following = schedule.next_tick(last)
        while following < tick and len(skipped) < LATE_LIST:
            skipped.append(following)
            following = schedule.next_tick(following)
        if skipped:
            more = "+" if len(skipped) == LATE_LIST else ""
            log.warning("schedule %s: woke late, skipping %d%s tick(s) from %s; enqueueing "
                        "only the latest, %s", schedule.name, len(skipped), more,
                        skipped[0].isoformat(), tick.isoformat())

    def _next_wake(self, retry: bool) -> datetime:
        now = self.clock()
        try:
            wake = min(schedule.next_tick(now) for schedule in self.schedules)
        except Exception:
            log.exception("scheduler could not compute the next tick; retrying")
            retry = True
            wake = now + timedelta(seconds=MAX_SLEEP)
        if retry:
            wake = min(wake, now + timedelta(seconds=RETRY * random.uniform(0.8, 1.2)))
        return wake

    async def _sleep_until(self, wake: datetime, stopping: Callable[[], bool]) -> None:
        started = time.monotonic()
        while not stopping():
            # The wall clock is read again each time round, so a clock that jumps is
            # followed within STOP_POLL seconds rather than after a long stale sleep.
            left = min((wake - self.clock()).total_seconds(),
                       MAX_SLEEP - (time.monotonic() - started))
            if left <= 0:
                return
            await asyncio.sleep(min(left, STOP_POLL))
