"""Runners: carry out a plan in one transaction, retrying the whole transaction when the
database reports a transient conflict (deadlock, lock wait timeout, busy), and translating
driver errors into leaseq's error tree exactly once, here.

A dialect's driver module subclasses ``SyncRunner`` or ``AsyncRunner`` and fills in how to
connect, begin, execute one ``Stmt``, commit and classify an exception. ``SqlBackend``
works over either kind: it returns whatever ``run`` returns, a value or an awaitable.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from leaseq.backends._plans import outcome_unknown
from leaseq.backends._retry import Pause, Tries
from leaseq.backends._sql.plan import Plan, PlanFactory, Result, Stmt, drive
from leaseq.errors import BackendError, BackendUnavailable, LeaseqError

T = TypeVar("T")
C = TypeVar("C")


def next_try(runner: SyncRunner | AsyncRunner, tries: Tries, exc: BaseException,
             idempotent: bool) -> Pause | None:
    """The one policy (``backends/_retry.py``) over the driver's verdict on ``exc``. Only
    an operation that is safe to repeat (a read, a claim, a fenced ack or renewal) is
    retried when the connection dropped mid-call: a plain enqueue might have committed,
    and repeating it would duplicate the job. One the server refused outright
    (unapplied) changed nothing and is repeated too."""
    return tries.after(conflict=runner.retryable(exc), dropped=runner.disconnected(exc),
                       unapplied=runner.unapplied(exc), idempotent=idempotent)


def failed(runner: SyncRunner | AsyncRunner, exc: BaseException,
           unrepeated_write: bool) -> LeaseqError:
    """``exc`` translated by ``runner``; for a write not repeated whose connection
    dropped, an error that says its outcome is unknown."""
    error = runner.translate(exc)
    return outcome_unknown(error) if unrepeated_write and runner.disconnected(exc) else error


class SyncRunner(ABC):
    """Runs plans with a synchronous driver: retries and error translation."""

    def run(
        self,
        factory: PlanFactory[T],
        *,
        write: bool = True,
        conn: Any = None,
        after: Callable[[T], Any] | None = None,
        single: bool = False,
        idempotent: bool = False,
    ) -> Any:
        if conn is not None:
            try:
                result = self.run_in_caller(conn, factory())
            except LeaseqError:
                raise
            except Exception as exc:
                raise self.translate(exc) from exc
        else:
            result = self.run_retrying(factory, write, single, idempotent)
        return after(result) if after else result

    def run_retrying(
        self, factory: PlanFactory[T], write: bool, single: bool = False,
        idempotent: bool = False,
    ) -> T:
        tries = Tries()
        while True:
            try:
                return self.run_once(factory(), write, single)
            except LeaseqError:
                raise
            except Exception as exc:
                pause = next_try(self, tries, exc, idempotent)
                if pause is None:
                    raise failed(self, exc, write and not idempotent) from exc
                if pause.reconnect:
                    self.recover()
                time.sleep(pause.seconds)

    def disconnected(self, exc: BaseException) -> bool:
        """True when ``exc`` says the connection to the server was lost."""
        return False

    def unapplied(self, exc: BaseException) -> bool:
        """True when the server refused the transaction before changing anything (a
        standby's read-only refusal): any operation may be repeated after ``recover``."""
        return False

    def recover(self) -> None:  # noqa: B027 - a no-op unless the driver pools connections
        """Drops pooled connections that a lost server took with it."""

    @abstractmethod
    def run_once(self, plan: Plan[T], write: bool, single: bool = False) -> T:
        """Runs the plan in one transaction of a pooled connection; ``single`` plans are
        one statement, which a driver may run without an explicit transaction."""

    @abstractmethod
    def run_in_caller(self, conn: Any, plan: Plan[T]) -> T:
        """Runs the plan inside the caller's own connection and transaction."""

    @abstractmethod
    def retryable(self, exc: BaseException) -> bool: ...

    @abstractmethod
    def translate(self, exc: BaseException) -> LeaseqError: ...

    @abstractmethod
    def migrate(self) -> list[str]:
        """Applies the migrations this database lacks; returns their names
        (``0001_init``, ...), [] when it was up to date."""

    @abstractmethod
    def close(self) -> None: ...


class PooledSyncRunner(SyncRunner, Generic[C]):
    """A sync runner over leaseq's own ``Pool`` (drivers without a pool of their own)."""

    def __init__(self, pool: Pool[C]) -> None:
        self.pool = pool

    def run_once(self, plan: Plan[T], write: bool, single: bool = False) -> T:
        conn = self.pool.get()
        broken = False
        try:
            self.before(conn, write)
            self.begin(conn, write)
            result = drive(plan, lambda stmt: self.execute(conn, stmt))
            self.commit(conn)
            return result
        except BaseException as exc:
            broken = not self.rollback(conn) or self.is_disconnect(exc)
            raise
        finally:
            self.pool.put(conn, broken=broken)

    def before(self, conn: C, write: bool) -> None:
        """Runs on each checked-out connection before the plan (MySQL: compares the
        server with the stored epoch before a connection's first write, design §59)."""

    def rollback(self, conn: C) -> bool:
        """Rolls back; False when the connection is unusable."""
        try:
            self.do_rollback(conn)
            return True
        except Exception:
            return False

    @abstractmethod
    def begin(self, conn: C, write: bool) -> None: ...

    @abstractmethod
    def execute(self, conn: C, stmt: Stmt) -> Result: ...

    @abstractmethod
    def commit(self, conn: C) -> None: ...

    @abstractmethod
    def do_rollback(self, conn: C) -> None: ...

    @abstractmethod
    def is_disconnect(self, exc: BaseException) -> bool: ...

    def close(self) -> None:
        self.pool.close()


class AsyncRunner(ABC):
    """Runs plans with an asyncio driver. Subclasses say how to open their pool
    (``open_pool``); ``pool()`` opens it once, on first use."""

    _pool: Any = None
    _opening: asyncio.Lock | None = None

    async def pool(self) -> Any:
        """The connection pool, opened by the first caller: an asyncio driver's pool
        belongs to the event loop that made it, which a client built outside one (or
        before the worker's) does not have yet."""
        if self._pool is None:
            self._opening = self._opening or asyncio.Lock()
            async with self._opening:
                if self._pool is None:
                    self._pool = await self.open_pool()
        return self._pool

    @abstractmethod
    async def open_pool(self) -> Any:
        """Opens the pool, raising a leaseq error when the server cannot be reached."""

    def run(
        self,
        factory: PlanFactory[T],
        *,
        write: bool = True,
        conn: Any = None,
        after: Callable[[T], Any] | None = None,
        single: bool = False,
        idempotent: bool = False,
    ) -> Awaitable[Any]:
        return self._run(factory, write, conn, after, single, idempotent)

    async def _run(
        self, factory: PlanFactory[T], write: bool, conn: Any,
        after: Callable[[T], Any] | None, single: bool, idempotent: bool,
    ) -> Any:
        if conn is not None:
            try:
                result = await self.run_in_caller(conn, factory())
            except LeaseqError:
                raise
            except Exception as exc:
                raise self.translate(exc) from exc
        else:
            tries = Tries()
            while True:
                try:
                    result = await self.run_once(factory(), write, single)
                    break
                except LeaseqError:
                    raise
                except Exception as exc:
                    pause = next_try(self, tries, exc, idempotent)
                    if pause is None:
                        raise failed(self, exc, write and not idempotent) from exc
                    if pause.reconnect:
                        await self.recover()
                    await asyncio.sleep(pause.seconds)
        return after(result) if after else result

    @staticmethod
    async def adrive(plan: Plan[T], execute: Callable[[Stmt], Awaitable[Result]]) -> T:
        try:
            stmt = next(plan)
            while True:
                stmt = plan.send(await execute(stmt))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    @abstractmethod
    async def run_once(self, plan: Plan[T], write: bool, single: bool = False) -> T: ...

    def disconnected(self, exc: BaseException) -> bool:
        """True when ``exc`` says the connection to the server was lost."""
        return False

    def unapplied(self, exc: BaseException) -> bool:
        """See ``SyncRunner.unapplied``."""
        return False

    async def recover(self) -> None:  # noqa: B027 - see SyncRunner.recover
        """Drops pooled connections that a lost server took with it."""

    @abstractmethod
    async def run_in_caller(self, conn: Any, plan: Plan[T]) -> T: ...

    @abstractmethod
    def retryable(self, exc: BaseException) -> bool: ...

    @abstractmethod
    def translate(self, exc: BaseException) -> LeaseqError: ...

    @abstractmethod
    async def migrate(self) -> list[str]: ...

    @abstractmethod
    async def close(self) -> None: ...


class ThreadedAsyncRunner:
    """Async face of a sync runner: each plan runs whole in a worker thread. Used for
    SQLite, where the driver is in-process and one thread hop per operation is cheaper
    than one per statement."""

    def __init__(self, sync: SyncRunner) -> None:
        self.sync = sync

    def run(
        self,
        factory: PlanFactory[T],
        *,
        write: bool = True,
        conn: Any = None,
        after: Callable[[T], Any] | None = None,
        single: bool = False,
        idempotent: bool = False,
    ) -> Awaitable[Any]:
        return asyncio.to_thread(self.sync.run, factory, write=write, conn=conn, after=after,
                                 single=single, idempotent=idempotent)

    async def migrate(self) -> list[str]:
        return await asyncio.to_thread(self.sync.migrate)

    async def close(self) -> None:
        self.sync.close()


class Pool(Generic[C]):
    """A small blocking LIFO pool for drivers that have none (sqlite3, PyMySQL).

    LIFO keeps the hot connections hot and lets idle ones age out of the server's
    timeouts unused; connections are opened on demand up to ``size``.
    """

    def __init__(
        self, create: Callable[[], C], close: Callable[[C], None], size: int, timeout: float
    ) -> None:
        self._create, self._close = create, close
        self._size, self._timeout = size, timeout
        self._idle: list[C] = []
        self._count = 0
        self._closed = False
        self._cond = threading.Condition()

    def get(self) -> C:
        deadline = time.monotonic() + self._timeout
        with self._cond:
            while True:
                if self._closed:
                    raise BackendError("this leaseq client is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self._size:
                    self._count += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BackendUnavailable(
                        f"no free connection after {self._timeout:g} s "
                        f"(pool_size={self._size}); raise pool_size or hold jobs for less"
                    )
                self._cond.wait(left)
        try:
            return self._create()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def put(self, conn: C, broken: bool = False) -> None:
        with self._cond:
            if broken or self._closed:
                self._count -= 1
            else:
                self._idle.append(conn)
            self._cond.notify()
        if broken or self._closed:
            self._quiet_close(conn)

    def discard_idle(self) -> None:
        """Closes the idle connections (after a server restart they are all dead)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            self._quiet_close(conn)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            self._quiet_close(conn)

    def _quiet_close(self, conn: C) -> None:
        with contextlib.suppress(Exception):  # one that cannot even close is already gone
            self._close(conn)
