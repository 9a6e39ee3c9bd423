"""Redis over redis-py: the plans of ``ops.py`` run by a sync and an async runner.

Each runner owns a blocking connection pool (``pool_size`` connections; a caller waits up
to ``connect_timeout`` for a free one), sends scripts with ``EVALSHA`` (and with ``EVAL``,
which caches the script again, when the server answers ``NOSCRIPT``), and translates
redis-py's exceptions into leaseq's error tree, once, here.

redis-py's own retries are off: after a dropped connection a script may or may not have
run. As on the SQL backends, only idempotent operations (reads, claim, renew, complete,
reclaim, prune, pause, configure) run again, as a whole plan on a fresh connection, up to
``RECONNECTS`` times over about 3 s (a restart, a failover); a repeated ``complete`` by
the same lease is a no-op that succeeds. Anything else surfaces as ``BackendUnavailable``:
its outcome is unknown, as with a lost SQL commit.

``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` for TLS) names a
Redis Cluster by one or more of its nodes (the first that answers serves): the runners
then hold a ``RedisCluster`` client, which learns the other nodes and routes each script
to the node of its keys' slot, and the plans split
cross-slot work into one script per slot (``ops.py``).

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/SERVICE[/db]`` names the
Sentinels of a primary with replicas (``sentinel.py``): the runners then hold redis-py's
``master_for`` client, whose new connections ask the Sentinels for the current primary,
so a failover is followed by the same reconnects as a restart. A server that is not the
primary (any more) is refused or left (``sentinel.NotPrimary``, a dropped connection to
the retry policy), and the pool confirms the primary about once a second, so no call is
served by a replaced primary for longer than that (design §64).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis import exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from leaseq._core import redact
from leaseq._core.settings import Settings
from leaseq.backends import _sockets
from leaseq.backends._plans import REPEATABLE, PlanBackend, outcome_unknown
from leaseq.backends._retry import RECONNECTS, Tries
from leaseq.backends._urls import refuse_unknown
from leaseq.backends.redis import epoch
from leaseq.backends.redis.durability import (
    OPTIONS,
    Durability,
    Shortfall,
    check_version,
    split_options,
)
from leaseq.backends.redis.keys import Keys
from leaseq.backends.redis.lua import SCRIPTS
from leaseq.backends.redis.ops import Call, Plan, RedisOps
from leaseq.backends.redis.sentinel import SCHEMES as SENTINEL_SCHEMES
from leaseq.backends.redis.sentinel import (
    SENTINEL_AUTH,
    Target,
    aclose_sentinels,
    async_client,
    close_sentinels,
    sync_client,
    url_options,
)
from leaseq.backends.redis.sentinel import parse as sentinel_target
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseqError,
)

T = TypeVar("T")
PlanFactory = Callable[[], Plan[T]]
SOCKET_TIMEOUT = 15.0
"""Seconds a command may wait for its reply (``socket_timeout`` in the URL overrides it):
it ends a connection whose server went silent while its kernel still acknowledges (a
frozen server or proxy), which TCP's checks never notice. leaseq sends no blocking
commands and Redis refuses others' commands after ``busy-reply-threshold`` (5 s) of a
long script, so no reply legitimately takes this long."""
# What redis-py raises: RedisCluster's own errors (no node reachable, a slot without a
# node) are not RedisErrors.
FAILURES = (exceptions.RedisError, exceptions.RedisClusterException)
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def disconnected(exc: BaseException) -> bool:
    """True when ``exc`` says the connection to the server was lost (or the server is
    still loading its data after a restart); not for refused credentials or a pool with
    no free connection, which another attempt would not cure."""
    if isinstance(exc, (exceptions.ClusterDownError, exceptions.SlotNotCoveredError)):
        return True  # a cluster failing over: refused before anything ran
    return (
        isinstance(exc, (exceptions.ConnectionError, exceptions.TimeoutError))
        and not isinstance(exc, (exceptions.AuthenticationError,
                                 exceptions.AuthorizationError,
                                 exceptions.MaxConnectionsError))
        and "No connection available" not in str(exc)
    )


def translate(exc: BaseException, where: str) -> LeaseqError:
    """A redis-py exception as a leaseq error."""
    if isinstance(exc, LeaseqError):
        return exc
    text = str(exc)
    if isinstance(exc, (exceptions.AuthenticationError, exceptions.AuthorizationError)):
        return AuthenticationFailed(f"Redis at {where} refused the credentials: {text}")
    if isinstance(exc, (exceptions.ConnectionError, exceptions.TimeoutError,
                        exceptions.ClusterDownError, exceptions.RedisClusterException)):
        return BackendUnavailable(f"Redis at {where} is unavailable: {text}")
    if isinstance(exc, exceptions.ReadOnlyError):
        return BackendUnavailable(
            f"Redis at {where} is a read-only replica ({text}); point leaseq at the primary"
        )
    if isinstance(exc, exceptions.OutOfMemoryError) or "OOM command not allowed" in text:
        return BackendError(f"Redis at {where} is out of memory; nothing was written ({text})")
    if isinstance(exc, (exceptions.MovedError, exceptions.AskError)) or (
            "hash to the same slot" in text):
        return ConfigurationError(
            f"Redis at {where} is a Redis Cluster node ({text}); name the cluster with a "
            "redis+cluster:// URL"
        )
    if "DB index is out of range" in text:
        return ConfigurationError(f"Redis at {where}: {text}")
    return BackendError(f"Redis at {where} failed: {text}")


def failed(exc: BaseException, where: str, idempotent: bool) -> LeaseqError:
    """``exc`` translated; when the connection dropped under an operation that is not
    repeated (every one of them writes: reads are repeatable), an error that says the
    write's outcome is unknown."""
    error = translate(exc, where)
    return error if idempotent or not disconnected(exc) else outcome_unknown(error)


