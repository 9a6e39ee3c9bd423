"""Push wake-ups for the worker and for a blocking ``dequeue``: PostgreSQL LISTEN/NOTIFY,
Redis pub/sub, and a cheap watch for commits to a SQLite file.

PostgreSQL: enqueues send ``pg_notify('<prefix>jobs', queue)`` in the enqueueing
transaction (queue names only, never payloads; delivered on commit, dropped on rollback).
Redis: every script that makes jobs due now PUBLISHes the queue's name on ``<prefix>:wake``
(``backends/redis/scripts/_common.lua``), once per queue per call.

SQLite: ``PRAGMA data_version`` on a connection of the watcher's own changes whenever
another connection commits; it is read every few milliseconds.

Waiters on results (``Queue.wait``, ``leaseq._results``) listen for finished jobs the same
ways: PostgreSQL ``<prefix>done`` and Redis ``<prefix>:done`` carry the ids of the jobs a
statement or script finished (one message per batch of acks), and on SQLite any commit
may have finished one.

Each client says which URL its listeners use (``push_url``): the client's own, a
PostgreSQL ``listen_url``, or none behind a transaction pooler (``pgbouncer=true``)
without one, where every wait polls.

Every listener is a hint, not a correctness mechanism: while it is down the worker's
polling covers the gap, and it reconnects with backoff, waking the worker once on each
reconnect to catch up on anything sent meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from leaseq import _outage

log = logging.getLogger("leaseq.worker")

Finished = Callable[[Sequence[int] | None], None]
"""Told the ids of jobs that finished, or None when any job may have (a message that could
not list them, a reconnect after which anything missed must be looked up)."""

REDIS_CLIENT_NAME = "leaseq-listen"
"""CLIENT SETNAME of the Redis listener's connection, unless the URL names it
(``?client_name=...``, as the chaos harness does for all of a worker's connections)."""
REDIS_CONNECT_TIMEOUT = 5.0  # a connect to an unreachable host fails, and is tried again
REDIS_TICK = 1.0  # how often an idle listener looks at stopping() and its keepalive
REDIS_QUIET = 30.0  # this long without a message, the listener PINGs the server...
REDIS_PING_TIMEOUT = 10.0  # ...and reconnects when the reply does not come this soon


def push_url(url: str, listen_url: str | None) -> str | None:
    """The URL the push wake-ups of a client of ``url`` listen on, None when they cannot.

    PostgreSQL: ``listen_url`` (the ``Settings`` field, else the URL's ``listen_url=``
    parameter), else the URL itself without leaseq's parameters; but never a URL that
    says ``pgbouncer=true``: a transaction pooler lends each transaction whichever server
    connection is free, and a LISTEN made on one is heard by nobody after it (None then:
    the waits poll). Other backends listen on ``url`` and take no ``listen_url``.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        if listen_url is not None:
            from leaseq.errors import ConfigurationError

            raise ConfigurationError("listen_url is for PostgreSQL URLs only: the other "
                                     "backends listen on the client's own URL")
        return url
    from leaseq.backends.postgres.url import listen_target, parse

    target = parse(url)
    if listen_url is not None:
        return listen_target(listen_url)
    if target.listen_url is not None:
        return target.listen_url
    return None if target.pgbouncer else target.dsn


NO_PUSH = (
    "pgbouncer=true without a listen_url: push wake-ups need a session, so this client's "
    "waits poll (a worker picks up a new job within its poll interval, 1 s by default; a "
    "blocking dequeue within 20 ms; a result wait within 0.5 s); add listen_url=<direct "
    "URL, URL-encoded> to the URL or pass listen_url= for push wake-ups"
)
"""Logged once per client that would listen but cannot (``Shared.push_url``)."""


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

    from leaseq.backends.postgres.url import with_tcp_defaults

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


def job_ids(payload: str) -> list[int] | None:
    """The job ids of a completion message (``"12,13"``); None for ``""`` (any job may
    have finished) or anything unreadable, which is treated the same way."""
    if not payload:
        return None
    try:
        return [int(part) for part in payload.split(",")]
    except ValueError:
        return None


async def listen_redis(
    url: str,
    prefix: str,
    queues: Sequence[str],
    wake: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """SUBSCRIBE to the wake channel of key prefix ``prefix`` (``table_prefix``) on the
    Redis at ``url`` and call ``wake()`` for each message naming one of ``queues``, and
    once after each (re)subscribe. Runs until ``stopping()`` or cancelled.

    On a Redis Cluster (``redis+cluster://``) it subscribes on the first node the URL
    names, and after a failure tries the next one: classic pub/sub reaches every node, so
    a script's PUBLISH on any primary wakes it. Behind Sentinel (``redis+sentinel://``)
    each (re)connect asks the Sentinels for the current primary, so after a failover it
    subscribes on the new one.

    Its connection is named ``leaseq-listen`` (``CLIENT SETNAME``) unless the URL gives a
    ``client_name``. A dropped connection is logged as a WARNING and opened again with
    backoff (0.5 s doubling up to 30 s); a user whose ACL refuses the channel gets one
    WARNING, and a new try every 30 s.
    """
    from leaseq.backends.redis.keys import Keys

    channel = Keys(prefix).wake  # a bad prefix raises here, once, not on every reconnect
    wanted = set(queues)

    def heard(data: str) -> None:
        if data in wanted:
            wake()

    await _listen_redis(url, channel, heard, wake, stopping)


async def listen_done_redis(
    url: str, prefix: str, finished: Finished, stopping: Callable[[], bool]
) -> None:
    """SUBSCRIBE to ``P:done``, where scripts that finish jobs (completed, dead,
    discarded, cancelled) publish the finished ids, comma-separated, once per call; as
    ``listen_done``, with ``listen_redis``'s reconnects (a cluster's PUBLISH reaches
    every node). Runs until ``stopping()`` or cancelled."""
    from leaseq.backends.redis.keys import Keys

    await _listen_redis(url, Keys(prefix).done, lambda data: finished(job_ids(data)),
                        lambda: finished(None), stopping)


async def _listen_redis(
    url: str,
    channel: str,
    heard: Callable[[str], None],
    connected: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    """SUBSCRIBE to ``channel``: ``heard(data)`` per message, ``connected()`` after each
    (re)subscribe; see ``listen_redis`` for reconnects, ACLs and clusters."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import NoPermissionError

    from leaseq.backends.redis.driver import SideUrl, close_side_client

    side = SideUrl(url)
    failures = 0
    pause = 0.5
    refused = False  # the ACL refused the channel, and we said so
    while not stopping():
        options: dict[str, Any] = {
            "client_name": REDIS_CLIENT_NAME,
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT,
            # Bounds the commands of the connect handshake (AUTH, SETNAME), which a frozen
            # server would otherwise leave waiting; reads of messages set their own.
            "socket_timeout": REDIS_PING_TIMEOUT,
            # Idle most of the time: keepalives find a dead network long before the quiet
            # PING below would.
            **side.socket_options(),
            "decode_responses": True,
            # redis-py's own reconnect would resubscribe silently, and the wake-up owed
            # for messages missed meanwhile would never come: a drop must reach us.
            "retry": Retry(NoBackoff(), 0),
        }
        # Options in the URL (client_name, timeouts, TLS) win over these defaults.
        client, sentinels = side.client(failures, options)
        try:
            try:
                async with client.pubsub() as pubsub:
                    await _subscribe(pubsub, channel, stopping)
                    pause, refused = 0.5, False
                    connected()
                    await _relay(pubsub, heard, stopping)
            finally:
                await close_side_client(client, sentinels)
        except asyncio.CancelledError:
            raise
        except NoPermissionError as exc:
            # An ACL without the channel: nothing a quick retry cures, so say how to fix
            # it once and look again now and then (the right may be granted later).
            if not refused:
                log.warning("the Redis user may not SUBSCRIBE to %s (%s): grant it &%s for "
                            "push wake-ups; polling only until then", channel, exc, channel)
            refused = True
            await asyncio.sleep(30.0)
        except Exception as exc:
            log.log(_outage.level(logging.INFO, repeat=pause > 0.5),
                    "Redis wake-up subscription lost (%s); polling until it is back",
                    str(exc) or type(exc).__name__)
            failures += 1  # a cluster URL's next node, if it names several
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)


