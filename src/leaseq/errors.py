"""Every error leaseq raises, in one tree.

::

    LeaseqError
    ├── ValidationError (also ValueError)      bad input; nothing was written
    │   ├── InvalidQueueName
    │   ├── InvalidArgument
    │   ├── PayloadNotSerializable
    │   └── PayloadTooLarge
    ├── ConfigurationError                     bad URL, missing driver extra, bad settings
    ├── JobNotFound (also LookupError)         no live or historical job has this id
    ├── JobStateError                          the job exists but not in a state that allows it
    ├── LeaseLost                              the lease token is stale: another holder or no holder
    ├── JobCancelled                           the job was cancelled while the caller held it
    ├── TouchLimitExceeded                     a heartbeat beyond the queue's touch limits
    ├── QueueFull                              the queue holds ``max_jobs`` live jobs already
    ├── JobFailed                              the awaited job went dead, discarded or cancelled
    ├── ResultNotReady                         ``result()`` of a job that has not finished yet
    └── BackendError                           the database misbehaved
        ├── BackendUnavailable                 cannot connect, or the connection dropped
        │   ├── AuthenticationFailed           wrong user or password
        │   └── OutcomeUnknown                 a write's reply was lost: it may have committed
        ├── NotReplicated                      written on the Redis primary, too few replicas
        │                                      confirmed it in time (``wait_replicas``)
        ├── SchemaMissing                      tables absent: run ``leaseq migrate``
        └── ClientClosed                       the client was closed

Driver exceptions never leave leaseq: each backend translates them into this tree where
they arise, keeping the original as ``__cause__``.
"""

from __future__ import annotations

from typing import Any

from leaseq._core.error_line import error_line


class LeaseqError(Exception):
    """Base class of every error leaseq raises."""


class ValidationError(LeaseqError, ValueError):
    """An argument was rejected before anything was written."""


class InvalidQueueName(ValidationError):
    """Queue names are 1-200 characters of ``A-Z a-z 0-9 _ . -``."""


class InvalidArgument(ValidationError):
    """An argument is out of range or of the wrong type."""


class PayloadNotSerializable(ValidationError):
    """The payload (or result) is not plain JSON: dicts with string keys, lists, strings,
    finite numbers, booleans and None; for a task's annotated arguments and result, also
    the types leaseq converts (docs/typed-payloads.md)."""


class PayloadTooLarge(ValidationError):
    """The encoded payload (or result) is larger than the configured cap."""


class ConfigurationError(LeaseqError):
    """The URL, settings or installed extras do not allow leaseq to start."""


class JobNotFound(LeaseqError, LookupError):
    """No live or historical job has this id."""


class JobStateError(LeaseqError):
    """The job exists but its state does not allow the operation."""


class LeaseLost(LeaseqError):
    """The lease token is stale: the lease expired and was reclaimed, or the job was
    re-delivered, finished or removed. Nothing was changed. (A repeat of the ``ack``,
    ``nack``, ``release`` or ``bury`` that ended the lease is not stale: it returns what
    that call returned, while that lease is the job's last ended one.)"""

    @classmethod
    def stale(cls, job_id: int, token: int) -> LeaseLost:
        """The error for ``token`` on job ``job_id``, worded the same by every backend."""
        return cls(f"lease {token} on job {job_id} is no longer valid: the job was "
                   "reclaimed, re-delivered or finished; nothing was changed")


class JobCancelled(LeaseqError):
    """The job was cancelled while it was running; the holder should stop and give it up
    (``release`` or ``nack`` records it as cancelled)."""


class TouchLimitExceeded(LeaseqError):
    """A heartbeat was refused by the queue's touch limits (``max_touches`` or
    ``max_touch_duration``): the lease was not extended and will run out. Treat the job
    as lost once it does."""


class QueueFull(LeaseqError):
    """The queue already holds its ``max_jobs`` live jobs; nothing was written."""


class TooManyQueues(LeaseqError):
    """The enqueue would create a queue beyond the server's ``max_queues``
    (``Queue.configure_server``); nothing was written."""