def drive(plan: Plan[T], execute: Callable[[Call], Any]) -> T:
    """Runs a plan to completion with a synchronous ``execute``; a ``pause`` call sleeps
    instead (the plan waits for another producer) and gets None."""
    try:
        call = next(plan)
        while True:
            if call.pause:
                time.sleep(call.pause)
                call = plan.send(None)
                continue
            call = plan.send(execute(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(plan: Plan[T], execute: Callable[[Call], Awaitable[Any]]) -> T:
    """Runs a plan to completion with an async ``execute``; see ``drive``."""
    try:
        call = next(plan)
        while True:
            if call.pause:
                await asyncio.sleep(call.pause)
                call = plan.send(None)
                continue
            call = plan.send(await execute(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def pool_options(settings: Settings, tcp: dict[str, str] | None = None) -> dict[str, Any]:
    """redis-py client options; ``tcp``: the URL's ``_sockets.NAMES`` overrides."""
    return {
        "max_connections": settings.pool_size,
        "timeout": settings.connect_timeout,  # wait for a free pooled connection
        "socket_connect_timeout": settings.connect_timeout,
        "decode_responses": True,
        # Strings that are not valid UTF-8 (lone surrogates in a unique key or an error)
        # round-trip as they do on the memory backend instead of failing to encode.
        "encoding_errors": "surrogatepass",
        "retry": Retry(NoBackoff(), 0),
        # Dead-connection detection (_sockets, design §37); options in the URL win.
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_keepalive": True,
        "socket_keepalive_options": _sockets.options(tcp),
    }


class SyncRunner:
    """Runs plans on a ``redis.Redis`` client, or with ``seeds`` (``cluster_urls``) a
    ``RedisCluster`` (one blocking pool of ``pool_size`` connections per node), or with
    ``sentinel`` a client on the primary the Sentinels name."""

    client: Any

    def __init__(self, url: str, where: str, settings: Settings,
                 seeds: list[str] | None = None, sentinel: Target | None = None,
                 durability: Durability | None = None,
                 tcp: dict[str, str] | None = None) -> None:
        self.where = where
        self.durability = durability
        self.pool: redis.BlockingConnectionPool | None = None
        self.sentinels: Any = None
        keys = Keys(settings.table_prefix)
        options = {**pool_options(settings, tcp), "redis_connect_func": epoch.Hook(keys)}
        if sentinel is not None:
            # The hook refuses a replica, and the pool runs its check about once a second.
            hook = epoch.Hook(keys, primary=True)
            options["redis_connect_func"] = hook
            self.client, self.sentinels = sync_client(sentinel, options, hook.check)
            self.pool = self.client.connection_pool
            return
        if seeds is not None:
            # The sync cluster client runs the handshake itself, then the hook.
            options["redis_connect_func"] = epoch.Hook(keys, handshake=False)
            self.client = redis.cluster.RedisCluster.from_url(
                seeds[0], startup_nodes=seed_nodes(seeds, redis.cluster.ClusterNode),
                connection_pool_class=redis.BlockingConnectionPool, **options,
            )
            return
        self.pool = redis.BlockingConnectionPool.from_url(url, **options)
        self.client = redis.Redis(connection_pool=self.pool)

    def run(self, factory: PlanFactory[T], idempotent: bool = False) -> T:
        tries = Tries()
        while True:
            try:
                if self.durability is None:
                    return drive(factory(), self.execute)
                return self.run_waited(factory, self.durability)
            except LeaseqError:
                raise
            except FAILURES as exc:
                # The one policy (backends/_retry.py); redis-py retries nothing itself.
                pause = tries.after(dropped=disconnected(exc), idempotent=idempotent)
                if pause is None:
                    raise failed(exc, self.where, idempotent) from exc
                time.sleep(pause.seconds)

    def command(self, *args: Any) -> Any:
        return self.client.execute_command(*args)

    def execute(self, call: Call) -> Any:
        if call.command:
            try:
                return self.command(call.name, *call.args)
            except exceptions.ResponseError as exc:
                if call.tolerate:
                    return exc
                raise
        script = SCRIPTS[call.name]
        args = (script.sha, len(call.keys), *call.keys, *call.args)
        try:
            return self.command("EVALSHA", *args)
        except exceptions.NoScriptError:
            # Not run: the server never saw this script, or forgot it (restart, flush).
            # EVAL sends the text and caches it in one step: a SCRIPT LOAD then EVALSHA
            # fails again when a flush lands in between (seen in a soak, issue 23).
            return self.command("EVAL", script.text, *args[1:])

    def run_waited(self, factory: PlanFactory[T], durability: Durability) -> T:
        """A plan whose writes are each followed by ``WAIT`` on their connection
        (``durability.py``); ``NotReplicated`` once it has run, when some fell short."""
        short: list[Shortfall] = []
        value = drive(factory(), lambda call: self.execute_waited(call, durability, short))
        if short:
            raise durability.error(short, value)
        return value

    def execute_waited(self, call: Call, durability: Durability,
                       short: list[Shortfall]) -> Any:
        if not durability.waits(call):
            return self.execute(call)
        first, again = written(call)
        for _ in range(RECONNECTS):
            pipe, node = self.pipeline(call)
            pipe.execute_command(*first)
            pipe.execute_command(*durability.command())
            reply, waited = pipe.execute(raise_on_error=False)
            if isinstance(reply, exceptions.NoScriptError) and again is not None:
                # Not run; EVAL runs the script and registers it for the next EVALSHA.
                first, again = again, None
                continue
            if isinstance(reply, (exceptions.MovedError, exceptions.AskError)):
                # Not run: the slot moved (a cluster failing over); learn where it went.
                self.client.nodes_manager.initialize()
                continue
            return settle(call, reply, waited, durability, short, node)
        raise reply

    def pipeline(self, call: Call) -> tuple[Any, str]:
        """A pipeline on one connection to the server (on a cluster, the node) that
        owns the keys ``call`` writes, and where that is."""
        if not isinstance(self.client, redis.cluster.RedisCluster):
            return self.client.pipeline(transaction=False), self.where
        node = self.client.get_node_from_key(first_key(call))  # type: ignore[no-untyped-call]
        pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
        return pipe, str(node.name)

    def drop(self, pattern: str) -> int:
        """Deletes the keys matching ``pattern`` on every primary (``drop`` on a
        cluster, where a SCAN cursor belongs to one node)."""
        try:
            keys = list(self.client.scan_iter(match=pattern, count=1000))
            for start in range(0, len(keys), 1000):
                self.client.unlink(*keys[start:start + 1000])
        except FAILURES as exc:
            raise translate(exc, self.where) from exc
        return len(keys)

    def close(self) -> None:
        self.client.close()
        if self.pool is not None:
            self.pool.disconnect()
        if self.sentinels is not None:
            close_sentinels(self.sentinels)


class AsyncRunner:
    """Runs plans on a ``redis.asyncio.Redis`` client, or with ``seeds``
    (``cluster_urls``) a ``redis.asyncio.cluster.RedisCluster``, or with ``sentinel`` a
    client on the primary the Sentinels name. The server checks run before the first
    plan, inside the caller's event loop."""

    client: Any

    def __init__(self, url: str, where: str, settings: Settings, ops: RedisOps,
                 seeds: list[str] | None = None, sentinel: Target | None = None,
                 durability: Durability | None = None,
                 tcp: dict[str, str] | None = None) -> None:
        self.where = where
        self.ops = ops
        self.durability = durability
        self.checked = False
        self.pool: redis.asyncio.BlockingConnectionPool | None = None
        self.slots: asyncio.Semaphore | None = None
        self.wait = settings.connect_timeout
        self.sentinels: Any = None
        hook = epoch.AsyncHook(Keys(settings.table_prefix), primary=sentinel is not None)
        options = {**pool_options(settings, tcp), "redis_connect_func": hook.connect}
        if sentinel is not None:
            self.client, self.sentinels = async_client(sentinel, options, hook.check)
            self.pool = self.client.connection_pool
            return
        if seeds is not None:
            del options["timeout"]
            hook = options.pop("redis_connect_func")
            self.client = redis.asyncio.cluster.RedisCluster.from_url(
                seeds[0], startup_nodes=seed_nodes(seeds, redis.asyncio.cluster.ClusterNode),
                **options,
            )
            # The async cluster client takes no connection hook: it goes where its nodes'
            # connections read their options (the client's, shared with the nodes it
            # learns, and each seed's own copy).
            self.client.connection_kwargs["redis_connect_func"] = hook
            for node in self.client.nodes_manager.startup_nodes.values():
                node.connection_kwargs["redis_connect_func"] = hook
            # The cluster client fails at once when a node's pool is used up; waiting up
            # to connect_timeout for a free slot here makes it block as the pool does.
            self.slots = asyncio.Semaphore(settings.pool_size)
            return
        self.pool = redis.asyncio.BlockingConnectionPool.from_url(url, **options)
        self.client = redis.asyncio.Redis(connection_pool=self.pool)

    def run(self, factory: PlanFactory[T], idempotent: bool = False) -> Awaitable[T]:
        return self._run(factory, idempotent)

    async def _run(self, factory: PlanFactory[T], idempotent: bool) -> T:
        tries = Tries()
        while True:
            try:
                if not self.checked:
                    await adrive(self.ops.startup(), self.execute)
                    check_version(self.durability, self.ops.version, self.where)
                    self.checked = True
                if self.durability is None:
                    return await adrive(factory(), self.execute)
                return await self.run_waited(factory, self.durability)
            except LeaseqError:
                raise
            except FAILURES as exc:
                pause = tries.after(dropped=disconnected(exc), idempotent=idempotent)
                if pause is None:
                    raise failed(exc, self.where, idempotent) from exc
                await asyncio.sleep(pause.seconds)

    async def take_slot(self, slots: asyncio.Semaphore) -> None:
        """One of the cluster client's ``pool_size`` slots, waiting up to
        ``connect_timeout`` for it as a blocking pool would."""
        try:
            await asyncio.wait_for(slots.acquire(), self.wait)
        except TimeoutError:
            raise BackendUnavailable(
                f"Redis at {self.where}: no free connection within {self.wait:g} s "
                "(pool_size)"
            ) from None

    async def command(self, *args: Any) -> Any:
        if self.slots is None:
            return await self.client.execute_command(*args)
        await self.take_slot(self.slots)
        try:
            return await self.client.execute_command(*args)
        finally:
            self.slots.release()

    async def execute(self, call: Call) -> Any:
        if call.command:
            try:
                return await self.command(call.name, *call.args)
            except exceptions.ResponseError as exc:
                if call.tolerate:
                    return exc
                raise
        script = SCRIPTS[call.name]
        args = (script.sha, len(call.keys), *call.keys, *call.args)
        try:
            return await self.command("EVALSHA", *args)
        except exceptions.NoScriptError:  # as in the sync runner: EVAL, no window
            return await self.command("EVAL", script.text, *args[1:])

    async def run_waited(self, factory: PlanFactory[T], durability: Durability) -> T:
        """See ``SyncRunner.run_waited``."""
        short: list[Shortfall] = []

        def execute(call: Call) -> Awaitable[Any]:
            return self.execute_waited(call, durability, short)

        value = await adrive(factory(), execute)
        if short:
            raise durability.error(short, value)
        return value

    async def execute_waited(self, call: Call, durability: Durability,
                             short: list[Shortfall]) -> Any:
        if not durability.waits(call):
            return await self.execute(call)
        first, again = written(call)
        for _ in range(RECONNECTS):
            reply, waited, node = await self.pipelined(call, first, durability.command())
            if isinstance(reply, exceptions.NoScriptError) and again is not None:
                first, again = again, None
                continue
            if isinstance(reply, (exceptions.MovedError, exceptions.AskError)):
                await self.client.nodes_manager.initialize()
                continue
            return settle(call, reply, waited, durability, short, node)
        raise reply

    async def pipelined(self, call: Call, *commands: tuple[Any, ...]) -> list[Any]:
        """``commands`` in one round trip on one connection (on a cluster, of the node
        that owns the keys ``call`` writes), their replies (errors as replies) and where
        they ran."""
        slots = self.slots  # a cluster's only
        if slots is None:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return [*await pipe.execute(raise_on_error=False), self.where]
        node = self.client.get_node_from_key(first_key(call))
        if node is None:
            raise exceptions.SlotNotCoveredError(f"no node serves {first_key(call)!r}")
        sent = [redis.asyncio.cluster.PipelineCommand(i, *command)
                for i, command in enumerate(commands)]
        await self.take_slot(slots)
        try:
            await node.execute_pipeline(sent)
        finally:
            slots.release()
        return [*(command.result for command in sent), str(node.name)]

    async def drop(self, pattern: str) -> int:
        """Deletes the keys matching ``pattern`` on every primary."""
        try:
            keys = [key async for key in self.client.scan_iter(match=pattern, count=1000)]
            for start in range(0, len(keys), 1000):
                await self.client.unlink(*keys[start:start + 1000])
        except FAILURES as exc:
            raise translate(exc, self.where) from exc
        return len(keys)

    async def close(self) -> None:
        await self.client.aclose()
        if self.pool is not None:
            await self.pool.disconnect()
        if self.sentinels is not None:
            await aclose_sentinels(self.sentinels)


class RedisBackend(PlanBackend):
    """Redis behind the backend contract (see ``backends.base``): ``PlanBackend`` hands
    each plan of ``RedisOps`` to a sync or an async runner. Every script is one atomic
    step, so besides the shared repeatable operations a dropped connection may also repeat
    migrate, prune and drop."""

    name = "redis"
    supports_transactions = False
    repeatable = REPEATABLE | {"migrate", "prune", "drop"}

    def migrate(self) -> Any:
        return self.run("migrate", self.ops.migrate)

    def drop(self) -> Any:
        """Not part of the contract: deletes every key under this prefix (``leaseq
        bench`` and the tests clean up with it); on a cluster, every primary's."""
        if self.ops.cluster:
            return self.runner.drop(self.ops.k.pattern())
        return self.run("drop", self.ops.drop)


def written(call: Call) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
    """The command that makes ``call``'s write, and for a script the ``EVAL`` to send
    instead when the server does not know it (``NOSCRIPT``)."""
    if call.command:
        return (call.name, *call.args), None
    script = SCRIPTS[call.name]
    tail = (len(call.keys), *call.keys, *call.args)
    return ("EVALSHA", script.sha, *tail), ("EVAL", script.text, *tail)


def first_key(call: Call) -> Any:
    """A key ``call`` writes: on a cluster all of a call's keys share one slot."""
    return call.keys[0] if call.keys else call.args[0]


def settle(call: Call, reply: Any, waited: Any, durability: Durability,
           short: list[Shortfall], where: str) -> Any:
    """``call``'s reply once its ``WAIT`` came back; a shortfall joins ``short``."""
    if isinstance(reply, exceptions.ResponseError) and not call.tolerate:
        raise reply
    if isinstance(waited, exceptions.ResponseError):
        # WAIT sent to a replica, WAITAOF with appendonly off: a setup to change.
        raise ConfigurationError(f"{durability.command()[0]} failed: {waited}")
    if isinstance(waited, Exception):
        raise waited
    missing = durability.shortfall(waited)
    if missing is not None:
        short.append((*missing, where))
    return reply


def cluster_urls(url: str) -> list[str] | None:
    """For a ``redis+cluster://[user:password@]host[:port][,host[:port]...]`` URL
    (``rediss+cluster://`` for TLS), one ``redis://`` (``rediss://``) URL per node named,
    in order, with the same credentials and options; None for any other URL. A cluster
    has only database 0, so a URL naming another is refused."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower())
    if plain is None or not sep:
        return None
    # The query first: "host:7001?socket_timeout=5" has no "/" before it.
    rest, _, query = rest.partition("?")
    address, _, db = rest.partition("/")
    if db not in ("", "0"):
        raise ConfigurationError(
            f"Redis Cluster has only database 0; drop /{db} from {url.split('@')[-1]!r}"
        )
    user, at, hosts = address.rpartition("@")
    return [f"{plain}://{user}{at}{host}/" + (f"?{query}" if query else "")
            for host in hosts.split(",") if host]


class SideUrl:
    """What a connection of its own beside the pool (the pub/sub listeners, the idle
    workers' turn) needs from a leaseq Redis URL: the node URLs to try in turn (one, or a
    cluster's seeds), the Sentinel target, and the TCP options, with leaseq's own options
    (``wait_replicas``, keepalives) taken out: redis-py refuses them."""

    def __init__(self, url: str) -> None:
        url = split_options(url)[0]  # wait_replicas and co. concern writes only
        url, self.tcp = _sockets.split(url)
        self.nodes = cluster_urls(url) or [url]
        self.sentinel = sentinel_target(url)

    def socket_options(self) -> dict[str, Any]:
        """Keepalives for a connection that is idle most of the time: they find a dead
        network in ``_sockets.DETECTION`` seconds (design §37)."""
        return {"socket_keepalive": True,
                "socket_keepalive_options": _sockets.options(self.tcp)}

    def client(self, attempt: int, options: dict[str, Any]) -> tuple[Any, Any]:
        """An asyncio client (and the Sentinels behind it, or None) for the ``attempt``-th
        try: a Sentinel URL asks the Sentinels afresh each time, a cluster URL takes its
        nodes in turn (each speaks plain pub/sub and key commands of its own slots)."""
        if self.sentinel is not None:
            return async_client(self.sentinel, options)
        return redis.asyncio.Redis.from_url(self.nodes[attempt % len(self.nodes)],
                                            **options), None


async def close_side_client(client: Any, sentinels: Any) -> None:
    """Closes a ``SideUrl.client``: older redis-py leaves a Sentinel client's pool open."""
    await client.aclose()
    if sentinels is not None:
        await client.connection_pool.disconnect()
        await aclose_sentinels(sentinels)


def seed_nodes(urls: list[str], node: Callable[[str, int], Any]) -> list[Any]:
    """``node(host, port)`` for each URL but the first (which ``from_url`` reads)."""
    out = []
    for url in urls[1:]:
        parts = urlsplit(url)
        out.append(node(parts.hostname or "localhost", parts.port or 6379))
    return out


def create(url: str, settings: Settings, use_async: bool) -> RedisBackend:
    """A backend for ``redis://[user:password@]host[:port][/db]`` (or ``rediss://`` for
    TLS), or ``redis+cluster://[user:password@]host[:port][,host[:port]...]`` for a Redis
    Cluster that has nodes there (``rediss+cluster://`` for TLS), or
    ``redis+sentinel://[user:password@]host[:port][,host[:port]...]/SERVICE[/db]`` for the
    primary that those Sentinels name (``sentinel.py``). The sync client checks the
    server at once, so a wrong URL fails here with its real reason; the async one on its
    first call. ``wait_replicas``, ``wait_timeout`` and ``wait_aof`` in the query of any
    of them make every write wait for replicas (``durability.py``)."""
    accepted = {*url_options(), *OPTIONS, *_sockets.NAMES}
    if url.partition("://")[0].lower() in SENTINEL_SCHEMES:
        accepted.update(SENTINEL_AUTH)
    # redis-py fails on an unknown name with a TypeError at the first connect, and a
    # cluster client drops it unread.
    refuse_unknown(url, accepted, url.partition("://")[0].lower() + "://")
    url, durability = split_options(url)
    # keepalives_idle= and the other _sockets.NAMES are leaseq's: redis-py refuses them.
    url, tcp = _sockets.split(url)
    target = sentinel_target(url)
    where = target.where if target is not None else redact.where(url)
    seeds = cluster_urls(url)
    ops = RedisOps(settings.table_prefix, where, seeds is not None)
    try:
        if use_async:
            return RedisBackend(ops, AsyncRunner(url, where, settings, ops, seeds, target,
                                                 durability, tcp))
        runner = SyncRunner(url, where, settings, seeds, target, durability, tcp)
    except (ValueError, TypeError) as exc:  # redis-py's verdict on a malformed URL
        raise ConfigurationError(f"bad Redis URL {where!r}: {exc}") from exc
    except FAILURES as exc:  # RedisCluster reads the topology at once
        raise translate(exc, where) from exc
    try:
        runner.run(ops.startup)
        check_version(durability, ops.version, where)
    except BaseException:
        runner.close()
        raise
    return RedisBackend(ops, runner)
