"""leaseq: a durable job queue in the database you already run.

The public API is exactly the names in ``__all__``.
"""

import importlib
import typing

from leaseq._aclient import AsyncQueue
from leaseq._client import Queue, connect, connect_async
from leaseq._core import version as _version
from leaseq._core.backoff import Backoff
from leaseq._core.flow import FlowState
from leaseq._core.job import (
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueConfig,
    QueueStats,
    ServerConfig,
    ServerStats,
    Undecodable,
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
    NotReplicated,
    OutcomeUnknown,
    PayloadNotSerializable,
    PayloadTooLarge,
    QueueFull,
    ResultNotReady,
    SchemaMissing,
    TooManyQueues,
    TouchLimitExceeded,
    ValidationError,
)
from leaseq.outcomes import Bury, Discard, Retry, RetryAfter
from leaseq.tasks import App, BoundTask, Signature, Task
from leaseq.worker import JobContext, Worker, current_job

if typing.TYPE_CHECKING:
    from leaseq.flows import Chain, FlowResult, Group, chain, group
    from leaseq.schedules import Schedule

# Imported on first use: a worker that runs no workflow and no schedule starts without
# them (and without cronsim and zoneinfo), which is ~10 ms of every start (docs/design.md).
_LAZY = {
    "Chain": "leaseq.flows", "FlowResult": "leaseq.flows", "Group": "leaseq.flows",
    "chain": "leaseq.flows", "group": "leaseq.flows",
    "Schedule": "leaseq.schedules",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'leaseq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__version__ = _version.VERSION

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
    "NotReplicated",
    "OutcomeUnknown",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Queue",
    "QueueConfig",
    "QueueFull",
    "QueueStats",
    "ResultNotReady",
    "Retry",
    "RetryAfter",
    "Schedule",
    "SchemaMissing",
    "ServerConfig",
    "ServerStats",
    "Settings",
    "Signature",
    "Task",
    "TooManyQueues",
    "TouchLimitExceeded",
    "Undecodable",
    "ValidationError",
    "Worker",
    "chain",
    "connect",
    "connect_async",
    "current_job",
    "group",
]
