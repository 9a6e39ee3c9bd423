"""What the push wake-ups and turns of several backends share: the reading of a
finished-jobs message and the turn's timings (``leaseq.worker.turn`` explains the turn)."""

from __future__ import annotations

TURN_TTL = 10.0
"""Redis: seconds the turn key outlives a holder that stopped renewing it..."""
TURN_RENEW = 3.0
"""...which renews it this often while it holds it (PostgreSQL: the holder checks its
session this often, since the lock goes with it)."""
TURN_TICK = 2.0
"""Redis: a waiter blocks this long on the relay list before it looks at the key (and at
``stopping()``) again: one ``BLPOP`` and one ``SET NX`` per tick per idle worker. Both:
how often a busy worker's turn task looks at ``stopping()`` (no I/O)."""


def job_ids(payload: str) -> list[int] | None:
    """The job ids of a completion message (``"12,13"``); None for ``""`` (any job may
    have finished) or anything unreadable, which is treated the same way."""
    if not payload:
        return None
    try:
        return [int(part) for part in payload.split(",")]
    except ValueError:
        return None
