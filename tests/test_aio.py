"""``leaseq._aio.wait_event``: an event wait that never loses its caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from leaseq._aio import wait_event


def test_set_within_the_timeout_is_true_and_a_timeout_is_false() -> None:
    async def main() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, event.set)
        woken = await wait_event(event, 5)
        event.clear()
        timed_out = await wait_event(event, 0.05)
        event.set()
        already = await wait_event(event, 0)
        return woken, timed_out, already

    assert asyncio.run(main()) == (True, False, True)


@pytest.mark.parametrize("timeout", [30.0, None])
def test_a_cancel_in_the_step_that_sets_the_event_is_not_lost(timeout: float | None) -> None:
    """On Python 3.11 ``asyncio.wait_for(event.wait(), t)`` returns normally here: the
    event's waiter finishes first in the loop step, and the cancellation is dropped."""

    async def main() -> None:
        event = asyncio.Event()
        waiting = asyncio.ensure_future(wait_event(event, timeout))
        await asyncio.sleep(0.01)
        event.set()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(asyncio.wait_for(main(), 10))
