"""The backend contract: what happens to a job, not how a database is spoken to.

Every backend (memory, SQLite, PostgreSQL, MySQL, Redis) implements ``Backend``; the async
twin ``AsyncBackend`` has the same methods, awaited. Arguments arrive validated and
encoded (the clients do that once for every backend), so a backend only carries out the
state change each method's docstring names. ``tests/conformance`` holds every backend to
this contract.

Fenced methods take ``(job_id, token)`` and raise ``LeaseLost`` without changing anything
when the job is not ``running`` under that token, with two exceptions that change nothing
either: a ``complete`` by the lease that completed the job succeeds, and a ``fail``,
``release`` or ``bury`` by the lease that the same method ended returns what it returned
then, while that lease is the job's last ended one (``_core/ended.py``; each backend keeps
that lease's token and how it ended with the job, and a claim leaves them alone).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from leaseq._core.flow import FlowKind, FlowLink, FlowState
from leaseq._core.job import (
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueConfig,
    QueueStats,
    ServerConfig,
)
from leaseq.errors import TouchLimitExceeded

PeekState = Literal["available", "scheduled", "dead"]
RenewOutcome = tuple[datetime, bool] | None | TouchLimitExceeded
"""Per job of ``renew_many``: ``(lease_until, cancel_requested)`` while held, None for a
stale lease, a ``TouchLimitExceeded`` (returned, not raised) when a touch limit refused
the extension."""
FailItem = tuple[int, int, str | None, float, str | None]
"""``(job_id, token, error, delay, detail)`` of ``fail_many``."""
StepItem = tuple[int, int, str | None, FlowLink]
"""``(job_id, token, result, link)`` of ``complete_steps``: a job of a chain or group."""
SnoozeScope = Literal["job", "queue"]
"""What a ``snooze`` holds back besides the job. ``"partition"`` joins it with partitions
(``leaseq.outcomes.RetryAfter`` refuses it until then)."""
PauseEnd = datetime | float | None
"""When a pause (``set_paused``) ends by itself: an aware datetime, seconds from now by
the database's clock, or None: only ``resume`` ends it."""


@dataclass(frozen=True, slots=True)
class NewJob:
    """One validated enqueue request. ``payload`` is already JSON text, and so are
    ``headers`` (a JSON object of strings, or None for none), stored and returned as they
    are.

    ``lease`` is the job's own lease (stored; see ``Backend.claim``). ``unique_for`` (only
    with ``unique_key``): when no live twin exists but a job of the same ``(queue,
    unique_key)`` finished (any terminal state) less than ``unique_for`` seconds ago by the
    database clock, the newest such job's id is returned with ``created=False`` and
    nothing is written."""

    queue: str
    payload: str
    kind: str | None = None
    priority: int = 0
    delay: float = 0.0
    run_at: datetime | None = None
    unique_key: str | None = None
    max_attempts: int = 5
    lease: float | None = None
    unique_for: float | None = None
    headers: str | None = None
    unique_global: bool = False
    """``unique_scope="global"``: ``unique_key`` is unique among the live jobs enqueued
    so in every queue (and, as any key, in its own queue); ``unique_for`` then looks
    for finished jobs of the key in every queue."""
    tags: str | None = None
    """The job's tags as a compact JSON array of strings (``validate.tags``), or None for
    none: stored as they are, kept in history, returned as ``Job.tags``/``JobInfo.tags``."""


@dataclass(frozen=True, slots=True)
class FlowStep:
    """A job that waits for a result: ``job.payload`` is the JSON object of its other
    arguments, and the result fills parameter ``first`` when the job is enqueued."""

    job: NewJob
    first: str


@dataclass(frozen=True, slots=True)
class NewFlow:
    """A chain or group to store (``Backend.start_flow``).

    ``size`` is the number of steps (chain) or members (group). A chain's ``steps`` are
    its steps after the first, in order (the first is enqueued at once); a group has no
    ``steps`` and its ``then`` is the callback enqueued with the members' results, or
    None (then nothing is enqueued when the group completes)."""

    flow_id: str
    kind: FlowKind
    size: int
    steps: Sequence[FlowStep] = ()
    then: FlowStep | None = None

    def queues(self, jobs: Sequence[NewJob]) -> list[str]:
        """Every queue the flow will enqueue into, sorted: its first ``jobs``', its later
        steps' and its callback's (``start_flow`` counts them all against
        ``max_queues``)."""
        names = {job.queue for job in jobs} | {step.job.queue for step in self.steps}
        if self.then is not None:
            names.add(self.then.job.queue)
        return sorted(names)


