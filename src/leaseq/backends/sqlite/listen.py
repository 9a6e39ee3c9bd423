"""SQLite's push wake-up: ``PRAGMA data_version`` on a connection of the watcher's own
changes whenever another connection commits; it is read every few milliseconds."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence

from leaseq.backends.capabilities import Finished
from leaseq.backends.sqlite.driver import sqlite_path

log = logging.getLogger("leaseq.worker")


SQLITE_TICK = 0.002
"""How often the SQLite watcher asks whether the database file changed."""


async def listen(
    url: str,
    prefix: str,
    queues: Sequence[str],
    wake: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """Call ``wake()`` when another connection (any process) commits to the SQLite file.

    SQLite sends no notifications, but ``PRAGMA data_version`` tells whether anyone else
    committed since the last look; in WAL mode that reads shared memory, a few microseconds,
    so looking every ``SQLITE_TICK`` costs far less than polling with claims and puts the
    pickup of a job enqueued by another process within a few milliseconds. It cannot tell
    which queue changed (``prefix`` and ``queues`` are unused), so a commit anywhere wakes
    the worker; the claim that follows finds out. Runs until ``stopping()`` or cancelled.
    """
    conn = sqlite3.connect(sqlite_path(url), timeout=0, isolation_level=None,
                           check_same_thread=False)
    try:
        last = None
        while not stopping():
            try:
                version = conn.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as exc:  # busy or gone for a moment: polling covers it
                log.debug("SQLite change watch: %s", exc)
                version = last
            if version != last:
                if last is not None:
                    wake()
                last = version
            await asyncio.sleep(SQLITE_TICK)
    finally:
        conn.close()


async def listen_done(
    url: str, prefix: str, finished: Finished, stopping: Callable[[], bool]
) -> None:
    """``listen`` for waiters on results: every commit to the file may have
    finished a job, so each calls ``finished(None)``. Runs until ``stopping()`` or
    cancelled."""
    await listen(url, prefix, (), lambda: finished(None), stopping)
