"""The worker process: fetch, run, heartbeat, reclaim, prune, shut down gracefully."""

from leaseq.worker.context import JobContext, current_job
from leaseq.worker.worker import Worker

__all__ = ["JobContext", "Worker", "current_job"]
