"""Waits that end when asked: ``leaseq._aio.wait_event`` never loses its caller's cancel,
and a blocking dequeue stops its push listener even when the listener loses one."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import leaseq
from leaseq import backends
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


async def _stubborn(url: str, prefix: str, queues: object, wake: object,
                    stopping: Callable[[], bool]) -> None:
    """A push listener that loses every cancel, as a cancel lost inside redis-py on
    Python 3.11 makes one (design §27), and ends only when told to stop."""
    while not stopping():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.02)


@pytest.fixture
def stubborn(monkeypatch: pytest.MonkeyPatch) -> None:
    caps = backends._CAPABILITIES["sqlite"]
    monkeypatch.setitem(backends._CAPABILITIES, "sqlite", replace(caps, listener=_stubborn))


def test_a_cancelled_async_wait_ends_though_its_listener_loses_the_cancel(
        stubborn: None, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    outcome: list[BaseException] = []

    async def main() -> None:
        async with leaseq.connect_async(url) as aq:
            await aq.migrate()
            waiting = asyncio.ensure_future(aq.dequeue("b", wait=30))
            await asyncio.sleep(0.2)
            waiting.cancel()
            try:
                await waiting
            except BaseException as exc:  # the test reads it below
                outcome.append(exc)

    # In a thread of its own: a wait that never ends must fail this test, not hang it.
    runner = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    runner.start()
    runner.join(timeout=15)
    assert not runner.is_alive(), "the cancelled wait is still waiting for its listener"
    assert len(outcome) == 1 and isinstance(outcome[0], asyncio.CancelledError), outcome


def test_a_sync_wait_stops_its_listener_though_it_loses_the_cancel(
        stubborn: None, tmp_path: Path) -> None:
    with leaseq.connect(f"sqlite:///{tmp_path / 'q.db'}") as q:
        q.migrate()
        assert q.dequeue("b", wait=0.2) == []
        deadline = time.monotonic() + 3  # InThread.stop() gives up after 5 s
        while any(t.name == "leaseq-listen" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the listener thread outlived its wait"
            time.sleep(0.01)