class Backend(Protocol):
    """The synchronous backend contract."""

    name: str
    supports_transactions: bool

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; idempotent and safe to race. Returns the
        migrations this call applied (``0001_init``, ...): [] when the schema was up to
        date, or where there is none to create (Redis, memory)."""

    def due_now(self, queues: Sequence[str]) -> bool:
        """Whether a queue of ``queues`` that is not paused (indefinitely, or until a time
        still to come by the database's clock) holds a job due now (available,
        its time come), whether or not its rate or concurrency limit lets it start yet:
        what keeps ``leaseq worker --burst`` running. Reads only."""

    def schema_versions(self) -> tuple[int, int] | None:
        """``(recorded, needed)``: the newest migration applied to the tables and the
        newest this leaseq ships; None for a backend without migrations (Redis, memory).
        ``SchemaMissing`` when the tables were never created. Reads only; a worker checks
        it at start (recorded older than needed: run ``leaseq migrate``)."""

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = (),
        fresh: Collection[str] = (),
    ) -> list[EnqueueResult]:
        """nothing → available or scheduled; a live ``(queue, unique_key)`` twin (or,
        with ``unique_for``, a recently finished one) returns its id with
        ``created=False``. One transaction (the caller's, with ``conn``). A job's
        ``headers`` stay with it for good: ``claim`` returns them decoded
        (``Job.headers``), as do ``get``, ``list_jobs`` and ``peek`` (``JobInfo.headers``),
        through retries and in history.

        ``capped`` names the queues the client believes have ``max_jobs`` set: for each,
        the backend serialises enqueuers of that queue (locks its settings row), reads the
        stored ``max_jobs`` afresh, and raises ``QueueFull`` with nothing written when the
        queue's live jobs (available, scheduled, running, dead) would exceed it. Other
        queues pay nothing for the feature (backends where the check is free may check
        every queue).

        ``fresh`` names the batch's queues the client has not seen counted while the
        server's ``max_queues`` is set (``configure_server``): the backend serialises
        such enqueuers, reads ``max_queues`` afresh, and raises ``TooManyQueues`` with
        nothing written when a queue not counted yet would make more than
        ``max_queues``; else it counts the new queues. Queues a client has seen counted
        pay nothing (backends where the check is free may check every call)."""

    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease: float | None,
        limit: int,
        default_lease: float = 30.0,
        limited: Collection[str] = (),
    ) -> list[Job]:
        """available → running for up to ``limit`` due jobs of queues that are not
        paused, by priority desc, available_at, id; attempts + 1, reserves + 1; a fresh
        lease token each; the touch count restarts and ``leased_at`` (start of this lease)
        is now.

        Each job's lease is ``lease`` when given, else the job's own lease, else its
        queue's ``default_lease``, else ``default_lease``; always capped by the queue's
        ``max_lease``. ``Job.lease`` reports the lease applied.

        Flow control: a queue with ``concurrency_limit`` never has more jobs running than
        that after a claim, and one with ``rate_per_sec`` starts jobs only while its token
        bucket (``_core.limits``) holds tokens, one spent per job, refilled by the
        database's clock. Racing claimers on any number of hosts never exceed either.
        ``limited`` names the queues the client believes have a limit; the backend claims
        from those under their limits (serialising their claimers). A queue with a stored
        limit that is not named is not claimed from at all, so a stale belief delays its
        jobs (until the client re-reads settings) but never breaks a limit; queues without
        limits pay nothing. Backends for which the check is free may ignore ``limited``.

        Payloads and headers are decoded job by job and never raise (``validate.claimed``):
        a job whose stored payload or headers do not decode is leased and returned like
        the others with a ``leaseq.Undecodable`` payload naming what failed; the client
        buries it (``bury`` with an ``Undecodable`` detail) and hands out the rest, so no
        stored value can undo a claim or stop a queue (design §52)."""

    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds, by the database's clock, until a job of ``queues`` may next become
        claimable without anything else happening: per queue that is not paused, the time
        until its earliest available job is due, and for a queue with ``rate_per_sec`` the
        later of that and its bucket's next token (``_core.limits.next_start``); for a
        queue paused until a time to come, the later of that and the pause's end
        (``_core.limits.after_pause``). 0 when a
        job could be claimed now; None when nothing tells (no jobs waiting, or due jobs
        held back by ``concurrency_limit``). Changes nothing. Workers sleep this long when
        idle, instead of polling."""

    def renew(self, job_id: int, token: int, extend: float) -> datetime:
        """running → running with ``lease_until = now + min(extend, max_lease)``.

        Touch limits of the job's queue: when ``max_touches`` extensions of this lease
        were made already, or the lease began more than ``max_touch_duration`` ago,
        raises ``TouchLimitExceeded`` and changes nothing; when the previous extension (or
        the lease's start) is less than ``min_touch_interval`` ago, returns the current
        ``lease_until`` without writing (not counted as a touch). Raises ``JobCancelled``
        (after extending) when a cancel was requested."""

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> None:
        """running → completed: history row written, live row removed."""

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> list[bool]:
        """``complete`` for each ``(id, token, result)`` in one transaction: True per job
        completed, False (nothing changed) per stale lease."""

    def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], capped: Collection[str] = (),
        conn: Any = None, fresh: Collection[str] = (),
    ) -> list[EnqueueResult]:
        """nothing → a stored flow and its first jobs (a chain's first step, or a group's
        members, each with a ``leaseq-flow`` header naming ``flow``; ``capped`` as for
        ``enqueue``: a full queue refuses the whole flow), in one transaction (the
        caller's, with ``conn``). ``fresh`` as for ``enqueue``, but over every queue of
        the flow (``NewFlow.queues``): the later steps' and the callback's are counted
        against ``max_queues`` at the start too, before anything is written, so a flow
        admitted never meets ``TooManyQueues`` halfway; ``TooManyQueues`` refuses it whole
        (on Redis the flow is written first: a crash in between leaves a flow no job
        names, which nothing reads). A chain's flow records the first step's id."""

    def complete_steps(self, items: Sequence[StepItem]) -> list[bool]:
        """``complete`` of each ``(id, token, result, link)``, a job of a chain or group,
        and in the same transaction (one script per job on Redis) what follows from it: a
        chain's next step is enqueued with ``result`` spliced in as its first argument
        (the flow records its id); a group member's result is stored, and the member that
        completes the group enqueues the callback with every member's result in member
        order. Per job True when completed (now, or before by this lease: then nothing
        more happens), False (nothing changed) for a stale lease. So a step's follow-up
        exists exactly when the step is completed."""

    def get_flow(self, flow_id: str) -> FlowState | None:
        """The flow as stored, or None when no flow has that id."""

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> list[RenewOutcome]:
        """``renew`` for each ``(id, token, extend)``, touch limits included, in one
        transaction: see ``RenewOutcome``."""

    def fail(
        self, job_id: int, token: int, error: str | None, delay: float,
        detail: str | None = None,
    ) -> JobState:
        """running → available/scheduled after ``delay``; → dead when attempts are used
        up (buries + 1); → cancelled (history) when a cancel was requested. Sets
        ``failed_at``.

        ``error`` is the readable text; ``detail`` the error as a JSON object (text), or
        None when the text says it all. Both are stored when ``error`` is given (a None
        ``detail`` then clears an earlier one) and kept into history; ``get`` returns the
        detail as ``JobInfo.error_detail`` (``{"message": error}`` when none is stored).
        Every other write of an error (discard, cancel, reclaim; bury unless given one)
        stores no detail.

        Records the lease as ended by a nack with the state returned (``_core/ended.py``);
        called again by that lease while it is the job's last ended one, returns that
        state and changes nothing."""

    def fail_many(self, items: Sequence[FailItem]) -> list[JobState | None]:
        """``fail`` for each ``(id, token, error, delay, detail)`` in one transaction: the
        state after per job (for a repeat, the state its first call returned; a job listed
        twice is failed once and its second listing is a repeat), None (nothing changed)
        per stale lease."""

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None,
        error: str | None = None, detail: str | None = None,
    ) -> JobState:
        """running → available/scheduled with the attempt given back (releases + 1), at
        ``priority`` when given; → cancelled when a cancel was requested.

        A release is not a failure (``failed_at`` is left alone). ``error`` and ``detail``
        are an optional note, stored as ``fail`` stores them (the job's last error and
        ``error_detail``) when ``error`` is given; None keeps the last error as it was.
        Repeated by the lease it ended, as ``fail``: the state it returned, nothing
        changed."""

    def snooze(
        self, job_id: int, token: int, delay: float, scope: SnoozeScope = "job"
    ) -> JobState:
        """running → available/scheduled after ``delay`` with the attempt given back and
        snoozes + 1 (``RetryAfter``): not a release (``releases``, ``failed_at`` and the
        last error are left alone) and not a failure. → dead (buries + 1, error "snoozed
        N times ...") when the job's snoozes already reached its queue's ``max_snoozes``
        (read in the same transaction); → cancelled when a cancel was requested.

        ``scope="queue"``: in the same transaction (the same script on Redis), the job's
        queue is also paused until now + ``delay`` by the database's clock, whatever
        became of the job. The pause only extends: a later timed pause already in force
        stays, an indefinite one (``set_paused`` without an end) stays indefinite; a queue
        without a settings row gets one. A stale lease raises ``LeaseLost`` and changes
        neither the job nor the queue; repeated by the lease it ended, as ``fail``: the
        state it returned, nothing changed (the pause included)."""

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None,
        detail: str | None = None,
    ) -> None:
        """running → dead with ``reason`` as its error (buries + 1), at ``priority`` when
        given. ``detail`` (JSON object text), when given with ``reason``, is stored as
        ``fail`` stores it: the client buries a job it cannot decode so (see ``claim``).
        Repeated by the lease it ended, as ``fail``: nothing changed."""

    def kick(self, queue: str, limit: int) -> int:
        """dead → available (fresh attempts and snoozes, kicks + 1) for up to ``limit``
        jobs, by priority desc, then oldest (lowest id) first."""

    def retry(self, job_id: int) -> None:
        """dead or scheduled → available now (dead jobs get fresh attempts and snoozes,
        kicks + 1)."""

    def discard(self, job_id: int, reason: str | None) -> None:
        """dead, scheduled or available → discarded (history). With a reason, the error
        becomes the reason and the detail keeps the last real error beside it
        (``leaseq._core.validate.discard_record``); without one, the last error stays."""

    def cancel(self, job_id: int) -> JobState:
        """scheduled, available or dead → cancelled (history); running → flagged, so
        its holder's next heartbeat raises ``JobCancelled``. Returns the state after."""

    def get(self, job_id: int) -> JobInfo:
        """The job, live or historical; ``JobNotFound`` otherwise."""

    def stats(self) -> dict[str, QueueStats]:
        """Counts per queue, live and historical, with ``paused`` (now, either kind),
        ``paused_until`` (a timed pause still in force) and ``oldest_available_age``;
        every queue with jobs, history or a settings row."""

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int,
        kind: str | None = None, unique_key: str | None = None, tag: str | None = None,
    ) -> list[JobInfo]:
        """Live and historical jobs with id > ``after``, by id, optionally of one queue,
        one state, one ``kind``, one ``unique_key`` (exact, byte-for-byte matches) and
        one ``tag`` (among the job's tags); at most ``limit``."""

    def peek(self, queue: str, state: PeekState, limit: int) -> list[JobInfo]:
        """Up to ``limit`` jobs of ``queue``, changing nothing: ``available``, the due
        jobs in claim order (priority desc, available_at, id; pause ignored);
        ``scheduled``, the jobs not yet due by (available_at, id); ``dead``, in the order
        ``kick`` takes them (priority desc, id)."""

    def priority_counts(self, queue: str) -> dict[int, int]:
        """``{priority: n}`` of the available (due now) jobs of ``queue``, for each
        priority that has any; pause ignored, scheduled jobs not counted. Changes
        nothing."""

    def configure_queue(
        self, queue: str, changes: Mapping[str, int | float | None]
    ) -> QueueConfig:
        """Stores the given settings (names from ``QUEUE_SETTINGS``; None clears one to
        its default), leaving the others as they are; returns all of them as stored."""

    def queue_configs(self) -> dict[str, QueueConfig]:
        """The stored settings of every queue that has a settings row (configured or
        ever paused), by name."""

    def configure_server(self, changes: Mapping[str, int | None]) -> ServerConfig:
        """Stores the server settings in ``changes`` (``ServerConfig`` fields; None
        resets one); setting ``max_queues`` counts the queues afresh from the jobs, the
        history and the stored queue settings. Returns the settings as stored."""

    def server_config(self) -> ServerConfig:
        """The stored server settings, with the number of queues counted."""

    def server_version(self) -> str:
        """The database server's version, e.g. ``"16.2"``, ``"10.11.6-MariaDB"``."""

    def oldest_transaction_age(self) -> float | None:
        """Seconds the oldest transaction open on the server's database has been open (0.0
        when none is), from the server's own view (PostgreSQL ``pg_stat_activity``,
        MariaDB/MySQL ``information_schema.INNODB_TRX``); None where the backend has no
        such thing (SQLite, Redis, memory). A long one holds back vacuum or purge: every
        row deleted since it began stays, and claims wade through them. Read by metrics
        and the dashboard only, never on the hot path."""

    def set_paused(self, queue: str, paused: bool, until: PauseEnd = None) -> None:
        """Pauses (every claim skips the queue) or resumes a queue (ending either kind of
        pause). A pause with ``until`` ends by itself then, by the database's clock; it
        replaces whatever pause was in force (an operator's word is final: see
        ``snooze`` for the handler's pause, which only extends). Either gives the queue a
        settings row."""

    def paused(self) -> list[str]:
        """Names of the queues paused now: indefinitely, or until a time to come."""

    def reclaim(self, limit: int) -> int:
        """running with an expired lease → available (the attempt stays counted); → dead
        when attempts are used up; → cancelled when a cancel was requested; timeouts + 1
        and ``failed_at`` set in each case, and the lease recorded as ended by expiry (no
        earlier lease's ``fail``, ``release`` or ``bury`` is a repeat any more). Also dead
        → discarded (history, error kept) for dead jobs that went dead more than their
        queue's ``dead_retention`` ago. At most ``limit`` of each; returns how many jobs
        moved."""

    def prune(self, older_than: float) -> int:
        """Deletes history rows finished more than ``older_than`` seconds ago."""

    def close(self) -> None:
        """Closes connections."""


