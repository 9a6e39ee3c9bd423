"""One waiter per queue set: which idle worker claims when a push wake-up comes.

PostgreSQL NOTIFY and Redis pub/sub reach every listening worker. Left alone, each of N
idle workers claims on every wake-up, so one enqueued job cost N claims (issue 23, S19).
Instead, the idle workers of one set of queues take turns: at any moment one of them
holds the *turn* and claims when a wake-up names its queues; the others hear the same
wake-up and ignore it, and only poll (``poll_interval``).

A worker asks for the turn while it is idle (its last claim came back with fewer jobs than
it had room for) and hands it on as soon as a claim fills its free slots: more jobs may
be waiting, and the next idle worker, on getting the turn, claims at once. So a burst of
k jobs costs about k / (free slots per worker) + 1 claims, and one job costs one claim
plus the empty claim that follows it, whatever the number of workers.

* PostgreSQL: a session advisory lock (``pg_advisory_lock``) on a connection of its own.
  Waiters queue for it in the server, first come first served, and a worker that dies or
  whose connection drops releases it at once. Idle, a waiter sends nothing.
* MySQL/MariaDB: a named lock (``GET_LOCK``) on a connection of its own, as PostgreSQL's
  advisory lock: waiters queue for it in the server and a dead holder's session lets it go.
  A waiter's ``GET_LOCK`` gives up after ``TURN_TICK`` (whole seconds: MySQL takes no
  fraction) and asks again, so it sends one statement per tick. MySQL has no push
  wake-up, so there the holder is the one idle worker that polls quickly (``Worker``'s
  ``WATCH_TICK``); the others poll at their poll interval.
* Redis: a key holding the holder's id, with an expiry its holder renews
  (``TURN_TTL``), and a relay list: a holder that hands on deletes the key and pushes a
  token that one blocked waiter (``BLPOP``) pops; a holder that vanished loses the key
  when it expires, and the waiters, looking every ``TURN_TICK``, take it.

The turn is a hint, as the wake-ups are: two holders (an expiry during a stall) cost one
extra claim each; no holder (all busy, or the turn's connection down) costs at most one
poll interval, since every worker still polls; claims stay ``SKIP LOCKED``/atomic, so
jobs are never lost or run twice because of it. While a worker cannot reach the turn's
server (``active`` false) it claims on every wake-up, as before.

Each backend brings its own turn (``Capabilities.take_turns``: ``backends/postgres/
listen.py``, ``backends/mysql/turn.py``, ``backends/redis/listen.py``) or has none; this
module holds what the worker shares with it.
"""

from __future__ import annotations

import asyncio


class Turn:
    """The state a worker shares with its turn task: whether it is idle (it would take
    work), and whether it holds the turn."""

    def __init__(self) -> None:
        self.idle = False
        self.holding = False
        self.active = False  # the turn task reaches its server: wake-ups are gated
        self._changed = asyncio.Event()

    def set_idle(self, idle: bool) -> None:
        """Told after every claim: True when it came back with room to spare."""
        if idle != self.idle:
            self.idle = idle
            self._changed.set()

    def claims_on_wake(self) -> bool:
        """Whether a push wake-up should make this worker claim."""
        return self.holding or not self.active

    async def until(self, idle: bool, timeout: float | None = None) -> bool:
        """Waits until ``self.idle == idle`` (or ``timeout``); returns whether it is."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self.idle != idle:
            self._changed.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return self.idle == idle
        return True
