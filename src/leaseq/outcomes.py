"""What a task may signal besides returning or failing: raise one of these.

A task's return value completes the job (stored as its result); any other exception is a
failure, retried with the job's backoff (the call's or the task's, else the queue's, else
the app's: docs/queue-settings.md) until attempts run out. Raise ``Retry`` to ask
for a specific delay, ``Bury`` to send the job to the dead state for a human, or
``Discard`` to drop it to history at once. They are exceptions, not return values, so a
helper deep inside the task can give up without threading a value back.
"""

from __future__ import annotations

from datetime import timedelta


class Retry(Exception):
    """Retry this job after ``delay`` seconds (default: the job's backoff). Counts as a
    failed attempt."""

    def __init__(self, delay: float | timedelta | None = None, reason: str | None = None):
        self.delay = delay.total_seconds() if isinstance(delay, timedelta) else delay
        self.reason = reason
        super().__init__(reason or f"retry requested (delay={self.delay})")


class Bury(Exception):
    """Give up now: the job goes dead with ``reason``, kept for a human to kick or
    discard."""

    def __init__(self, reason: str = "buried by the task"):
        self.reason = reason
        super().__init__(reason)


class Discard(Exception):
    """Give up now and drop the job to history as discarded, with ``reason``."""

    def __init__(self, reason: str = "discarded by the task"):
        self.reason = reason
        super().__init__(reason)
