"""asyncio helpers the clients and the worker share."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Waits until ``event`` is set or ``timeout`` seconds pass (None: no limit); True
    when it is set.

    Not ``asyncio.wait_for(event.wait(), timeout)``: up to Python 3.11, when the caller is
    cancelled in the same loop step that sets the event, ``wait_for`` returns normally and
    the cancellation is lost, so a cancelled ``dequeue(wait=...)`` went on waiting to the
    end (CPython gh-86296). ``asyncio.wait`` never swallows it.
    """
    if event.is_set():
        return True
    if timeout is None:  # a plain await loses no cancel, and costs no task
        await event.wait()
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter,), timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()


class CancelWatch:
    """Notices a cancel of the current task that something awaited swallowed.

    Up to Python 3.11 a driver's own ``asyncio.wait_for`` can return normally when the
    task is cancelled in the same loop step its inner call finishes (CPython gh-86296),
    and the cancel is gone, but the task still counts it in ``cancelling()``. A loop that
    awaits driver calls makes a ``CancelWatch`` first and calls ``check()`` after each:
    a cancel requested since then and not delivered is raised there, so the loop ends
    instead of running to its timeout. Cancels from before the watch (code that caught
    one and went on) do not count. Python 3.10 has no ``cancelling()``: nothing to see.
    """

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.before = self.requested()

    def requested(self) -> int:
        counter = getattr(self.task, "cancelling", None)
        return int(counter()) if counter is not None else 0

    def check(self) -> None:
        if self.requested() > self.before:
            raise asyncio.CancelledError
