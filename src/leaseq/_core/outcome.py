"""Turning what a handler did into what happens to its job: a pure decision."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Literal

from leaseq._core.backoff import Backoff
from leaseq._core.job import Job, JobState
from leaseq._core.validate import Raised, error_text
from leaseq.outcomes import Bury, Discard, Retry

Action = Literal["ack", "nack", "bury", "discard", "release"]
Hook = Literal["on_failure", "on_dead"]


@dataclass(frozen=True)
class Outcome:
    """``action`` to take on the job; ``delay`` None means the job's backoff; ``exc``
    is what the handler raised, for the failure hooks."""

    action: Action
    result: Any = None
    error: str | None = None
    delay: float | None = None
    exc: BaseException | None = None


def succeeded(result: Any) -> Outcome:
    return Outcome("ack", result=result)


def failed(exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc``."""
    if isinstance(exc, Retry):
        return Outcome("nack", error=error_text(str(exc)), delay=exc.delay, exc=exc)
    if isinstance(exc, Bury):
        return Outcome("bury", error=error_text(exc.reason), exc=exc)
    if isinstance(exc, Discard):
        return Outcome("discard", error=error_text(exc.reason), exc=exc)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Outcome("nack", error=error_text(text), exc=exc)


def timed_out(seconds: float) -> Outcome:
    exc = TimeoutError(f"the task ran past its timeout of {seconds:g} s")
    return Outcome("nack", error=f"TimeoutError: {exc}", exc=exc)


def unstorable_result(exc: BaseException) -> Outcome:
    """The handler returned, but its result cannot be stored: a failed attempt."""
    return Outcome("nack", error=error_text(f"result could not be stored: {exc}"), exc=exc)


def unknown_task(kind: str | None, known: list[str]) -> Outcome:
    names = ", ".join(known) or "none"
    return Outcome(
        "bury",
        error=f"no task named {kind!r} is registered in this worker (registered: {names}); "
        "kick the job once a worker that knows it runs",
    )


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def calls(job: Job, outcome: Outcome, backoff: Backoff | None) -> list[Call]:
    """The client calls that record ``outcome``, as ``(method, args, kwargs)``; the
    worker awaits them on an ``AsyncQueue``, ``testing.drain`` makes them on a ``Queue``."""
    if outcome.action == "ack":
        return [("ack", (job, outcome.result), {})]
    if outcome.action == "nack":
        # The readable error stays the handler's traceback; the exception goes with it
        # as JobInfo.error_detail.
        error: object = outcome.error if outcome.exc is None else Raised(outcome.error,
                                                                         outcome.exc)
        return [("nack", (job, error), {"delay": outcome.delay, "backoff": backoff})]
    if outcome.action == "bury":
        return [("bury", (job,), {"reason": outcome.error})]
    if outcome.action == "discard":
        # Bury is the fenced step; the discard of the then-dead job cannot race a holder.
        # The bury records the reason (a waiter may see the dead job in between); the
        # discard then keeps what the bury wrote.
        return [("bury", (job,), {"reason": outcome.error}),
                ("discard", (job.id,), {"reason": None})]
    return [("release", (job,), {})]


def hooks(outcome: Outcome, state: JobState | None) -> tuple[Hook, ...]:
    """The failure hooks a recorded ``outcome`` calls, in order: ``on_failure`` after
    every attempt that failed by raising (``Retry``, ``Bury``, ``Discard`` and timeouts
    included), then ``on_dead`` when that left the job dead: ``Bury``, or a ``nack`` that
    returned ``state`` ``"dead"`` (attempts used up). None for successes, releases (lease
    lost, cancel, shutdown) and jobs of unknown tasks."""
    if outcome.exc is None or outcome.action not in ("nack", "bury", "discard"):
        return ()
    if outcome.action == "bury" or state == "dead":
        return ("on_failure", "on_dead")
    return ("on_failure",)
