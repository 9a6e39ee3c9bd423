"""MySQL/MariaDB's turn: a named lock (``GET_LOCK``) on a connection of its own. MySQL
has no push wake-up, so the turn's holder is the one idle worker that polls quickly
(``leaseq.worker.turn`` explains the turn)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import Any

from leaseq._core import outage as _outage
from leaseq._core.settings import Settings
from leaseq.backends import _sockets
from leaseq.backends._push import TURN_RENEW, TURN_TICK
from leaseq.backends.capabilities import Stopping, TurnState, Wake
from leaseq.backends.mysql.driver import connect_args, tcp_options

log = logging.getLogger("leaseq.worker")

MYSQL_LOCK_PREFIX = "leaseq-turn-"
"""The named lock of a queue set is this and a hash (64 characters at most)."""


def lock_name(database: str, prefix: str, queues: Sequence[str]) -> str:
    """MySQL/MariaDB: the named lock of a queue set. Named locks are server-wide, so the
    database is part of the hash."""
    text = f"{database}\0{prefix}\0{','.join(sorted(set(queues)))}"
    return MYSQL_LOCK_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40]


async def take_turns(
    url: str, prefix: str, queues: Sequence[str], worker_id: str, turn: TurnState,
    wake: Wake, stopping: Stopping,
) -> None:
    """MySQL/MariaDB: as PostgreSQL's ``take_turns``, with the queue set's named lock (``GET_LOCK``)
    on a connection of its own. A waiter's ``GET_LOCK`` gives up after ``TURN_TICK`` and
    is asked again (one statement per tick); the holder checks every ``TURN_RENEW`` that
    its session still owns the lock (``IS_USED_LOCK``). Reconnects with backoff; while
    disconnected the worker polls as it would without turns."""
    import aiomysql

    args = connect_args(url, Settings())
    name = lock_name(args["database"], prefix, queues)
    args["db"] = args.pop("database")
    for option in ("read_timeout", "write_timeout", "init_command"):
        del args[option]
    args["autocommit"] = True
    tcp = tcp_options(url)
    wait = max(1, round(TURN_TICK))
    pause = 0.5
    while not stopping():
        conn: Any = None
        try:
            conn = await aiomysql.connect(**args)
            writer = getattr(conn, "_writer", None)
            if writer is not None:  # a dead network is noticed, and the lock let go (§37)
                _sockets.apply(writer.transport.get_extra_info("socket"), tcp)
            turn.active, pause = True, 0.5
            while not stopping():
                if not await turn.until(idle=True, timeout=TURN_TICK):
                    continue
                if await _one(conn, "SELECT GET_LOCK(%s, %s)", (name, wait)) != 1:
                    continue  # timed out in the queue: look at stopping() and idle again
                try:
                    if turn.idle:
                        turn.holding = True
                        wake()
                        while not await turn.until(idle=False, timeout=TURN_RENEW):
                            if stopping():
                                break
                            # A killed session has released the lock: only a statement
                            # notices, and this one also says whether it is still ours.
                            if await _one(conn, "SELECT IS_USED_LOCK(%s) = CONNECTION_ID()",
                                          (name,)) != 1:
                                raise ConnectionError("the turn's named lock was lost")
                finally:
                    turn.holding = False
                await _one(conn, "SELECT RELEASE_LOCK(%s)", (name,))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.log(_outage.level(logging.INFO, repeat=pause > 0.5),
                    "turn connection lost (%s); polling as without turns meanwhile",
                        str(exc) or type(exc).__name__)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
        finally:
            turn.active = turn.holding = False
            if conn is not None:
                conn.close()  # no goodbye: the server releases the lock with the session


async def _one(conn: Any, sql: str, params: tuple[Any, ...]) -> Any:
    """The single value of a one-row ``sql`` on an aiomysql connection."""
    async with conn.cursor() as cur:
        await cur.execute(sql, params)
        row = await cur.fetchone()
    return None if row is None else row[0]
