"""Whether a worker of this process knows its database is unreachable.

While one does, its fetch loop logs one WARNING per attempt to reach the database (with
exponential backoff), and the other connections' own retries (LISTEN, turns, heartbeats,
maintenance, acks) log theirs at DEBUG: the same outage from five sources buried the
one line that mattered (issue 30). A counter, not a flag: several workers may share a
process (tests, an embedding program).
"""

from __future__ import annotations

import logging
import threading

_lock = threading.Lock()
_down = 0


def level() -> int:
    """The level for a lost connection's log line: DEBUG while an outage is being
    reported by a worker's fetch loop, else WARNING."""
    return logging.DEBUG if _down else logging.WARNING


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
