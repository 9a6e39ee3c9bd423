"""Whether a worker of this process knows its database is unreachable.

While one does, its fetch loop logs one WARNING per attempt to reach the database (with
exponential backoff), and the other connections' own retries (LISTEN, turns, heartbeats,
maintenance, acks) log theirs at DEBUG: the same outage from five sources buried the
one line that mattered (issue 30). A counter, not a flag: several workers may share a
process (tests, an embedding program).

The push and turn connections, whose loss costs latency and nothing else (the worker
polls meanwhile), log the first loss of a streak at INFO and the repeats at DEBUG even
outside an outage: they notice a dropped server before the fetch loop does.
"""

from __future__ import annotations

import logging
import threading

from leaseq.errors import AuthenticationFailed, BackendUnavailable

_lock = threading.Lock()
_down = 0


def level(base: int = logging.WARNING, repeat: bool = False) -> int:
    """The level for a lost connection's log line: DEBUG while an outage is being
    reported by a worker's fetch loop, or for a ``repeat`` of a loss already logged;
    else ``base``."""
    return logging.DEBUG if _down or repeat else base


def level_for(exc: BaseException) -> int:
    """The level for a worker subsystem's failed call (heartbeats, maintenance, acks,
    schedules): DEBUG when the database is unreachable, which the fetch loop reports
    itself, one WARNING per attempt; WARNING for any other error, unless an outage is
    being reported."""
    if isinstance(exc, BackendUnavailable) and not isinstance(exc, AuthenticationFailed):
        return logging.DEBUG
    return level()


def begin() -> None:
    """A worker's fetch loop found the database unreachable."""
    global _down
    with _lock:
        _down += 1


def end() -> None:
    """...and reached it again (or stopped)."""
    global _down
    with _lock:
        _down = max(0, _down - 1)
