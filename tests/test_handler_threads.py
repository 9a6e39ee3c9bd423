"""HandlerThreads: the threads that run plain handlers, fed and answered in batches."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from leaseq.worker.threads import HandlerThreads


def run(body: Callable[[HandlerThreads], Any], size: int = 4) -> Any:
    """Runs ``body(threads)`` (a coroutine function) on a fresh loop, then closes."""
    async def main() -> Any:
        threads = HandlerThreads(asyncio.get_running_loop(), size, "test-job")
        try:
            return await body(threads)
        finally:
            threads.close()

    return asyncio.run(main())


def test_calls_resolve_with_what_they_return_or_raise() -> None:
    def boom() -> None:
        raise ValueError("no")

    def given_back() -> None:
        raise asyncio.CancelledError

    async def body(threads: HandlerThreads) -> None:
        assert await threads.submit(lambda x: x * 2, 21) == 42
        with pytest.raises(ValueError, match="no"):
            await threads.submit(boom)
        future = threads.submit(given_back)
        with pytest.raises(asyncio.CancelledError):
            await future
        assert future.cancelled()

    run(body)


def test_every_call_of_a_burst_resolves_once() -> None:
    async def body(threads: HandlerThreads) -> list[int]:
        return list(await asyncio.gather(*(threads.submit(lambda i=i: i) for i in range(5000))))

    assert run(body) == list(range(5000))


def test_quick_calls_one_after_another_need_one_thread() -> None:
    async def body(threads: HandlerThreads) -> int:
        for i in range(200):
            assert await threads.submit(lambda i=i: i) == i
        return len(threads.threads)

    assert run(body, size=10) == 1


def test_a_blocked_call_does_not_hold_back_the_calls_queued_after_it() -> None:
    release = threading.Event()

    async def body(threads: HandlerThreads) -> None:
        blocked = threads.submit(release.wait, 30)
        quick = threads.submit(lambda: "done")
        assert await asyncio.wait_for(quick, 10) == "done"
        assert not blocked.done()
        release.set()
        assert await blocked is True

    try:
        run(body, size=2)
    finally:
        release.set()


def test_never_more_calls_at_once_than_threads() -> None:
    now = {"running": 0, "peak": 0}
    lock = threading.Lock()

    def busy() -> None:
        with lock:
            now["running"] += 1
            now["peak"] = max(now["peak"], now["running"])
        time.sleep(0.005)
        with lock:
            now["running"] -= 1

    async def body(threads: HandlerThreads) -> int:
        await asyncio.gather(*(threads.submit(busy) for _ in range(60)))
        return len(threads.threads)

    assert run(body, size=3) <= 3
    assert now["peak"] == 3


def test_the_typical_run_time_follows_the_calls() -> None:
    async def body(threads: HandlerThreads) -> None:
        assert threads.typical_run is None
        for _ in range(5):
            await threads.submit(time.sleep, 0.02)
        assert threads.typical_run is not None and threads.typical_run >= 0.015

    run(body, size=1)


def test_close_cancels_calls_that_never_started_and_ends_the_threads() -> None:
    release = threading.Event()

    async def body(threads: HandlerThreads) -> None:
        blocked = threads.submit(release.wait, 30)
        queued = threads.submit(lambda: "never")
        threads.close(wait=0)
        release.set()
        assert await blocked is True
        with pytest.raises(asyncio.CancelledError):
            await queued
        for thread in threads.threads:
            thread.join(10)
            assert not thread.is_alive()

    try:
        run(body, size=1)
    finally:
        release.set()