async def _subscribe(pubsub: Any, channel: str, stopping: Callable[[], bool]) -> None:
    """SUBSCRIBE, and wait for the server's confirmation: a wake-up sent before the
    subscription is in place could miss a job enqueued in between. Returns early when
    ``stopping()``: a cancel of this wait can be lost inside redis-py (design §27)."""
    await pubsub.subscribe(channel)
    deadline = asyncio.get_running_loop().time() + REDIS_PING_TIMEOUT
    while asyncio.get_running_loop().time() < deadline and not stopping():
        message = await pubsub.get_message(timeout=REDIS_TICK)
        if message is not None and message["type"] == "subscribe":
            return
    if stopping():
        return
    raise TimeoutError(f"no reply to SUBSCRIBE {channel} in {REDIS_PING_TIMEOUT:g} s")


async def _relay(
    pubsub: Any, relay: Callable[[str], None], stopping: Callable[[], bool]
) -> None:
    """Calls ``relay(data)`` for each message until ``stopping()``.

    A server that vanishes without closing the connection (a failover, a cut network)
    would leave us waiting for ever while the worker polls; so after ``REDIS_QUIET``
    seconds of silence a PING must be answered within ``REDIS_PING_TIMEOUT``.

    A connection the kernel gave up on (keepalives, ``tcp_user_timeout``: a dead
    network) fails every read at once with ETIMEDOUT, which redis-py takes for the end of
    ``get_message``'s own timeout: None, at once, for ever. Looping on that would starve
    the event loop (and the worker's self-fencing on it, design §37); a few instant Nones
    in a row end the subscription instead, to be opened again."""
    loop = asyncio.get_running_loop()
    heard = loop.time()
    pinged: float | None = None
    instant = 0  # Nones in a row that came back without waiting
    while not stopping():
        asked = loop.time()
        message = await pubsub.get_message(timeout=REDIS_TICK)
        now = loop.time()
        if message is None and now - asked < REDIS_TICK / 10:
            instant += 1
            if instant >= 3:
                raise ConnectionError("the subscription's connection is dead (its reads "
                                      "fail at once)")
            await asyncio.sleep(REDIS_TICK / 10)  # never a busy loop
            continue
        instant = 0
        if message is not None:
            heard, pinged = now, None
            data = message["data"]
            if isinstance(data, bytes):  # decode_responses=False in the URL
                data = data.decode("utf-8", "replace")
            if message["type"] == "message":
                relay(data)
        elif pinged is not None:
            if now - pinged > REDIS_PING_TIMEOUT:
                raise TimeoutError(f"no reply to PING in {REDIS_PING_TIMEOUT:g} s")
        elif now - heard > REDIS_QUIET:
            await pubsub.ping()
            pinged = now


