"""What a task may signal besides returning or failing: raise one of these.

A task's return value completes the job (stored as its result); any other exception is a
failure, retried with the job's backoff (the call's or the task's, else the queue's, else
the app's: docs/queue-settings.md) until attempts run out. Raise ``Retry`` to ask
for a specific delay, ``RetryAfter`` to put the job back without using an attempt (the
upstream said "not now"; optionally holding the whole queue), ``Bury`` to send the job to
the dead state for a human, or ``Discard`` to drop it to history at once. They are
exceptions, not return values, so a helper deep inside the task can give up without
threading a value back.

=============  ===================  ===================================================
raise          uses an attempt      counts
=============  ===================  ===================================================
``Retry``      yes (a failure)      ``attempts``; dead when they are used up
``RetryAfter`` no (given back)      ``snoozes``; dead past the queue's ``max_snoozes``
=============  ===================  ===================================================
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Literal

from leaseq.errors import InvalidArgument

SnoozeScope = Literal["job", "partition", "queue"]
"""What a ``RetryAfter`` holds back besides the job: nothing more, the job's partition,
or its whole queue."""
SNOOZE_SCOPES: tuple[SnoozeScope, ...] = ("job", "partition", "queue")
MAX_SNOOZE = 10 * 365 * 86400.0
"""The longest ``RetryAfter``, in seconds (ten years, as every duration leaseq takes)."""


class Retry(Exception):
    """Retry this job after ``delay`` seconds (default: the job's backoff). Counts as a
    failed attempt: a job whose attempts are used up goes dead instead. To wait without
    using an attempt (the upstream asked you to come back later), raise ``RetryAfter``."""

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


class RetryAfter(Exception):
    """Put this job back for ``seconds`` (or a ``timedelta``) **without using an
    attempt**: unlike ``Retry``, which counts a failed attempt, a ``RetryAfter`` gives
    the attempt back, so a job with ``max_attempts=1`` may snooze any number of times.
    Each one counts in the job's ``snoozes`` (``Job.snoozes``, ``JobInfo.snoozes``), not
    in ``releases``; past the queue's ``max_snoozes`` setting the job goes dead instead.

    ``scope`` says what else waits:

    - ``"job"`` (default): only this job, due again ``seconds`` from now.
    - ``"queue"``: also the job's whole queue, paused until then by the database's
      clock: no job of it starts on any worker; enqueues still work. The pause only
      extends one already in force (it never shortens a timed pause nor lifts an
      operator's indefinite ``pause``); ``resume`` ends it.
    - ``"partition"``: reserved for partitions (issue 33), which this leaseq does not
      have yet: raising it is an ``InvalidArgument`` at once, so the handler fails that
      attempt as for any other exception, with an error that says why.

    Raises:
        InvalidArgument: ``seconds`` is not a finite number in [0, ten years], or
            ``scope`` is not one of ``"job"``, ``"queue"`` (``"partition"``: see above).
    """

    def __init__(self, seconds: float | timedelta, scope: SnoozeScope = "job",
                 reason: str | None = None):
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                or not math.isfinite(seconds) or not 0 <= seconds <= MAX_SNOOZE):
            raise InvalidArgument(
                f"RetryAfter takes seconds in [0, {MAX_SNOOZE:g}], got {seconds!r}")
        if scope == "partition":
            # The partition work (issue 33 items 1-2) lifts this: the backend's snooze
            # already takes the scope, so only this check and the backends change.
            raise InvalidArgument(
                "RetryAfter(scope='partition') needs partitions, which this version of "
                "leaseq does not have yet; use scope='queue' to hold the whole queue")
        if scope not in SNOOZE_SCOPES:
            raise InvalidArgument(
                f"RetryAfter scope must be 'job' or 'queue', got {scope!r}")
        self.seconds = float(seconds)
        self.scope: SnoozeScope = scope
        self.reason = reason
        super().__init__(reason or f"retry after {self.seconds:g} s (scope={scope})")
