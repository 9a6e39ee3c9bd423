"""leaseq: a durable job queue in the database you already run.

The public API is exactly the names in ``__all__``.
"""

from leaseq._client import AsyncQueue, Queue, connect, connect_async
from leaseq._core.backoff import Backoff
from leaseq._core.job import EnqueueResult, Job, JobInfo, JobState, QueueStats
from leaseq._core.settings import Settings
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    InvalidArgument,
    InvalidQueueName,
    JobCancelled,
    JobNotFound,
    JobStateError,
    LeaseLost,
    LeaseqError,
    PayloadNotSerializable,
    PayloadTooLarge,
    SchemaMissing,
    ValidationError,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncQueue",
    "AuthenticationFailed",
    "BackendError",
    "BackendUnavailable",
    "Backoff",
    "ConfigurationError",
    "EnqueueResult",
    "InvalidArgument",
    "InvalidQueueName",
    "Job",
    "JobCancelled",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "JobStateError",
    "LeaseLost",
    "LeaseqError",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Queue",
    "QueueStats",
    "SchemaMissing",
    "Settings",
    "ValidationError",
    "connect",
    "connect_async",
]
