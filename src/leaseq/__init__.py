"""leaseq: a durable job queue in the database you already run.

The public API is exactly the names in ``__all__``.
"""

from leaseq._client import AsyncQueue, Queue, connect, connect_async
from leaseq._core.backoff import Backoff
from leaseq._core.flow import FlowState
from leaseq._core.job import (
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueConfig,
    QueueStats,
    ServerStats,
)
from leaseq._core.settings import Settings
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ClientClosed,
    ConfigurationError,
    InvalidArgument,
    InvalidQueueName,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobStateError,
    LeaseLost,
    LeaseqError,
    PayloadNotSerializable,
    PayloadTooLarge,
    QueueFull,
    ResultNotReady,
    SchemaMissing,
    TouchLimitExceeded,
    ValidationError,
)
from leaseq.flows import Chain, FlowResult, Group, Signature, chain, group
from leaseq.outcomes import Bury, Discard, Retry
from leaseq.schedules import Schedule
from leaseq.tasks import App, BoundTask, Task
from leaseq.worker import JobContext, Worker, current_job

__version__ = "0.1.0"

__all__ = [
    "App",
    "AsyncQueue",
    "AuthenticationFailed",
    "BackendError",
    "BackendUnavailable",
    "Backoff",
    "BoundTask",
    "Bury",
    "Chain",
    "ClientClosed",
    "ConfigurationError",
    "Discard",
    "EnqueueResult",
    "FlowResult",
    "FlowState",
    "Group",
    "InvalidArgument",
    "InvalidQueueName",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "JobStateError",
    "LeaseLost",
    "LeaseqError",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Queue",
    "QueueConfig",
    "QueueFull",
    "QueueStats",
    "ResultNotReady",
    "Retry",
    "Schedule",
    "SchemaMissing",
    "ServerStats",
    "Settings",
    "Signature",
    "Task",
    "TouchLimitExceeded",
    "ValidationError",
    "Worker",
    "chain",
    "connect",
    "connect_async",
    "current_job",
    "group",
]
