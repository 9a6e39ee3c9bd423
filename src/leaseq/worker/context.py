"""``current_job()``: what a running handler may know about its own job."""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass, field
from datetime import datetime

from leaseq._core.job import Job

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "leaseq_current_job", default=None
)


@dataclass(eq=False, slots=True)
class JobContext:
    """The job a handler is running and the worker's view of its lease.

    Attributes:
        job: The leased job.
        lease: Seconds each heartbeat extends the lease by.
        lease_lost: The lease was lost (another holder, or no renewal in time); nothing
            the handler does will be recorded. Sync handlers should check and return.
        cancelled: Someone cancelled the job; the worker records it as cancelled.
        timed_out: The task's timeout passed; its outcome is already recorded.
    """

    job: Job
    lease: float
    lease_lost: bool = False
    cancelled: bool = False
    timed_out: bool = False
    shutting_down: bool = False
    started: bool = False
    ran: float | None = None  # seconds the handler ran, once it returned or raised
    deadline: float = field(default_factory=time.monotonic)
    next_beat: float = field(default_factory=time.monotonic)
    # Where the lease ends: as the database last reported it, and as this process's
    # monotonic clock estimates it (moved by exactly what the database moved it).
    until: datetime | None = None
    expires: float = 0.0

    @property
    def should_stop(self) -> bool:
        """True when the handler's work will not be recorded or is no longer wanted."""
        return self.lease_lost or self.cancelled or self.timed_out or self.shutting_down


def current_job() -> JobContext | None:
    """The job the calling handler runs under a worker (or ``drain``), else None."""
    return _current.get()


def set_current(ctx: JobContext | None) -> contextvars.Token[JobContext | None]:
    return _current.set(ctx)
