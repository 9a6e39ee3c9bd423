"""The records leaseq hands to callers, and the state vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from leaseq._core.error_line import error_line
from leaseq.errors import InvalidArgument

JobState = Literal[
    "scheduled", "available", "running", "dead", "completed", "cancelled", "discarded"
]
"""Live states: scheduled (due later), available (due now), running (leased), dead.
Terminal states, kept in history: completed, cancelled, discarded."""

LIVE_STATES: tuple[JobState, ...] = ("scheduled", "available", "running", "dead")
TERMINAL_STATES: tuple[JobState, ...] = ("completed", "cancelled", "discarded")


class ResultWaiter(Protocol):
    """How an ``EnqueueResult`` waits for its job: the client (or task) that enqueued
    it sets one (``leaseq._results``); see ``Queue.wait`` for what both methods do."""

    def wait(self, job_id: int, timeout: float | None) -> Any:
        """Block until the job finished; its result, or ``JobFailed``/``TimeoutError``."""

    async def wait_async(self, job_id: int, timeout: float | None) -> Any:
        """``wait`` for asyncio code."""


@dataclass(frozen=True)
class EnqueueResult:
    """What ``enqueue`` returns.

    Attributes:
        id: The job's id.
        created: False when a live job with the same ``(queue, unique_key)`` already
            existed; ``id`` is then that job's id and nothing was written.
        waiter: Set by the client that enqueued (and by a task, which decodes the
            result): what ``wait`` and ``wait_async`` ask. Not compared, hashed,
            printed or pickled: two results for the same job are equal whoever made them.
    """

    id: int
    created: bool = True
    waiter: ResultWaiter | None = field(default=None, compare=False, repr=False, kw_only=True)

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the job has finished and return its result (plain JSON, or for a
        task the type its return annotation names): ``Queue.wait(self.id, timeout)``.
        Works on results of the synchronous ``Queue`` and of any task's ``enqueue`` or
        ``enqueue_async``; for a plain ``AsyncQueue`` use ``wait_async``.

        Raises:
            JobFailed: The job went dead, or was discarded or cancelled.
            TimeoutError: ``timeout`` seconds passed first (None: wait for ever).
            InvalidArgument: This result was not made by a client (nothing to ask), or
                came from an ``AsyncQueue`` outside a task.
        """
        return self._waiter().wait(self.id, timeout)

    async def wait_async(self, timeout: float | None = None) -> Any:
        """``wait`` for asyncio code; works on results of ``Queue``, ``AsyncQueue`` and
        tasks alike (a sync ``Queue``'s reads then run in a thread)."""
        return await self._waiter().wait_async(self.id, timeout)

    def _waiter(self) -> ResultWaiter:
        if self.waiter is None:
            raise InvalidArgument(
                f"EnqueueResult(id={self.id}) was not returned by a leaseq client, so it "
                "cannot wait; use queue.wait(result.id) instead"
            )
        return self.waiter

    def __reduce__(self) -> tuple[type[EnqueueResult], tuple[int, bool]]:
        # The waiter holds a client (connections, threads): a pickled result keeps only
        # what identifies the job.
        return type(self), (self.id, self.created)


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
        headers: The string map enqueued with the job (``enqueue(headers=...)``; with
            ``leaseq.tracing`` on, the trace context too), or None.
        available_at: When the job became due for this lease (database clock, UTC).
        reserves: Times the job was leased, this lease included.
        releases: Times it was given back by ``release``.
        timeouts: Leases of it that ran out and were reclaimed.
        tags: The job's tags (``enqueue(tags=[...])``) in the order given, duplicates
            dropped; ``()`` when it has none.
        snoozes: Times a handler put it back with ``RetryAfter`` (or ``snooze``) since
            it was enqueued or last kicked; none of them used an attempt. Past the
            queue's ``max_snoozes`` the next snooze sends the job dead.
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
    headers: dict[str, str] | None = None
    available_at: datetime | None = None
    reserves: int = 0
    releases: int = 0
    timeouts: int = 0
    tags: tuple[str, ...] = ()
    snoozes: int = 0


@dataclass(frozen=True)
class Undecodable:
    """A stored value that does not decode, in place of the value.

    What leaseq writes always decodes, but a row written by SQL, by hand or by an older
    version may hold text that is not JSON, or JSON nested too deep for Python's decoder
    (about 1,000 levels). Reading such a job never raises: ``JobInfo.payload``,
    ``result``, ``headers`` and ``error_detail`` hold an ``Undecodable`` instead. A claim
    never hands out such a job: it is buried (dead) with the error
    ``{"type": "Undecodable", "message": ...}`` and the rest of its batch runs.

    Attributes:
        reason: Why it does not decode, e.g. ``not JSON: Expecting value: line 1 column 1
            (char 0)``.
        preview: The first 200 characters of the stored text.
    """

    reason: str
    preview: str


