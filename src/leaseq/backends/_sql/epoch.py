"""Job ids that never repeat (design §59), the SQL half.

An asynchronous standby that is promoted resumes the jobs' id sequence from what it
received, so the ids of the lost tail would be handed out again. Each connection therefore
compares, before its first write, the server's identity (PostgreSQL: its timeline;
MySQL/MariaDB: ``@@server_id``) with the one stored in ``<prefix>epoch``. On a change it
takes a lock, bumps the stored epoch and moves the id sequence up to ``epoch << 40``,
once. Ids stay at most 2^53 - 1 (safe in JavaScript): 8,192 epochs (the first and 8,191
bumps) of 2^40 (1.1 trillion) ids each. A database without the row records its server
at epoch 0 and renumbers nothing.

The plans here are dialect-neutral; each dialect's queries.sql says how (``epoch_*``).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from dataclasses import dataclass
from typing import Any

from leaseq.backends._sql.plan import Plan, Stmt
from leaseq.errors import BackendError

SHIFT = 40
MAX_ID = 2**53 - 1
MAX_EPOCH = MAX_ID >> SHIFT  # 8191
LOCK_KEY = "leaseq:epoch:"
POOLED_IDLE = 1.0
"""Seconds a connection behind a transaction pooler may sit unused before it compares
again: a failover takes longer than that, and a connection in use meanwhile saw it fail."""


def base(epoch: int) -> int:
    """The first id of ``epoch``."""
    return epoch << SHIFT


@dataclass(frozen=True)
class Seen:
    """The server's identity (None: a standby or read-only server, which takes no
    writes to guard) beside the stored identity and epoch (None: no row yet)."""

    server: str | None
    stored: str | None
    epoch: int | None

    @property
    def settled(self) -> bool:
        return self.server is None or self.server == self.stored


def seen() -> Plan[Seen]:
    """One statement: the server's identity and the stored row."""
    r = yield Stmt("epoch_seen")
    server, stored, epoch = r.rows[0]
    return Seen(None if server is None else str(server),
                None if stored is None else str(stored),
                None if epoch is None else int(epoch))


def next_epoch(epoch: int, stored: str, server: str, ordered: bool) -> int:
    """The epoch after a change from ``stored`` to ``server``. ``ordered``: identities
    that only grow (PostgreSQL timelines, hex), where a jump of several timelines (a
    promotion whose own bump was lost with the rest of its server's tail) skips as many
    epochs, so ids that server handed out are not handed out again."""
    step = 1
    if ordered:
        with contextlib.suppress(ValueError):  # not hex: one step
            step = max(1, int(server, 16) - int(stored, 16))
    new = epoch + step
    if new > MAX_EPOCH:
        raise BackendError(
            f"job ids: epoch {new} would pass {MAX_EPOCH}, the last whose ids stay below "
            "2^53 (design §59); every change of primary server uses one"
        )
    return new


@dataclass(frozen=True)
class Rules:
    """How a dialect moves its ids: ``ordered`` identities (see ``next_epoch``), the
    statements that move the sequence (each bound to ``base``), and whether the lock
    outlives the transaction and must be released (MySQL's GET_LOCK)."""

    ordered: bool
    advance: tuple[str, ...] = ("epoch_advance",)
    unlock: bool = False


POSTGRES = Rules(ordered=True)
MYSQL = Rules(ordered=False, unlock=True,
              advance=("epoch_advance", "epoch_advance_prepare", "epoch_advance_run",
                       "epoch_advance_done"))


def move(prefix: str, rules: Rules) -> Plan[int]:
    """Under the lock, reads the row again and, if the server is still another, bumps
    the epoch and moves the id sequence up to its first id; returns the epoch in force.
    The sequence moves before the row is written: a crash in between costs one more bump
    later, never an id below the recorded epoch."""
    key = {"key": LOCK_KEY + prefix}
    r = yield Stmt("epoch_lock", key)
    if not r.rows or r.rows[0][0] != 1:
        raise BackendError("job ids: could not take the epoch lock within 10 s")
    now = yield from seen()
    if now.server is None:
        epoch = now.epoch or 0
    elif now.stored is None or now.epoch is None:
        yield Stmt("epoch_record", {"identity": now.server, "epoch": 0})
        epoch = 0
    elif now.stored == now.server:
        epoch = now.epoch
    else:
        epoch = next_epoch(now.epoch, now.stored, now.server, rules.ordered)
        for name in rules.advance:
            yield Stmt(name, {"base": base(epoch)} if name == "epoch_advance" else {})
        yield Stmt("epoch_record", {"identity": now.server, "epoch": epoch})
    if rules.unlock:
        yield Stmt("epoch_unlock", key)
    return epoch


class Checked:
    """Which connections compared their server with the stored epoch, weakly held.

    A connection is due again after ``reset`` (a dropped connection or a read-only
    refusal anywhere in the client: behind a transaction pooler the client's connection
    survives a failover of the server behind it), and with ``idle`` after that many
    seconds unused (behind a pooler, a failover the client slept through shows no error).
    Marking a use costs a clock read and a dict write, no round trip.
    """

    def __init__(self, idle: float | None = None) -> None:
        self._at: weakref.WeakKeyDictionary[Any, tuple[int, float]] = (
            weakref.WeakKeyDictionary())
        self._generation = 0
        self.idle = idle

    def due(self, conn: Any) -> bool:
        entry = self._at.get(conn)
        if entry is None or entry[0] != self._generation:
            return True
        return self.idle is not None and time.monotonic() - entry[1] > self.idle

    def used(self, conn: Any) -> None:
        """``conn`` compared its server just now."""
        self._at[conn] = (self._generation, time.monotonic())

    def touch(self, conn: Any) -> None:
        """``conn`` was used: its idle time starts again, if its comparison holds."""
        if self.idle is None:
            return
        entry = self._at.get(conn)
        if entry is not None and entry[0] == self._generation:
            self._at[conn] = (entry[0], time.monotonic())

    def reset(self) -> None:
        self._generation += 1