class AsyncBackend(Protocol):
    """The asynchronous backend contract: ``Backend``'s methods, awaited."""

    name: str
    supports_transactions: bool

    async def migrate(self) -> list[str]: ...
    async def schema_versions(self) -> tuple[int, int] | None: ...
    async def due_now(self, queues: Sequence[str]) -> bool: ...
    async def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = (),
        fresh: Collection[str] = (),
    ) -> list[EnqueueResult]: ...
    async def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease: float | None,
        limit: int,
        default_lease: float = 30.0,
        limited: Collection[str] = (),
    ) -> list[Job]: ...
    async def next_due(self, queues: Sequence[str]) -> float | None: ...
    async def renew(self, job_id: int, token: int, extend: float) -> datetime: ...
    async def complete(
        self, job_id: int, token: int, result: str | None, conn: Any = None
    ) -> None: ...
    async def complete_many(
        self, items: Sequence[tuple[int, int, str | None]]
    ) -> list[bool]: ...
    async def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], capped: Collection[str] = (),
        conn: Any = None, fresh: Collection[str] = (),
    ) -> list[EnqueueResult]: ...
    async def complete_steps(self, items: Sequence[StepItem]) -> list[bool]: ...
    async def get_flow(self, flow_id: str) -> FlowState | None: ...
    async def renew_many(self, items: Sequence[tuple[int, int, float]]) -> list[RenewOutcome]: ...
    async def fail(
        self, job_id: int, token: int, error: str | None, delay: float,
        detail: str | None = None,
    ) -> JobState: ...
    async def fail_many(self, items: Sequence[FailItem]) -> list[JobState | None]: ...
    async def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None,
        error: str | None = None, detail: str | None = None,
    ) -> JobState: ...
    async def snooze(
        self, job_id: int, token: int, delay: float, scope: SnoozeScope = "job"
    ) -> JobState: ...
    async def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None,
        detail: str | None = None,
    ) -> None: ...
    async def kick(self, queue: str, limit: int) -> int: ...
    async def retry(self, job_id: int) -> None: ...
    async def discard(self, job_id: int, reason: str | None) -> None: ...
    async def cancel(self, job_id: int) -> JobState: ...
    async def get(self, job_id: int) -> JobInfo: ...
    async def stats(self) -> dict[str, QueueStats]: ...
    async def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int,
        kind: str | None = None, unique_key: str | None = None, tag: str | None = None,
    ) -> list[JobInfo]: ...
    async def peek(self, queue: str, state: PeekState, limit: int) -> list[JobInfo]: ...
    async def priority_counts(self, queue: str) -> dict[int, int]: ...
    async def configure_queue(
        self, queue: str, changes: Mapping[str, int | float | None]
    ) -> QueueConfig: ...
    async def queue_configs(self) -> dict[str, QueueConfig]: ...
    async def configure_server(self, changes: Mapping[str, int | None]) -> ServerConfig: ...
    async def server_config(self) -> ServerConfig: ...
    async def server_version(self) -> str: ...
    async def oldest_transaction_age(self) -> float | None: ...
    async def set_paused(self, queue: str, paused: bool, until: PauseEnd = None) -> None: ...
    async def paused(self) -> list[str]: ...
    async def reclaim(self, limit: int) -> int: ...
    async def prune(self, older_than: float) -> int: ...
    async def close(self) -> None: ...