class JobFailed(LeaseqError):
    """The job a caller waits on (``Queue.wait``, ``EnqueueResult.wait``) or reads the
    result of (``Queue.result``) will not complete: it went dead, or was discarded or
    cancelled. A dead job may still be kicked or retried, and a new wait then waits again.

    Its text is one line, ``job 7 is dead: ValueError: card declined``
    (``JobInfo.error_line``); the traceback stays in ``error`` and ``error_detail``.

    Attributes:
        job_id: The job's id.
        state: ``"dead"``, ``"discarded"`` or ``"cancelled"``.
        error: The job's last error in full (a failure's traceback), or the bury, discard
            or cancel reason (None when none was given): ``JobInfo.error``.
        error_detail: The error as a JSON object (``JobInfo.error_detail``): a failure's
            ``{"type", "message", "traceback"}``, a discard's ``{"message",
            "previous"}``, ...; a ``leaseq.Undecodable`` when the stored detail does not
            decode; None when none was stored.
    """

    def __init__(self, job_id: int, state: str, error: str | None = None,
                 error_detail: Any = None) -> None:
        self.job_id = job_id
        self.state = state
        self.error = error
        self.error_detail = error_detail
        line = error_line(error, error_detail)
        why = f": {line}" if line else " (no error recorded)"
        super().__init__(f"job {job_id} is {state}{why}")

    def __reduce__(self) -> tuple[type[JobFailed], tuple[int, str, str | None, Any]]:
        # Pickled by its fields, so it crosses process boundaries (multiprocessing, a
        # pool's futures) intact; the default would call __init__ with the message alone.
        return type(self), (self.job_id, self.state, self.error, self.error_detail)


class ResultNotReady(LeaseqError):
    """``Queue.result`` of a job that has not finished: it is still scheduled, available
    or running. ``Queue.wait`` waits for it instead.

    Attributes:
        job_id: The job's id.
        state: Its state now: ``"scheduled"``, ``"available"`` or ``"running"``.
    """

    def __init__(self, job_id: int, state: str) -> None:
        self.job_id = job_id
        self.state = state
        super().__init__(f"job {job_id} has no result yet: it is {state}")

    def __reduce__(self) -> tuple[type[ResultNotReady], tuple[int, str]]:
        return type(self), (self.job_id, self.state)


class BackendError(LeaseqError):
    """The storage backend failed."""


class BackendUnavailable(BackendError):
    """The database cannot be reached, the connection was lost, or the server refuses
    writes for now (a PostgreSQL standby or a primary being failed over).

    A write whose connection dropped after it was sent may have committed; its outcome
    is unknown, and the message says so. leaseq repeats what is safe to repeat (acks,
    heartbeats, claims) by itself; repeat an enqueue only with a ``unique_key``
    (docs/reliability.md)."""


class AuthenticationFailed(BackendUnavailable):
    """The database refused the credentials in the URL."""


class OutcomeUnknown(BackendUnavailable):
    """A write was sent and its connection dropped before the reply came: it may or may
    not have committed. ``operation`` names the public method (``"enqueue"``, ``"ack"``,
    ``"nack"``, ...); docs/reliability.md says for each whether repeating it is safe.
    leaseq repeats the safe ones itself before raising this; an enqueue is safe to repeat
    only with a ``unique_key`` (the repeat returns the job the first call made).

    Attributes:
        operation: The public method whose outcome is unknown; empty when the write was
            not made through one.
    """

    def __init__(self, message: str, operation: str = "") -> None:
        super().__init__(message)
        self.operation = operation

    def __reduce__(self) -> tuple[type[OutcomeUnknown], tuple[str, str]]:
        return type(self), (str(self), self.operation)


class SchemaMissing(BackendError):
    """leaseq's tables do not exist yet: run ``leaseq migrate`` or ``Queue.migrate()``."""


class ClientClosed(BackendError):
    """The ``Queue`` or ``AsyncQueue`` was closed; create a new one."""


class NotReplicated(BackendError):
    """The write WAS made on the Redis primary, but fewer replicas than the URL's
    ``wait_replicas`` (or, with ``wait_aof=1``, not the primary's own disk) confirmed it
    within ``wait_timeout`` ms: a failover before they catch up may lose it.

    What to do depends on the call (docs/redis.md, "Replicated writes"): an enqueue with a
    ``unique_key`` can be retried safely (it returns the same job); an ack can be retried
    (a repeated ack under the same lease is a no-op that succeeds); a plain enqueue
    retried may leave two jobs. The worker logs it and carries on with what the primary
    answered.

    Attributes:
        acknowledged: How many replicas confirmed the write in time.
        wanted: How many ``wait_replicas`` asked for.
        fsynced: With ``wait_aof=1``, whether the primary fsynced it to its append-only
            file in time (``None`` without ``wait_aof``).
        result: What the call returned on the primary: for ``dequeue`` the leased jobs,
            for an enqueue a list with one ``EnqueueResult`` per job (ids, ``created``).
    """

    def __init__(self, message: str, acknowledged: int, wanted: int,
                 fsynced: bool | None = None, result: object = None) -> None:
        self.acknowledged = acknowledged
        self.wanted = wanted
        self.fsynced = fsynced
        self.result = result
        super().__init__(message)

    def __reduce__(self) -> tuple[type[NotReplicated],
                                  tuple[str, int, int, bool | None, object]]:
        return type(self), (str(self), self.acknowledged, self.wanted, self.fsynced,
                            self.result)
