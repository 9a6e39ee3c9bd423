"""Turning what a handler did into what happens to its job: a pure decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from leaseq._core.backoff import Backoff
from leaseq._core.job import Job, JobState
from leaseq._core.trace import format_user
from leaseq._core.validate import Raised, error_text
from leaseq.outcomes import Bury, Discard, Retry, RetryAfter, SnoozeScope

Action = Literal["ack", "nack", "bury", "discard", "release", "snooze"]
Hook = Literal["on_failure", "on_dead"]


@dataclass(frozen=True)
class Outcome:
    """``action`` to take on the job; ``delay`` None means the job's backoff; ``exc``
    is what the handler raised, for the failure hooks; ``note`` what a release records
    as the job's error (the hand-back of a job of an unknown task); ``scope`` what a
    snooze (``RetryAfter``) holds back besides the job."""

    action: Action
    result: Any = None
    error: str | None = None
    delay: float | None = None
    exc: BaseException | None = None
    note: dict[str, Any] | None = None
    scope: SnoozeScope = "job"


def succeeded(result: Any) -> Outcome:
    return Outcome("ack", result=result)


def failed(exc: BaseException) -> Outcome:
    """The outcome of a handler that raised ``exc``."""
    if isinstance(exc, RetryAfter):
        # Not a failure: no error is written, and the attempt is given back.
        return Outcome("snooze", delay=exc.seconds, exc=exc, scope=exc.scope)
    if isinstance(exc, Retry):
        return Outcome("nack", error=error_text(str(exc)), delay=exc.delay, exc=exc)
    if isinstance(exc, Bury):
        return Outcome("bury", error=error_text(exc.reason), exc=exc)
    if isinstance(exc, Discard):
        return Outcome("discard", error=error_text(exc.reason), exc=exc)
    return Outcome("nack", error=error_text(format_user(exc)), exc=exc)


def timed_out(seconds: float) -> Outcome:
    exc = TimeoutError(f"the task ran past its timeout of {seconds:g} s")
    return Outcome("nack", error=f"TimeoutError: {exc}", exc=exc)


def unstorable_result(exc: BaseException) -> Outcome:
    """The handler returned, but its result cannot be stored: a failed attempt."""
    return Outcome("nack", error=error_text(f"result could not be stored: {exc}"), exc=exc)


UNKNOWN = "UnknownTask"
"""``error_detail["type"]`` of a job handed back for an unknown task."""


def unknown_task(
    kind: str | None, known: list[str], *, first_seen: datetime | None = None,
    now: datetime | None = None, delay: float = 0.0, grace: float = 0.0,
) -> Outcome:
    """A job no registered task handles (a kind this worker does not know yet, in a
    rolling deploy, or no kind at all): handed back after ``delay`` seconds (a release,
    the attempt returned) with a note of when a worker ``first_seen`` it unknown (``now``
    on the first sight), until it has stayed unknown for ``grace`` seconds; then buried.
    ``now`` and ``first_seen`` are database times. A ``grace`` of 0 buries at once."""
    names = ", ".join(known) or "none"
    if kind is None:
        missing = f"the job has no kind: no task of this worker runs it (registered: {names})"
    else:
        missing = f"no task named {kind!r} is registered in this worker (registered: {names})"
    seen = first_seen or now
    if grace <= 0 or now is None or seen is None or (now - seen).total_seconds() >= grace:
        stayed = "" if grace <= 0 else f", handed back for {grace:g} s"
        return Outcome("bury", error=f"{missing}{stayed}; kick the job once a worker that "
                                     "knows it runs", note={"type": UNKNOWN, "kind": kind})
    note = {"type": UNKNOWN, "message": missing, "kind": kind, "first_seen": seen.isoformat(),
            "grace": grace}
    return Outcome("release", error=missing, delay=delay, note=note)


def first_seen_unknown(detail: Any) -> datetime | None:
    """When a worker first handed the job back as unknown, from its ``error_detail``;
    None when it never did (or the note is not one of ours)."""
    if not (isinstance(detail, dict) and detail.get("type") == UNKNOWN):
        return None
    try:
        return datetime.fromisoformat(str(detail.get("first_seen")))
    except ValueError:
        return None


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
    if outcome.action == "snooze":
        return [("snooze", (job, outcome.delay or 0.0), {"scope": outcome.scope})]
    if outcome.note is not None and outcome.action == "release":
        return [("release", (job,), {"delay": outcome.delay or 0.0, "error": outcome.note})]
    return [("release", (job,), {})]


def hooks(outcome: Outcome, state: JobState | None) -> tuple[Hook, ...]:
    """The failure hooks a recorded ``outcome`` calls, in order: ``on_failure`` after
    every attempt that failed by raising (``Retry``, ``Bury``, ``Discard`` and timeouts
    included), then ``on_dead`` when that left the job dead: ``Bury``, or a ``nack`` that
    returned ``state`` ``"dead"`` (attempts used up). A snooze (``RetryAfter``) is no
    failure: only ``on_dead``, when it left the job dead (past ``max_snoozes``). None for
    successes, releases (lease lost, cancel, shutdown) and jobs of unknown tasks."""
    if outcome.action == "snooze":
        return ("on_dead",) if state == "dead" and outcome.exc is not None else ()
    if outcome.exc is None or outcome.action not in ("nack", "bury", "discard"):
        return ()
    if outcome.action == "bury" or state == "dead":
        return ("on_failure", "on_dead")
    return ("on_failure",)
