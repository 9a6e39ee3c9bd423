"""Job ids that never repeat (design §59), the Redis half: every new connection runs
``scripts/epoch.lua`` once, before its first command, as redis-py's connect hook.

A Sentinel failover to a replica that had not received the last ``INCR``s of ``{P}:ids``
would hand those ids out again; the script compares the server's ``master_replid`` with
``{P}:epoch`` and, on a change, bumps the epoch and moves the counter up to
``epoch << 40`` (``leaseq.backends._sql.epoch`` has the arithmetic). The hook runs on
every reconnect redis-py makes, those it makes by itself (a pooled connection found
closed at checkout) included, which no check in the runner would see. On a cluster the
hook runs on connections to every node; only the master of ``{P}``'s slot, which holds
the counter, runs the script, the others answer MOVED.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from redis import exceptions

from leaseq.backends._sql.epoch import MAX_EPOCH, SHIFT
from leaseq.backends.redis.keys import Keys
from leaseq.backends.redis.lua import SCRIPTS

SCRIPT = SCRIPTS["epoch"]


class Hook:
    """``redis_connect_func`` for sync connections. ``handshake``: also run the
    connection's own ``on_connect`` (AUTH, SELECT, ...), which the hook replaces, except
    under a sync ``RedisCluster``, which runs it first and calls the hook after."""

    def __init__(self, keys: Keys, handshake: bool = True) -> None:
        self.args = (2, keys.epoch, keys.ids, SHIFT, MAX_EPOCH)
        self.handshake = handshake

    def __call__(self, conn: Any) -> None:
        if self.handshake:
            conn.on_connect()
        try:
            conn.send_command("EVALSHA", SCRIPT.sha, *self.args)
            try:
                conn.read_response()
            except exceptions.NoScriptError:
                conn.send_command("EVAL", SCRIPT.text, *self.args)
                conn.read_response()
        except (exceptions.MovedError, exceptions.AskError):
            pass  # a cluster node that does not hold the counter


def async_hook(keys: Keys) -> Callable[[Any], Awaitable[None]]:
    """``Hook`` for asyncio connections, as a coroutine function (redis-py awaits the
    hook only when ``asyncio.iscoroutinefunction`` says so, which a callable object's
    ``__call__`` does not), always with the handshake: the async cluster passes the hook
    to its connections as it is."""
    args = Hook(keys).args

    async def hook(conn: Any) -> None:
        await conn.on_connect()
        try:
            await conn.send_command("EVALSHA", SCRIPT.sha, *args)
            try:
                await conn.read_response()
            except exceptions.NoScriptError:
                await conn.send_command("EVAL", SCRIPT.text, *args)
                await conn.read_response()
        except (exceptions.MovedError, exceptions.AskError):
            pass

    return hook
