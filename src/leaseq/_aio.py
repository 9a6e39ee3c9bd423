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
