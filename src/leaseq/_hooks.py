"""Failure hooks: user functions told about a failed attempt (``on_failure``) or a job
that went dead (``on_dead``).

Which hooks an outcome calls is decided in ``_core/outcome.py`` (``hooks``); this module
calls them, for the worker (``call_async``) and for ``leaseq.testing.drain`` (``call``),
the same way: a hook gets the job as stored after the failure was recorded and the
exception, and what a hook raises is logged and goes no further, since the job's outcome
is already written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from leaseq._core.job import JobInfo
from leaseq._core.outcome import Hook

FailureHook = Callable[[JobInfo, BaseException], "Awaitable[None] | None"]
"""``fn(job, exc)``, plain or ``async def``: ``job`` is the ``JobInfo`` as stored after
the failure was recorded and ``exc`` what the handler raised."""

log = logging.getLogger("leaseq.worker")


def call(hook: FailureHook, info: JobInfo, exc: BaseException, task: str,
         which: Hook) -> None:
    """Run ``hook`` in this thread (an ``async def`` one on a fresh event loop); log what
    it raises."""
    try:
        returned = hook(info, exc)
        if inspect.isawaitable(returned):
            asyncio.run(_await(returned))
    except Exception:
        _failed(task, which, info.id)


async def call_async(
    hook: FailureHook, info: JobInfo, exc: BaseException, task: str, which: Hook,
    executor: concurrent.futures.Executor | None,
) -> None:
    """Await an ``async def`` hook on this loop; run a plain one in ``executor`` so it
    cannot block the loop. Log what it raises."""
    try:
        if inspect.iscoroutinefunction(hook):
            await hook(info, exc)
            return
        returned = await asyncio.get_running_loop().run_in_executor(executor, hook, info, exc)
        if inspect.isawaitable(returned):  # a plain function that returned a coroutine
            await returned
    except Exception:
        _failed(task, which, info.id)


def _failed(task: str, which: Hook, job_id: int) -> None:
    log.exception("job %s: %s hook of task %s raised; the job's outcome stands",
                  job_id, which, task)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
