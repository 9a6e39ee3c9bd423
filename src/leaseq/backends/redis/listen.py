"""Redis' push wake-ups and turn: pub/sub and a key with a relay list.

Every script that makes jobs due now PUBLISHes the queue's name on ``<prefix>:wake``
(``scripts/_common.lua``), once per queue per call; scripts that finish jobs publish
their ids on ``<prefix>:done``. A listener is a hint, not a correctness mechanism: while
it is down the worker polls. The turn is explained in ``leaseq.worker.turn``.

Only for single servers and Sentinel: on a Cluster the listener subscribes on one node
(classic pub/sub reaches every node) and workers take no turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from leaseq._core import outage as _outage
from leaseq.backends._push import TURN_RENEW, TURN_TICK, TURN_TTL, job_ids
from leaseq.backends.capabilities import Finished, Stopping, TurnState, Wake
from leaseq.backends.redis.driver import SideUrl, close_side_client
from leaseq.backends.redis.keys import Keys

log = logging.getLogger("leaseq.worker")

REDIS_CLIENT_NAME = "leaseq-listen"
"""CLIENT SETNAME of the Redis listener's connection, unless the URL names it
(``?client_name=...``, as the chaos harness does for all of a worker's connections)."""
REDIS_CONNECT_TIMEOUT = 5.0  # a connect to an unreachable host fails, and is tried again
REDIS_TICK = 1.0  # how often an idle listener looks at stopping() and its keepalive
REDIS_QUIET = 30.0  # this long without a message, the listener PINGs the server...
REDIS_PING_TIMEOUT = 10.0  # ...and reconnects when the reply does not come this soon


async def listen(
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
    channel = Keys(prefix).wake  # a bad prefix raises here, once, not on every reconnect
    wanted = set(queues)

    def heard(data: str) -> None:
        if data in wanted:
            wake()

    await _listen_redis(url, channel, heard, wake, stopping)


async def listen_done(
    url: str, prefix: str, finished: Finished, stopping: Callable[[], bool]
) -> None:
    """SUBSCRIBE to ``P:done``, where scripts that finish jobs (completed, dead,
    discarded, cancelled) publish the finished ids, comma-separated, once per call; as
    ``listen_done``, with ``listen``'s reconnects (a cluster's PUBLISH reaches
    every node). Runs until ``stopping()`` or cancelled."""
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
    (re)subscribe; see ``listen`` for reconnects, ACLs and clusters."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import NoPermissionError

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


async def take_turns(
    url: str, prefix: str, queues: Sequence[str], worker_id: str, turn: TurnState,
    wake: Wake, stopping: Stopping,
) -> None:
    """Redis: while idle, take the queue set's turn key (``SET NX``), else wait on its relay
    list; hold it (renewing it, calling ``wake()`` on getting it) until a claim fills the
    worker, then delete it and push a relay token. Reconnects with backoff."""
    from redis.exceptions import NoPermissionError

    from leaseq.backends.redis.driver import SideUrl, close_side_client
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
