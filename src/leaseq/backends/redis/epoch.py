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

The script also says when the server is a replica. Behind Sentinel (``primary=True``)
that refuses the connection with ``NotPrimary`` (design §64): the Sentinels named a
server that is no longer the primary, and its reads would be stale. A plain ``redis://``
URL may name a replica on purpose (a read-only dashboard), so there it is accepted.
"""

from __future__ import annotations

from typing import Any

from redis import exceptions

from leaseq.backends._sql.epoch import MAX_EPOCH, SHIFT
from leaseq.backends.redis.keys import Keys
from leaseq.backends.redis.lua import SCRIPTS
from leaseq.backends.redis.sentinel import NotPrimary

SCRIPT = SCRIPTS["epoch"]
REPLICA = -1
"""The epoch the script answers on a replica (``{"replica", -1}``)."""


def refuse_replica(conn: Any, reply: Any) -> None:
    """Raises ``NotPrimary`` when ``reply`` (the script's) comes from a replica."""
    if isinstance(reply, list) and len(reply) == 2 and reply[1] == REPLICA:
        raise NotPrimary(
            f"Redis at {conn.host}:{conn.port} is a replica, not the primary (a failover "
            "under way, or a Sentinel that has not seen it yet); the Sentinels are asked "
            "again"
        )


class Hook:
    """``redis_connect_func`` for sync connections. ``handshake``: also run the
    connection's own ``on_connect`` (AUTH, SELECT, ...), which the hook replaces, except
    under a sync ``RedisCluster``, which runs it first and calls the hook after.
    ``primary``: refuse a replica (``check``)."""

    def __init__(self, keys: Keys, handshake: bool = True, primary: bool = False) -> None:
        self.args = (2, keys.epoch, keys.ids, SHIFT, MAX_EPOCH)
        self.handshake = handshake
        self.primary = primary

    def __call__(self, conn: Any) -> None:
        if self.handshake:
            conn.on_connect()
        self.check(conn)

    def check(self, conn: Any) -> None:
        """Runs the script on ``conn``; with ``primary``, raises ``NotPrimary`` when its
        server is a replica. A Sentinel pool also calls it on a connection in use, about
        once a second (``sentinel.CONFIRM_EVERY``)."""
        try:
            conn.send_command("EVALSHA", SCRIPT.sha, *self.args)
            try:
                reply = conn.read_response()
            except exceptions.NoScriptError:
                conn.send_command("EVAL", SCRIPT.text, *self.args)
                reply = conn.read_response()
        except (exceptions.MovedError, exceptions.AskError):
            return  # a cluster node that does not hold the counter
        if self.primary:
            refuse_replica(conn, reply)


class AsyncHook:
    """``Hook`` for asyncio connections, always with the handshake: the async cluster
    passes the hook to its connections as it is. redis-py awaits a hook only when
    ``asyncio.iscoroutinefunction`` says so, which a callable object's ``__call__`` does
    not: the hook to hand it is the bound method ``connect``."""

    def __init__(self, keys: Keys, primary: bool = False) -> None:
        self.args = Hook(keys).args
        self.primary = primary

    async def connect(self, conn: Any) -> None:
        """The ``redis_connect_func``: the handshake, then ``check``."""
        await conn.on_connect()
        await self.check(conn)

    async def check(self, conn: Any) -> None:
        """See ``Hook.check``."""
        try:
            await conn.send_command("EVALSHA", SCRIPT.sha, *self.args)
            try:
                reply = await conn.read_response()
            except exceptions.NoScriptError:
                await conn.send_command("EVAL", SCRIPT.text, *self.args)
                reply = await conn.read_response()
        except (exceptions.MovedError, exceptions.AskError):
            return
        if self.primary:
            refuse_replica(conn, reply)