@dataclass(frozen=True)
class JobInfo:
    """A job as ``get`` sees it, live or historical.

    ``result`` is set for completed jobs; ``error`` holds the last failure (or the bury,
    cancel or discard reason). ``finished_at`` is set once the job is in history;
    ``available_at`` (when it is or was due) while it is live.

    Counters, kept in history too: ``reserves`` (times it was leased), ``timeouts``
    (leases that ran out and were reclaimed), ``releases`` (times it was given back),
    ``buries`` (times it went dead), ``kicks`` (times it was brought back from dead by
    ``kick`` or ``retry``), ``snoozes`` (times it was put back by ``RetryAfter`` without
    using an attempt, since it was enqueued or last kicked: see ``Job.snoozes``).
    ``failed_at`` is the time of its last failed attempt (a
    ``nack`` or a lease that ran out), ``updated_at`` the time of its last state change.
    ``lease`` is the job's own lease length in seconds, when it was enqueued with one.
    ``headers`` is the string map enqueued with the job (see ``Job.headers``), or None;
    ``tags`` its tags (see ``Job.tags``), ``()`` when none, kept in history as headers are.
    A stored ``payload``, ``result``, ``headers`` or ``error_detail`` that does not
    decode (written by SQL or an older version) is an ``Undecodable`` instead.
    ``error_detail`` is the last failure as a JSON object: what ``nack`` was given (a
    dict kept as given; an exception as ``{"type", "message", "traceback"}``; a string
    as ``{"message"}``), ``{"message": error}`` for errors stored without one (bury,
    cancel and reclaim reasons, rows written before migration), None when ``error`` is
    None. A discard with a reason stores ``{"message": reason, "previous": <the last
    error's detail>}``: the reason beside the last real error (``"previous"`` only when
    there was one).

    ``error_line`` is the error as people read it, one line: ``ValueError: card
    declined`` rather than a traceback's first line (``leaseq._core.error_line``); None
    when ``error`` is None. ``leaseq jobs`` and the dashboard's lists show it.
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
    reserves: int = 0
    timeouts: int = 0
    releases: int = 0
    buries: int = 0
    kicks: int = 0
    failed_at: datetime | None = None
    updated_at: datetime | None = None
    lease: float | None = None
    headers: dict[str, str] | Undecodable | None = None
    error_detail: dict[str, Any] | Undecodable | None = None
    tags: tuple[str, ...] = ()
    snoozes: int = 0
    error_line: str | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A field, not a property, so that every JSON view of a JobInfo (leaseq jobs
        # --json, the dashboard's API) carries the line as well.
        object.__setattr__(self, "error_line", error_line(self.error, self.error_detail))


def error_detail(error: str | None, detail: Any) -> dict[str, Any] | Undecodable | None:
    """``JobInfo.error_detail`` from the stored text and detail (a decoded JSON object,
    an ``Undecodable``, or None when none was stored)."""
    if isinstance(detail, (dict, Undecodable)):
        return detail
    return None if error is None else {"message": error}


@dataclass(frozen=True)
class QueueStats:
    """Counts for one queue. Live: available, scheduled, running, dead. History:
    completed, cancelled, discarded. ``failed`` is the number of jobs that left the
    queue without completing because they gave up (discarded). ``paused`` is True while
    workers skip the queue: paused until ``resume``, or until ``paused_until`` (database
    clock, UTC), which is set only while a timed pause (``pause(queue, until=...)``, or a
    handler's ``RetryAfter(..., scope="queue")``) is in force."""

    queue: str
    available: int = 0
    scheduled: int = 0
    running: int = 0
    dead: int = 0
    completed: int = 0
    cancelled: int = 0
    discarded: int = 0
    paused: bool = False
    paused_until: datetime | None = None
    # Grows by itself while a job waits, so two reads of an unchanged queue still compare
    # equal.
    oldest_available_age: float | None = field(default=None, compare=False)

    @property
    def failed(self) -> int:
        """Jobs that ended without completing after giving up (discarded)."""
        return self.discarded

    def as_dict(self) -> dict[str, int | str | bool | float | None]:
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
            "paused_until": None if self.paused_until is None else self.paused_until.isoformat(),
            "oldest_available_age": self.oldest_available_age,
        }


QUEUE_SETTINGS: tuple[str, ...] = (
    "max_attempts", "base_backoff", "max_backoff", "jitter", "default_lease", "max_lease",
    "max_jobs", "max_touches", "max_touch_duration", "min_touch_interval", "dead_retention",
    "concurrency_limit", "rate_per_sec", "rate_burst", "max_snoozes",
)
"""The fields of ``QueueConfig`` besides ``queue``, in storage order."""


