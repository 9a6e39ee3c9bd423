"""PostgreSQL's push wake-ups and turn: LISTEN/NOTIFY and a session advisory lock.

Enqueues send ``pg_notify('<prefix>jobs', queue)`` in the enqueueing transaction (queue
names only, never payloads; delivered on commit, dropped on rollback); statements that
finish jobs send their ids on ``<prefix>done``. Each listener is a hint, not a correctness
mechanism: while it is down the worker polls, and it reconnects with backoff, waking the
worker once on each reconnect to catch up on anything sent meanwhile. The turn is
explained in ``leaseq.worker.turn``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Sequence

from leaseq._core import outage as _outage
from leaseq.backends._push import TURN_RENEW, TURN_TICK, job_ids
from leaseq.backends.capabilities import Finished, Stopping, TurnState, Wake
from leaseq.backends.postgres.url import listen_target, parse, with_tcp_defaults

log = logging.getLogger("leaseq.worker")

LOCK_CLASS = 0x6C71  # "lq": the first key of the two-int advisory lock, the second hashes


def push_url(url: str, listen_url: str | None) -> str | None:
    """The URL the push wake-ups of a client of ``url`` listen on, None when they cannot.

    ``listen_url`` (the ``Settings`` field, else the URL's ``listen_url=`` parameter),
    else the URL itself without leaseq's parameters; but never a URL that says
    ``pgbouncer=true``: a transaction pooler lends each transaction whichever server
    connection is free, and a LISTEN made on one is heard by nobody after it (None then:
    the waits poll).
    """
    target = parse(url)
    if listen_url is not None:
        return listen_target(listen_url)
    if target.listen_url is not None:
        return target.listen_url
    return None if target.pgbouncer else target.dsn


async def listen(
    url: str,
    prefix: str,
    queues: Sequence[str],
    wake: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """LISTEN on ``<prefix>jobs`` and call ``wake()`` for each notification naming one of
    ``queues``, and once after each (re)connect. Runs until ``stopping()`` or cancelled."""
    wanted = set(queues)

    def heard(payload: str) -> None:
        if payload in wanted:
            wake()

    await _listen_pg(url, f"{prefix}jobs", heard, wake, stopping)


async def listen_done(
    url: str, prefix: str, finished: Finished, stopping: Callable[[], bool]
) -> None:
    """LISTEN on ``<prefix>done``, where transactions that finish jobs (completed, dead,
    discarded, cancelled) send the finished ids, comma-separated, once per statement
    (``''``, too many to list: any job may have finished). Calls ``finished(ids)`` per
    notification and ``finished(None)`` after each (re)connect. Runs until ``stopping()``
    or cancelled."""
    await _listen_pg(url, f"{prefix}done", lambda payload: finished(job_ids(payload)),
                     lambda: finished(None), stopping)


async def _listen_pg(
    url: str,
    channel: str,
    heard: Callable[[str], None],
    connected: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """LISTEN on ``channel``: ``heard(payload)`` per notification, ``connected()`` after
    each (re)connect (anything sent while we were away is lost, so the caller catches
    up). Reconnects with backoff until ``stopping()`` or cancelled."""
    import psycopg
    from psycopg import sql

    url = with_tcp_defaults(url)  # a dead network is noticed (design §37)
    pause = 0.5
    while not stopping():
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            async with conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                pause = 0.5
                connected()
                async for note in conn.notifies():
                    heard(note.payload)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.log(_outage.level(logging.INFO, repeat=pause > 0.5),
                    "LISTEN connection lost (%s); polling until it is back", exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)


def lock_key(prefix: str, queues: Sequence[str]) -> int:
    """The second half of the advisory lock of a queue set: a stable signed 32-bit hash."""
    digest = hashlib.sha256(f"{prefix}\0{','.join(sorted(set(queues)))}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


async def take_turns(
    url: str, prefix: str, queues: Sequence[str], worker_id: str, turn: TurnState,
    wake: Wake, stopping: Stopping,
) -> None:
    """PostgreSQL: queue for the queue set's advisory lock while idle, hold it (calling
    ``wake()`` on getting it) until a claim fills the worker, then let it go. Reconnects
    with backoff; while disconnected the worker claims on every wake-up."""
    import psycopg

    url = with_tcp_defaults(url)  # a dead network is noticed, and the lock let go (§37)
    key = lock_key(prefix, queues)
    pause = 0.5
    while not stopping():
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            async with conn:
                turn.active, pause = True, 0.5
                while not stopping():
                    # With a timeout, so that stopping() is seen even if a cancel is lost.
                    if not await turn.until(idle=True, timeout=TURN_TICK):
                        continue
                    await conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, key))
                    try:
                        if turn.idle:
                            turn.holding = True
                            wake()  # wake-ups sent while another held it were theirs
                            # A killed session has released the lock, and only a statement
                            # notices: the holder (one per fleet) sends one per TURN_RENEW.
                            while not await turn.until(idle=False, timeout=TURN_RENEW):
                                if stopping():
                                    break
                                await conn.execute("SELECT 1")
                    finally:
                        turn.holding = False
                    await conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, key))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.log(_outage.level(logging.INFO, repeat=pause > 0.5),
                    "turn connection lost (%s); claiming on every wake-up meanwhile", exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
        finally:
            turn.active = turn.holding = False
