"""What differs per backend besides its operations: push wake-ups, the idle workers' turn,
the connections ``conn=`` can join, group commit, the printed DDL.

A backend says what it has, or that it has none, in one ``Capabilities`` value
(``backends.capabilities_for(url)``); the clients, the worker and the CLI ask it instead of
comparing backend or scheme names or importing a backend's modules (issue 31; design
§66). ``tests/test_layers.py`` keeps it so: outside ``leaseq.backends`` no module imports
a concrete backend or compares a backend's name.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Wake = Callable[[], None]
"""Called by a listener when a message names one of its queues (and after each
(re)connect, to catch up on what was sent meanwhile)."""
Stopping = Callable[[], bool]
"""Polled by every long-running listener or turn: True ends it without a cancel."""
Finished = Callable[[Sequence[int] | None], None]
"""Told the ids of jobs that finished, or None when any job may have (a message that could
not list them, a reconnect after which anything missed must be looked up)."""

Listener = Callable[[str, str, Sequence[str], Wake, Stopping], Coroutine[Any, Any, None]]
"""``listener(url, table_prefix, queues, wake, stopping)``: push wake-ups for jobs due on
``queues``, until ``stopping()`` or cancelled."""
DoneListener = Callable[[str, str, Finished, Stopping], Coroutine[Any, Any, None]]
"""``done_listener(url, table_prefix, finished, stopping)``: push wake-ups for finished
jobs (result waits), until ``stopping()`` or cancelled."""


class TurnState(Protocol):
    """What a turn task shares with its worker (``leaseq.worker.turn.Turn``): whether the
    worker is idle, and whether it holds its queues' turn."""

    idle: bool
    holding: bool
    active: bool

    async def until(self, idle: bool, timeout: float | None = None) -> bool:
        """Waits until the worker's idleness is ``idle`` (or ``timeout``); says whether
        it is."""
        ...


TakeTurns = Callable[
    [str, str, Sequence[str], str, TurnState, Wake, Stopping], Coroutine[Any, Any, None]
]
"""``take_turns(url, table_prefix, queues, worker_id, turn, wake, stopping)``: the idle
workers of one queue set take turns answering wake-ups (``leaseq.worker.turn``)."""


def own_url(url: str, listen_url: str | None) -> str | None:
    """Where the push wake-ups of a backend without a ``listen_url`` option listen: the
    client's own URL. A ``listen_url`` is refused: it would be silently ignored."""
    if listen_url is not None:
        from leaseq.errors import ConfigurationError

        raise ConfigurationError("listen_url is for PostgreSQL URLs only: the other "
                                 "backends listen on the client's own URL")
    return url


@dataclass(frozen=True)
class Drivers:
    """The SQLAlchemy connections a backend can join with ``conn=``: the dialect names
    it runs on and the drivers it writes with, sync and async, and the URL to suggest
    when a connection uses another driver."""

    dialects: frozenset[str]
    sync: frozenset[str]
    async_: frozenset[str]
    sync_url: str
    async_url: str
    joins_aiosqlite: bool = False
    """Whether an aiosqlite connection is one of its own (it is unwrapped to the
    sqlite3 connection it runs)."""


@dataclass(frozen=True)
class Capabilities:
    """What one kind of backend has, beyond the operations of ``Backend``.

    Attributes:
        name: ``Queue.backend``: memory, sqlite, postgres, mysql or redis.
        listener: Push wake-ups for due jobs, or None (the worker and a blocking
            ``dequeue`` poll, and in-process enqueues wake them directly).
        done_listener: Push wake-ups for finished jobs, or None (result waits poll).
        push_url: ``(url, listen_url) -> URL`` the listeners use, or None when they
            cannot listen (PostgreSQL behind a transaction pooler without a listen_url).
        take_turns: The idle workers' turn (one claims per wake-up), or None: every
            worker answers every wake-up.
        turn_without_push: The turn exists though wake-ups do not (MySQL/MariaDB): its
            holder is the one idle worker that polls quickly.
        group_commit: Lone enqueues may share a commit (``Settings.group_commit``);
            False where a write has no commit to share (memory).
        drivers: The SQLAlchemy connections ``conn=`` joins, or None.
        no_push: Why ``push_url`` gave None, logged once per client that would listen.
    """

    name: str
    listener: Listener | None = None
    done_listener: DoneListener | None = None
    push_url: Callable[[str, str | None], str | None] = own_url
    take_turns: TakeTurns | None = None
    turn_without_push: bool = False
    group_commit: bool = True
    drivers: Drivers | None = field(default=None)
    no_push: str = ""
