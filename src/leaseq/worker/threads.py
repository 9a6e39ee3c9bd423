"""The threads that run plain (not ``async def``) handlers, fed and answered in batches.

A ``concurrent.futures`` pool costs every job a pool future, a lock, a wake-up of the
event loop through its self-pipe and a second future on the loop's side: for a handler
that takes microseconds that hand-off, not the handler, bounds the worker. Here a job is
one ``put`` on a ``SimpleQueue`` (C code, no lock held across the call); a thread takes
jobs one at a time, so a slow handler never holds back the jobs queued behind it while
another thread is free; and outcomes go back to the loop in batches, one wake-up of the
loop for every job finished since the last one was handled.

Threads start when the work needs them: a new one only when a job is queued and every
thread started so far is busy, up to ``size``, so a worker whose handlers take
microseconds runs them on one or two threads instead of ten that fight for the GIL.

The threads also measure what a handler takes, on average (``typical_run``), which the
worker uses to decide how many jobs to lease ahead of its threads.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

DECAY = 0.05
"""Weight of the newest run time in ``typical_run`` (an exponential moving average)."""

Call = tuple["asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...]]


class HandlerThreads:
    """Up to ``size`` threads running calls for one event loop.

    Args:
        loop: The loop whose futures the calls resolve.
        size: Most threads (the most plain handlers running at once).
        name: Thread name prefix.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int, name: str) -> None:
        self.loop = loop
        self.size = size
        self.name = name
        self.threads: list[threading.Thread] = []
        self.typical_run: float | None = None
        """Seconds a call takes, smoothed over recent calls; None before the first."""
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a call
        self._waiting = 0  # calls put and not yet taken
        self._count = threading.Lock()  # += is not atomic across threads
        # One deque for the object's life: appends and pops are atomic, and nothing swaps
        # it out under a thread that is about to append.
        self._done: collections.deque[tuple[asyncio.Future[Any], bool, Any]] = (
            collections.deque())
        self._collecting = False
        self._numbers = itertools.count(1)
        self._closed = False

    def submit(self, call: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Runs ``call(*args)`` in the caller's context on a thread; the future resolves
        on the loop with what it returned or raised (cancelled for ``CancelledError``)."""
        future = self.loop.create_future()
        with self._count:
            self._waiting += 1
            wanted = self._waiting > self._idle
        self._calls.put((future, contextvars.copy_context(), call, args))
        if wanted and len(self.threads) < self.size and not self._closed:
            thread = threading.Thread(target=self._serve, daemon=True,
                                      name=f"{self.name}-{next(self._numbers)}")
            self.threads.append(thread)
            thread.start()
        return future

    def close(self, wait: float = 0.5) -> None:
        """Lets every thread end once it finishes its current call, waiting up to ``wait``
        seconds for them; queued calls that never started resolve as cancelled."""
        self._closed = True
        while True:
            try:
                pending = self._calls.get_nowait()
            except queue.Empty:
                break
            if pending is not None:
                self.loop.call_soon_threadsafe(pending[0].cancel)
        for _ in self.threads:
            self._calls.put(None)
        deadline = time.monotonic() + wait
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _serve(self) -> None:
        calls = self._calls
        clock = time.perf_counter
        with self._count:
            self._idle += 1
        while True:
            item = calls.get()
            with self._count:
                self._idle -= 1
                self._waiting -= 1
            if item is None:
                return
            future, context, call, args = item
            outcome: tuple[asyncio.Future[Any], bool, Any] | None = None
            if not future.cancelled():  # a racy read, and only a shortcut: _collect checks
                began = clock()
                try:
                    outcome = (future, True, context.run(call, *args))
                except BaseException as exc:  # handed to the loop, which decides
                    outcome = (future, False, exc)
                took = clock() - began
                typical = self.typical_run
                self.typical_run = (took if typical is None
                                    else typical + DECAY * (took - typical))
            # Idle again before the loop can learn of the outcome: a call it submits in
            # answer finds this thread free instead of starting another.
            with self._count:
                self._idle += 1
            if outcome is None:
                continue
            self._done.append(outcome)
            # The loop lowers the flag before it empties the deque, so an outcome appended
            # after it looked always finds the flag down and schedules another collect.
            if not self._collecting:
                self._collecting = True
                try:
                    self.loop.call_soon_threadsafe(self._collect)
                except RuntimeError:  # the loop has closed: nobody is waiting any more
                    return

    def _collect(self) -> None:
        self._collecting = False
        done = self._done
        while done:
            future, ok, value = done.popleft()
            if future.done():  # cancelled while it ran (lease lost, shutdown)
                continue
            if ok:
                future.set_result(value)
            elif isinstance(value, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(value)
