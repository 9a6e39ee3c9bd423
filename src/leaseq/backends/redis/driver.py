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
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis import exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from leaseq._core.job import JobState
from leaseq._core.settings import Settings
from leaseq.backends.base import FailItem, NewJob, PeekState
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


class RedisBackend:
    """Redis behind the backend contract (see ``backends.base``).

    Each method hands a plan to the runner and returns what the runner returns: a value
    from a ``SyncRunner``, an awaitable from an ``AsyncRunner``. So one class serves as
    both ``Backend`` and ``AsyncBackend``.
    """

    name = "redis"
    supports_transactions = False

    def __init__(self, ops: RedisOps, runner: Any) -> None:
        self.ops = ops
        self.runner = runner

    def migrate(self) -> Any:
        return self.runner.run(self.ops.migrate, idempotent=True)

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = ()
    ) -> Any:
        return self.runner.run(lambda: self.ops.enqueue(jobs, conn, capped))

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0,
    ) -> Any:
        return self.runner.run(
            lambda: self.ops.claim(queues, worker_id, lease, limit, default_lease),
            idempotent=True,
        )

    def renew(self, job_id: int, token: int, extend: float) -> Any:
        return self.runner.run(lambda: self.ops.renew(job_id, token, extend), idempotent=True)

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> Any:
        return self.runner.run(lambda: self.ops.complete(job_id, token, result, conn),
                               idempotent=True)

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> Any:
        return self.runner.run(lambda: self.ops.complete_many(items), idempotent=True)

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Any:
        return self.runner.run(lambda: self.ops.renew_many(items), idempotent=True)

    def fail(self, job_id: int, token: int, error: str | None, delay: float) -> Any:
        return self.runner.run(lambda: self.ops.fail(job_id, token, error, delay))

    def fail_many(self, items: Sequence[FailItem]) -> Any:
        return self.runner.run(lambda: self.ops.fail_many(items))

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None
    ) -> Any:
        return self.runner.run(lambda: self.ops.release(job_id, token, delay, priority))

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None
    ) -> Any:
        return self.runner.run(lambda: self.ops.bury(job_id, token, reason, priority))

    def kick(self, queue: str, limit: int) -> Any:
        return self.runner.run(lambda: self.ops.kick(queue, limit))

    def retry(self, job_id: int) -> Any:
        return self.runner.run(lambda: self.ops.retry(job_id))

    def discard(self, job_id: int, reason: str | None) -> Any:
        return self.runner.run(lambda: self.ops.discard(job_id, reason))

    def cancel(self, job_id: int) -> Any:
        return self.runner.run(lambda: self.ops.cancel(job_id))

    def get(self, job_id: int) -> Any:
        return self.runner.run(lambda: self.ops.get(job_id), idempotent=True)

    def stats(self) -> Any:
        return self.runner.run(self.ops.stats, idempotent=True)

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int
    ) -> Any:
        return self.runner.run(lambda: self.ops.list_jobs(queue, state, limit, after),
                               idempotent=True)

    def peek(self, queue: str, state: PeekState, limit: int) -> Any:
        return self.runner.run(lambda: self.ops.peek(queue, state, limit), idempotent=True)

    def configure_queue(self, queue: str, changes: Mapping[str, int | float | None]) -> Any:
        return self.runner.run(lambda: self.ops.configure_queue(queue, changes),
                               idempotent=True)

    def queue_configs(self) -> Any:
        return self.runner.run(self.ops.queue_configs, idempotent=True)

    def server_version(self) -> Any:
        return self.runner.run(self.ops.server_version, idempotent=True)

    def set_paused(self, queue: str, paused: bool) -> Any:
        return self.runner.run(lambda: self.ops.set_paused(queue, paused), idempotent=True)

    def paused(self) -> Any:
        return self.runner.run(self.ops.paused, idempotent=True)

    def reclaim(self, limit: int) -> Any:
        return self.runner.run(lambda: self.ops.reclaim(limit), idempotent=True)

    def prune(self, older_than: float) -> Any:
        return self.runner.run(lambda: self.ops.prune(older_than), idempotent=True)

    def drop(self) -> Any:
        """Not part of the contract: deletes this prefix's keys (``leaseq bench``)."""
        return self.runner.run(self.ops.drop, idempotent=True)

    def close(self) -> Any:
        return self.runner.close()


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
