"""Redis over redis-py: the plans of ``ops.py`` run by a sync and an async runner.

Each runner owns a blocking connection pool (``pool_size`` connections; a caller waits up
to ``connect_timeout`` for a free one), sends scripts with ``EVALSHA`` and registers them
with ``SCRIPT LOAD`` when the server answers ``NOSCRIPT``, and translates redis-py's
exceptions into leaseq's error tree, once, here.

redis-py's own retries are off: after a dropped connection a script may or may not have
run. As on the SQL backends, only idempotent operations (reads, claim, renew, complete,
reclaim, prune, pause, configure) run again, as a whole plan on a fresh connection, up to
``RECONNECTS`` times over about 3 s (a restart, a failover); a repeated ``complete`` by
the same lease is a no-op that succeeds. Anything else surfaces as ``BackendUnavailable``:
its outcome is unknown, as with a lost SQL commit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis import exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from leaseq._core.settings import Settings
from leaseq.backends._plans import REPEATABLE, PlanBackend
from leaseq.backends.redis.lua import SCRIPTS
from leaseq.backends.redis.ops import Call, Plan, RedisOps
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseqError,
)

T = TypeVar("T")
PlanFactory = Callable[[], Plan[T]]
RECONNECTS = 6  # pauses of 50 ms doubling: about 3 s in all


def disconnected(exc: BaseException) -> bool:
    """True when ``exc`` says the connection to the server was lost (or the server is
    still loading its data after a restart); not for refused credentials or a pool with
    no free connection, which another attempt would not cure."""
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
    if isinstance(exc, (exceptions.ConnectionError, exceptions.TimeoutError)):
        return BackendUnavailable(f"Redis at {where} is unavailable: {text}")
    if isinstance(exc, exceptions.ReadOnlyError):
        return BackendUnavailable(
            f"Redis at {where} is a read-only replica ({text}); point leaseq at the primary"
        )
    if isinstance(exc, exceptions.OutOfMemoryError) or "OOM command not allowed" in text:
        return BackendError(f"Redis at {where} is out of memory; nothing was written ({text})")
    if "DB index is out of range" in text:
        return ConfigurationError(f"Redis at {where}: {text}")
    return BackendError(f"Redis at {where} failed: {text}")


def drive(plan: Plan[T], execute: Callable[[Call], Any]) -> T:
    """Runs a plan to completion with a synchronous ``execute``."""
    try:
        call = next(plan)
        while True:
            call = plan.send(execute(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(plan: Plan[T], execute: Callable[[Call], Awaitable[Any]]) -> T:
    """Runs a plan to completion with an async ``execute``."""
    try:
        call = next(plan)
        while True:
            call = plan.send(await execute(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def pool_options(settings: Settings) -> dict[str, Any]:
    return {
        "max_connections": settings.pool_size,
        "timeout": settings.connect_timeout,  # wait for a free pooled connection
        "socket_connect_timeout": settings.connect_timeout,
        "decode_responses": True,
        # Strings that are not valid UTF-8 (lone surrogates in a unique key or an error)
        # round-trip as they do on the memory backend instead of failing to encode.
        "encoding_errors": "surrogatepass",
        "retry": Retry(NoBackoff(), 0),
    }


class SyncRunner:
    """Runs plans on a ``redis.Redis`` client."""

    def __init__(self, url: str, where: str, settings: Settings) -> None:
        self.where = where
        self.pool = redis.BlockingConnectionPool.from_url(url, **pool_options(settings))
        self.client = redis.Redis(connection_pool=self.pool)

    def run(self, factory: PlanFactory[T], idempotent: bool = False) -> T:
        reconnects = 0
        while True:
            try:
                return drive(factory(), self.execute)
            except LeaseqError:
                raise
            except exceptions.RedisError as exc:
                if idempotent and reconnects < RECONNECTS and disconnected(exc):
                    reconnects += 1
                    time.sleep(0.05 * 2 ** (reconnects - 1))
                    continue
                raise translate(exc, self.where) from exc

    def command(self, *args: Any) -> Any:
        return self.client.execute_command(*args)  # type: ignore[no-untyped-call]

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
            self.command("SCRIPT LOAD", script.text)
            return self.command("EVALSHA", *args)

    def close(self) -> None:
        self.client.close()
        self.pool.disconnect()


class AsyncRunner:
    """Runs plans on a ``redis.asyncio.Redis`` client. The server checks run before the
    first plan, inside the caller's event loop."""

    def __init__(self, url: str, where: str, settings: Settings, ops: RedisOps) -> None:
        self.where = where
        self.ops = ops
        self.pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, **pool_options(settings)
        )
        self.client = redis.asyncio.Redis(connection_pool=self.pool)
        self.checked = False

    def run(self, factory: PlanFactory[T], idempotent: bool = False) -> Awaitable[T]:
        return self._run(factory, idempotent)

    async def _run(self, factory: PlanFactory[T], idempotent: bool) -> T:
        reconnects = 0
        while True:
            try:
                if not self.checked:
                    await adrive(self.ops.startup(), self.execute)
                    self.checked = True
                return await adrive(factory(), self.execute)
            except LeaseqError:
                raise
            except exceptions.RedisError as exc:
                if idempotent and reconnects < RECONNECTS and disconnected(exc):
                    reconnects += 1
                    await asyncio.sleep(0.05 * 2 ** (reconnects - 1))
                    continue
                raise translate(exc, self.where) from exc

    async def command(self, *args: Any) -> Any:
        return await self.client.execute_command(*args)  # type: ignore[no-untyped-call]

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
        except exceptions.NoScriptError:
            await self.command("SCRIPT LOAD", script.text)
            return await self.command("EVALSHA", *args)

    async def close(self) -> None:
        await self.client.aclose()
        await self.pool.disconnect()


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


def create(url: str, settings: Settings, use_async: bool) -> RedisBackend:
    """A backend for ``redis://[user:password@]host[:port][/db]`` (or ``rediss://`` for
    TLS). The sync client checks the server at once, so a wrong URL fails here with its
    real reason; the async one on its first call."""
    where = url.split("@")[-1]
    ops = RedisOps(settings.table_prefix, where)
    try:
        if use_async:
            return RedisBackend(ops, AsyncRunner(url, where, settings, ops))
        runner = SyncRunner(url, where, settings)
    except (ValueError, TypeError) as exc:  # redis-py's verdict on a malformed URL
        raise ConfigurationError(f"bad Redis URL {where!r}: {exc}") from exc
    try:
        runner.run(ops.startup)
    except BaseException:
        runner.close()
        raise
    return RedisBackend(ops, runner)
