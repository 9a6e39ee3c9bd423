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
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from leaseq import _outage

log = logging.getLogger("leaseq.worker")

TURN_TTL = 10.0
"""Redis: seconds the turn key outlives a holder that stopped renewing it..."""
TURN_RENEW = 3.0
"""...which renews it this often while it holds it (PostgreSQL: the holder checks its
session this often, since the lock goes with it)."""
TURN_TICK = 2.0
"""Redis: a waiter blocks this long on the relay list before it looks at the key (and at
``stopping()``) again: one ``BLPOP`` and one ``SET NX`` per tick per idle worker. Both:
how often a busy worker's turn task looks at ``stopping()`` (no I/O)."""
MYSQL_LOCK_PREFIX = "leaseq-turn-"
"""MySQL/MariaDB: the named lock of a queue set is this and a hash (64 characters at most)."""
LOCK_CLASS = 0x6C71  # "lq": the first key of the two-int advisory lock, the second hashes


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


def lock_key(prefix: str, queues: Sequence[str]) -> int:
    """The second half of the advisory lock of a queue set: a stable signed 32-bit hash."""
    digest = hashlib.sha256(f"{prefix}\0{','.join(sorted(set(queues)))}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


def lock_name(database: str, prefix: str, queues: Sequence[str]) -> str:
    """MySQL/MariaDB: the named lock of a queue set. Named locks are server-wide, so the
    database is part of the hash."""
    text = f"{database}\0{prefix}\0{','.join(sorted(set(queues)))}"
    return MYSQL_LOCK_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:40]


async def take_turns_pg(
    url: str, prefix: str, queues: Sequence[str], turn: Turn, wake: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """PostgreSQL: queue for the queue set's advisory lock while idle, hold it (calling
    ``wake()`` on getting it) until a claim fills the worker, then let it go. Reconnects
    with backoff; while disconnected the worker claims on every wake-up."""
    import psycopg

    from leaseq.backends.postgres.url import with_tcp_defaults

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


async def take_turns_mysql(
    url: str, prefix: str, queues: Sequence[str], turn: Turn, wake: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """MySQL/MariaDB: as ``take_turns_pg``, with the queue set's named lock (``GET_LOCK``)
    on a connection of its own. A waiter's ``GET_LOCK`` gives up after ``TURN_TICK`` and
    is asked again (one statement per tick); the holder checks every ``TURN_RENEW`` that
    its session still owns the lock (``IS_USED_LOCK``). Reconnects with backoff; while
    disconnected the worker polls as it would without turns."""
    import aiomysql

    from leaseq._core.settings import Settings
    from leaseq.backends import _sockets
    from leaseq.backends.mysql.driver import connect_args, tcp_options

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


async def take_turns_redis(
    url: str, prefix: str, queues: Sequence[str], worker_id: str, turn: Turn,
    wake: Callable[[], None], stopping: Callable[[], bool],
) -> None:
    """Redis: while idle, take the queue set's turn key (``SET NX``), else wait on its relay
    list; hold it (renewing it, calling ``wake()`` on getting it) until a claim fills the
    worker, then delete it and push a relay token. Reconnects with backoff."""
    from redis.exceptions import NoPermissionError

    from leaseq.backends.redis.driver import SideUrl, close_side_client
    from leaseq.backends.redis.keys import Keys

    side = SideUrl(url)  # a Sentinel URL finds the current primary on each reconnect
    owner, relay = Keys(prefix).turn(queues)
    pause = 0.5
    refused = False  # the ACL refused the keys, and we said so
    attempt = 0
    while not stopping():
        client, sentinels = side.client(attempt, {
            "socket_connect_timeout": 5.0, "socket_timeout": TURN_TICK + 10.0,
            "decode_responses": True, **side.socket_options()})
        attempt += 1
        try:
            await client.ping()
            turn.active, pause = True, 0.5
            while not stopping():
                if not await turn.until(idle=True, timeout=TURN_TICK):
                    continue
                ms = int(TURN_TTL * 1000)
                if not await client.set(owner, worker_id, nx=True, px=ms):
                    await client.blpop([relay], timeout=TURN_TICK)
                    continue
                turn.holding = True  # the outer finally clears it on any way out
                wake()
                lost = False
                while not await turn.until(idle=False, timeout=TURN_RENEW):
                    if stopping():
                        break
                    # Renew only if still ours: after an expiry during a stall another
                    # worker holds it, and it is theirs now (no overwrite, no hand-on).
                    if await client.get(owner) != worker_id:
                        lost = True
                        break
                    await client.pexpire(owner, ms)
                turn.holding = False
                if not lost:
                    await _hand_on(client, owner, relay, worker_id)
        except asyncio.CancelledError:
            if turn.holding:  # hand it on now rather than leave it to expire
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(_hand_on(client, owner, relay, worker_id), 1.0)
            raise
        except NoPermissionError as exc:
            # An ACL without the turn's keys: say how to fix it once, look again now and
            # then; meanwhile this worker answers every wake-up, as without turns.
            if not refused:
                log.warning("the Redis user may not use the turn keys %s and %s (%s): grant "
                            "~%s* for idle workers to take turns", owner, relay, exc, owner)
            refused = True
            await asyncio.sleep(30.0)
        except Exception as exc:
            log.log(_outage.level(logging.INFO, repeat=pause > 0.5),
                    "Redis turn connection lost (%s); claiming on every wake-up meanwhile",
                    str(exc) or type(exc).__name__)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
        finally:
            turn.active = turn.holding = False
            await close_side_client(client, sentinels)


async def _hand_on(client: Any, owner: str, relay: str, worker_id: str) -> None:
    """Gives the Redis turn up: its key goes (if still ours), and one token on the relay
    list wakes one waiter blocked on it."""
    if await client.get(owner) == worker_id:
        await client.delete(owner)
    pipe = client.pipeline(transaction=False)
    pipe.rpush(relay, "1")
    pipe.ltrim(relay, 0, 0)  # one token hands it on; more would only pile up
    await pipe.execute()