SQLITE_TICK = 0.002
"""How often the SQLite watcher asks whether the database file changed."""


async def listen_sqlite(
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
    import sqlite3

    from leaseq.backends.sqlite.driver import sqlite_path

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


async def listen_done_sqlite(
    url: str, prefix: str, finished: Finished, stopping: Callable[[], bool]
) -> None:
    """``listen_sqlite`` for waiters on results: every commit to the file may have
    finished a job, so each calls ``finished(None)``. Runs until ``stopping()`` or
    cancelled."""
    await listen_sqlite(url, prefix, (), lambda: finished(None), stopping)


Listener = Callable[
    [str, str, Sequence[str], Callable[[], None], Callable[[], bool]], Coroutine[Any, Any, None]
]


def listener_for(backend: str) -> Listener | None:
    """The push wake-up of ``backend`` (a ``Queue.backend`` name), or None where there is
    none (MySQL/MariaDB, memory, whose in-process wake-ups come from ``_wakeup``)."""
    found: dict[str, Listener] = {
        "postgres": listen, "redis": listen_redis, "sqlite": listen_sqlite,
    }
    return found.get(backend)


DoneListener = Callable[
    [str, str, Finished, Callable[[], bool]], Coroutine[Any, Any, None]
]


def done_listener_for(backend: str) -> DoneListener | None:
    """The push wake-up for finished jobs of ``backend``, or None where there is none
    (MySQL/MariaDB poll; memory and every in-process finish wake waiters directly,
    ``leaseq._results``)."""
    found: dict[str, DoneListener] = {
        "postgres": listen_done, "redis": listen_done_redis, "sqlite": listen_done_sqlite,
    }
    return found.get(backend)


class InThread:
    """A listener on an event loop of its own, in a daemon thread: push wake-ups for the
    synchronous client's blocking ``dequeue``. ``stop()`` cancels it and waits for its
    connection to close."""

    def __init__(self, run: Coroutine[Any, Any, None], name: str = "leaseq-listen") -> None:
        self._loop = asyncio.new_event_loop()
        self._task = self._loop.create_task(run)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._task)
        except (asyncio.CancelledError, Exception) as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.debug("push wake-up listener ended: %s", exc)
        finally:
            self._loop.close()

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop already ended on its own
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=5)