@dataclass(frozen=True)
class ServerConfig:
    """Settings of the whole database (this table prefix), stored there so every client
    and worker shares them (``Queue.configure_server``). A field left None takes its
    default.

    Attributes:
        max_queues: Most queues: an enqueue into a queue that is not counted yet, when
            that many are, raises ``TooManyQueues`` and writes nothing. A queue counts
            once a job was enqueued into it or it has stored settings (pause included);
            ``configure_server`` counts them again from what the database holds.
            Default: none.
        queues: How many queues count now, while ``max_queues`` is set (None without
            a cap: nothing is counted then).
    """

    max_queues: int | None = None
    queues: int | None = None


@dataclass(frozen=True)
class QueueConfig:
    """A queue's settings, stored in the database so every client and worker shares them
    (``Queue.configure_queue``). A field left None takes its default.

    Attributes:
        queue: The queue's name.
        max_attempts: Attempts for jobs enqueued without ``max_attempts``. Default: the
            client's ``Settings.max_attempts`` (5).
        base_backoff: Retry delay after the first failure, seconds, for ``nack`` without
            an explicit ``delay``/``backoff``. Default: the client's ``Settings.backoff``.
        max_backoff: Cap of the retry delay, seconds. Default: as ``base_backoff``.
        jitter: Relative spread of retry delays, 0 <= jitter < 1. Default: likewise.
        default_lease: Lease of jobs dequeued without ``lease`` that were enqueued
            without one. Default: the client's ``Settings.lease`` (30 s).
        max_lease: Cap on every lease and heartbeat extension in this queue. Default: none.
        max_jobs: Most live jobs (waiting, running or dead); an enqueue beyond it raises
            ``QueueFull`` and writes nothing. Default: none.
        max_touches: Most heartbeats that extend one lease; one more raises
            ``TouchLimitExceeded``. Default: none.
        max_touch_duration: Seconds after a lease began past which a heartbeat raises
            ``TouchLimitExceeded``. Default: none.
        min_touch_interval: A heartbeat sooner than this after the previous extension
            succeeds without writing. Default: 0.
        dead_retention: Seconds a dead job is kept before ``reclaim`` discards it to
            history. Default: kept until someone acts.
        concurrency_limit: Most jobs of this queue running at once, over every worker on
            every host; enforced by each claim. Default: no limit.
        rate_per_sec: Most job starts per second, over every worker: a token bucket kept
            in the database and refilled by its clock; enforced by each claim. Default: no
            limit.
        rate_burst: Size of that bucket: starts allowed at once after a quiet spell.
            Default: 1. No effect without ``rate_per_sec``.
        max_snoozes: Most times a job may be put back by ``RetryAfter`` (``snoozes``);
            the snooze after that sends it dead ("snoozed N times"). 0: never snooze.
            Default: no limit.
    """

    queue: str
    max_attempts: int | None = None
    base_backoff: float | None = None
    max_backoff: float | None = None
    jitter: float | None = None
    default_lease: float | None = None
    max_lease: float | None = None
    max_jobs: int | None = None
    max_touches: int | None = None
    max_touch_duration: float | None = None
    min_touch_interval: float | None = None
    dead_retention: float | None = None
    concurrency_limit: int | None = None
    rate_per_sec: float | None = None
    rate_burst: int | None = None
    max_snoozes: int | None = None

    @property
    def limited(self) -> bool:
        """True when a claim of this queue must respect a concurrency or rate limit."""
        return self.concurrency_limit is not None or self.rate_per_sec is not None

    def as_dict(self) -> dict[str, str | int | float | None]:
        """The settings as a plain dict (for JSON output)."""
        return {"queue": self.queue, **{name: getattr(self, name) for name in QUEUE_SETTINGS}}


@dataclass(frozen=True)
class ServerStats:
    """Totals over every queue (``Queue.server_stats``).

    Attributes:
        queues: How many queues have jobs, history or settings.
        available, scheduled, running, dead: Live jobs by state.
        completed, cancelled, discarded: History rows by state.
        oldest_available_age: Seconds the longest-waiting due job of any queue has been
            due; None when none is due.
        backend: memory, sqlite, postgres, mysql or redis.
        server_version: The database server's version.
        oldest_transaction_age: Seconds the oldest transaction open on the server has been
            open (``Queue.oldest_transaction_age``); None on SQLite, Redis and memory, or
            when the server would not say.
    """

    queues: int
    available: int
    scheduled: int
    running: int
    dead: int
    completed: int
    cancelled: int
    discarded: int
    oldest_available_age: float | None
    backend: str
    server_version: str
    oldest_transaction_age: float | None = None

    def as_dict(self) -> dict[str, str | int | float | None]:
        """The totals as a plain dict (for JSON output)."""
        return dict(self.__dict__)
