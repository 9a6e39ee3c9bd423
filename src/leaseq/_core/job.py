"""The records leaseq hands to callers, and the state vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

JobState = Literal[
    "scheduled", "available", "running", "dead", "completed", "cancelled", "discarded"
]
"""Live states: scheduled (due later), available (due now), running (leased), dead.
Terminal states, kept in history: completed, cancelled, discarded."""

LIVE_STATES: tuple[JobState, ...] = ("scheduled", "available", "running", "dead")
TERMINAL_STATES: tuple[JobState, ...] = ("completed", "cancelled", "discarded")


@dataclass(frozen=True)
class EnqueueResult:
    """What ``enqueue`` returns.

    Attributes:
        id: The job's id.
        created: False when a live job with the same ``(queue, unique_key)`` already
            existed; ``id`` is then that job's id and nothing was written.
    """

    id: int
    created: bool = True


@dataclass(frozen=True, slots=True)
class Job:
    """A job leased by ``dequeue``. Present it (with its ``lease_token``) to ``heartbeat``,
    ``ack``, ``nack``, ``release`` or ``bury``.

    Attributes:
        id: The job's id.
        queue: The queue it was enqueued on.
        kind: The task name, or None for plain payload jobs.
        payload: The decoded JSON payload.
        priority: Higher runs first.
        attempts: Attempts used so far, this one included.
        max_attempts: Attempts allowed before the job goes dead.
        unique_key: The job's unique key, if any.
        lease_token: The fencing token of this lease; stale tokens are refused.
        lease_until: When the lease expires (database clock, UTC).
        worker_id: Who holds the lease.
        created_at: When the job was enqueued.
        lease: The lease length in seconds this job was dequeued with; ``heartbeat``
            extends by this much unless told otherwise.
    """

    id: int
    queue: str
    kind: str | None
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    unique_key: str | None
    lease_token: int
    lease_until: datetime
    worker_id: str
    created_at: datetime
    lease: float = field(default=30.0, compare=False)


@dataclass(frozen=True)
class JobInfo:
    """A job as ``get`` sees it, live or historical.

    ``result`` is set for completed jobs; ``error`` holds the last failure (or the bury,
    cancel or discard reason). ``finished_at`` is set once the job is in history.
    """

    id: int
    queue: str
    kind: str | None
    state: JobState
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    unique_key: str | None
    available_at: datetime | None
    lease_until: datetime | None
    worker_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    result: Any
    error: str | None
    cancel_requested: bool = False


@dataclass(frozen=True)
class QueueStats:
    """Counts for one queue. Live: available, scheduled, running, dead. History:
    completed, cancelled, discarded. ``failed`` is the number of jobs that left the
    queue without completing because they gave up (discarded). ``paused`` is True while
    workers skip the queue."""

    queue: str
    available: int = 0
    scheduled: int = 0
    running: int = 0
    dead: int = 0
    completed: int = 0
    cancelled: int = 0
    discarded: int = 0
    paused: bool = False

    @property
    def failed(self) -> int:
        """Jobs that ended without completing after giving up (discarded)."""
        return self.discarded

    def as_dict(self) -> dict[str, int | str | bool]:
        """The counts as a plain dict (for JSON output)."""
        return {
            "queue": self.queue,
            "available": self.available,
            "scheduled": self.scheduled,
            "running": self.running,
            "dead": self.dead,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "discarded": self.discarded,
            "failed": self.failed,
            "paused": self.paused,
        }
