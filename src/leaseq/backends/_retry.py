"""The one retry and reconnect policy of every runner, sync and async, SQL and Redis.

A failed try of an operation is followed by one of three things:

- **a retry** after a transient conflict the server reported (a deadlock, a lock wait
  timeout, SQLite's busy): up to ``RETRIES`` tries in all, pausing ``retry_pause``;
- **a reconnect** when the connection dropped and the operation is safe to run again (a
  read, a claim, a fenced ack or renewal), or the server refused it before changing
  anything (a standby's read-only refusal): up to ``RECONNECTS`` times, 50 ms doubling,
  while the call is younger than ``RECONNECT_WINDOW``;
- **giving up**: the caller raises the translated error (``OutcomeUnknown`` for a write
  that was sent and not repeated).

``Tries`` decides; each runner only sleeps the way its kind sleeps (``time.sleep`` or
``asyncio.sleep``) and recovers its pool when told to. Pure logic: no I/O here.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

RETRIES = 12
RECONNECTS = 6
"""Reconnects after a dropped connection: pauses of 50 ms doubling, about 3 s in all (a
database restart, a Redis failover)."""
RECONNECT_WINDOW = 3.5
"""...but no new try once this many seconds have passed since the first (the pauses
above add up to 3.15 s): a connection that died silently took up to
``_sockets.DETECTION`` seconds to say so, and more tries into a dead network would only
stretch the call, each waiting up to ``connect_timeout`` for a connection. So a call on a
dead network fails within about ``RECONNECT_WINDOW`` + ``max(DETECTION, connect_timeout)``
seconds (design §37)."""


def retry_pause(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): 2 ms doubling to 0.5 s, with full
    jitter so that transactions that deadlocked together do not collide again."""
    return random.uniform(0, min(0.5, 0.002 * 2**attempt))


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds``, then try again; ``reconnect``: drop the pooled connections a lost
    server took with it first."""

    seconds: float
    reconnect: bool = False


@dataclass
class Tries:
    """One call's tries so far, and what to do after the next failure."""

    began: float = field(default_factory=time.monotonic)
    attempts: int = 0
    reconnects: int = 0

    def after(self, *, conflict: bool = False, dropped: bool = False,
              unapplied: bool = False, idempotent: bool = False) -> Pause | None:
        """What follows a failed try: a ``Pause`` before the next, or None to give up.

        Args:
            conflict: The server reported a transient conflict: the whole transaction
                may run again.
            dropped: The connection was lost (the server may or may not have run it).
            unapplied: The server refused the transaction before changing anything.
            idempotent: The operation is safe to run twice.
        """
        self.attempts += 1
        if conflict and self.attempts < RETRIES:
            return Pause(retry_pause(self.attempts))
        if (self.reconnects < RECONNECTS
                and time.monotonic() - self.began < RECONNECT_WINDOW
                and (unapplied or (idempotent and dropped))):
            self.reconnects += 1
            return Pause(0.05 * 2 ** (self.reconnects - 1), reconnect=True)
        return None
