"""Group commit: concurrent ``enqueue`` calls of one client share one transaction.

On PostgreSQL and MySQL every commit waits for a log flush, and on SQLite for the one write
lock; a web app whose request threads (or tasks) each enqueue one job pays that once per
job. Here the first caller writes at once, alone, exactly as without grouping; callers that
arrive while a write is in flight queue up, and when it ends all of them are written as the
next batch, one transaction, by one of them (a thread) or by a task of their own (asyncio).
Each caller returns after the commit of its own batch, with its own result or error.

A batch that fails as a whole is written again job by job, each in its own transaction, so
that one caller's ``QueueFull`` (or any error that belongs to one job) reaches that caller
only; a batch's transaction is all or nothing, so the first try left nothing behind. Errors
that say nothing about any one job (the database is unreachable, the tables are missing,
the client was closed) go to every caller of the batch as they are: after a lost
connection the commit's outcome is unknown, exactly as for a lone enqueue, and writing
again could enqueue a job twice.

Nothing here knows about a database: ``write`` is the client's own batch enqueue (which
also wakes the process's workers), called with a list of validated jobs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from leaseq._core.job import EnqueueResult
from leaseq._core.settings import Settings
from leaseq.backends.base import NewJob
from leaseq.backends.capabilities import Capabilities
from leaseq.errors import BackendUnavailable, ClientClosed, NotReplicated, SchemaMissing

MAX_BATCH = 1000
"""Most jobs in one grouped transaction; callers beyond it wait for the next."""

WRITERS = 1
"""Batches of one client written at once. One makes the biggest batches, the least work
per job for the client and the server; more let a caller that arrives during a write start
its batch before that write ends (measured on PostgreSQL with 32 producers on two busy
cores, two or three writers were no faster: the CPU, not the wait, was the limit)."""

SHARED_ERRORS = (BackendUnavailable, SchemaMissing, ClientClosed)
"""A batch that fails with one of these is not retried job by job (see the module's
docstring)."""

Write = Callable[[list[NewJob]], list[EnqueueResult]]
AsyncWrite = Callable[[list[NewJob]], Awaitable[list[EnqueueResult]]]


class _Caller:
    """One waiting ``enqueue``: its job, then its outcome (or, for the caller chosen to
    write the next batch, that batch)."""

    __slots__ = ("batch", "done", "error", "job", "result")

    def __init__(self, job: NewJob) -> None:
        self.job = job
        # Held until the outcome is in: the caller blocks acquiring it, the writer releases
        # it (a bare lock costs a fraction of an Event, which wraps a Condition).
        self.done = threading.Lock()
        self.done.acquire()
        self.result: EnqueueResult | None = None
        self.error: BaseException | None = None
        self.batch: list[_Caller] | None = None

    def outcome(self) -> EnqueueResult:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class GroupCommit:
    """Group commit for the threads of one ``Queue`` (leader and followers)."""

    writers = WRITERS

    def __init__(self, write: Write) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._writing = 0  # batches being written
        self._pending: list[_Caller] = []

    def enqueue(self, job: NewJob) -> EnqueueResult:
        """Writes ``job`` alone when no write is in flight, else with the next batch;
        returns after that batch committed."""
        with self._lock:
            if self._writing < self.writers:
                self._writing += 1
                me = None
            else:
                me = _Caller(job)
                self._pending.append(me)
        if me is None:  # the common case of a quiet client: nothing to wait on
            try:
                return self._write([job])[0]
            finally:
                self._hand_off()
        me.done.acquire()
        if me.batch is None:
            return me.outcome()
        try:
            self._write_batch(me.batch)
        finally:
            self._hand_off()
        return me.outcome()

    def _write_batch(self, batch: list[_Caller]) -> None:
        """Writes ``batch`` and tells each caller in it (the writer's own outcome stays
        with its ``_Caller`` too)."""
        outcomes: list[EnqueueResult | BaseException] = []
        try:
            outcomes = write_grouped(self._write, [c.job for c in batch])
        except BaseException as exc:  # an interrupt: no caller may wait for ever
            outcomes = [exc] * len(batch)
            raise
        finally:
            for caller, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    caller.error = outcome
                else:
                    caller.result = outcome
                if caller is not batch[0]:  # the writer itself is not waiting
                    caller.done.release()

    def _hand_off(self) -> None:
        """The pending callers become the next batch, written by the first of them; with
        none pending the next caller writes at once."""
        with self._lock:
            if not self._pending:
                self._writing -= 1
                return
            batch = self._pending[:MAX_BATCH]
            del self._pending[:MAX_BATCH]
        batch[0].batch = batch
        batch[0].done.release()


def write_grouped(write: Write, jobs: list[NewJob]) -> list[EnqueueResult | BaseException]:
    """Each job's outcome: ``write(jobs)`` in one transaction, or, when that fails with an
    error that may belong to one job, each job in a transaction of its own."""
    try:
        return list(write(jobs))
    except NotReplicated as exc:
        return split_unreplicated(exc, len(jobs))
    except SHARED_ERRORS as exc:
        return [exc] * len(jobs)
    except Exception as exc:
        if len(jobs) == 1:
            return [exc]
    outcomes: list[EnqueueResult | BaseException] = []
    for job in jobs:
        try:
            outcomes.append(write([job])[0])
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


def split_unreplicated(exc: NotReplicated, n: int) -> list[EnqueueResult | BaseException]:
    """Each caller of a batch the primary wrote but too few replicas confirmed: its own
    ``NotReplicated`` carrying its own job's result. Never written again job by job: they
    all exist on the primary."""
    results = exc.result if isinstance(exc.result, list) else [None] * n
    return [NotReplicated(str(exc), exc.acknowledged, exc.wanted, exc.fsynced, [result])
            for result in results]


async def awrite_grouped(
    write: AsyncWrite, jobs: list[NewJob]
) -> list[EnqueueResult | BaseException]:
    """See ``write_grouped``."""
    try:
        return list(await write(jobs))
    except NotReplicated as exc:
        return split_unreplicated(exc, len(jobs))
    except SHARED_ERRORS as exc:
        return [exc] * len(jobs)
    except Exception as exc:
        if len(jobs) == 1:
            return [exc]
    outcomes: list[EnqueueResult | BaseException] = []
    for job in jobs:
        try:
            outcomes.append((await write([job]))[0])
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


class AsyncGroupCommit:
    """Group commit for the tasks of one ``AsyncQueue``, on the event loop it runs on.

    The first caller writes in its own task, as without grouping. The batches after it
    are written by a task of their own, so that cancelling one waiting caller cannot
    cancel the write of the others' jobs: a caller cancelled before its batch began is
    left out of it (nothing written), one cancelled later may still have its job written,
    as a cancelled lone enqueue may."""

    writers = WRITERS

    def __init__(self, write: AsyncWrite) -> None:
        self._write = write
        self._writing = 0
        self._pending: list[tuple[NewJob, asyncio.Future[EnqueueResult]]] = []
        self._tasks: set[asyncio.Task[None]] = set()  # strong references while they run
        self._loop: asyncio.AbstractEventLoop | None = None

    async def enqueue(self, job: NewJob) -> EnqueueResult:
        """See ``GroupCommit.enqueue``."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new event loop (``asyncio.run`` again): a batch that the old loop's shutdown
            # cancelled may not have cleaned up after itself, and its waiters are gone.
            self._loop, self._writing, self._pending = loop, 0, []
        if self._writing < self.writers:
            self._writing += 1
            try:
                return (await self._write([job]))[0]
            finally:
                self._next_batch()
        waiter: asyncio.Future[EnqueueResult] = loop.create_future()
        entry = (job, waiter)
        self._pending.append(entry)
        try:
            return await waiter
        except asyncio.CancelledError:
            if entry in self._pending:
                self._pending.remove(entry)
            raise

    def _next_batch(self) -> None:
        if not self._pending:
            self._writing -= 1
            return
        batch = self._pending[:MAX_BATCH]
        del self._pending[:MAX_BATCH]
        task = asyncio.ensure_future(self._write_batch(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_batch(
        self, batch: list[tuple[NewJob, asyncio.Future[EnqueueResult]]]
    ) -> None:
        try:
            outcomes = await awrite_grouped(self._write, [job for job, _ in batch])
        except BaseException as exc:  # cancelled at loop shutdown: no caller waits for ever
            outcomes = [exc] * len(batch)
            raise
        finally:
            for (_, waiter), outcome in zip(batch, outcomes, strict=True):
                if waiter.done():
                    continue  # its caller was cancelled while the batch was written
                if isinstance(outcome, asyncio.CancelledError):
                    waiter.cancel()
                elif isinstance(outcome, BaseException):
                    waiter.set_exception(outcome)
                else:
                    waiter.set_result(outcome)
            self._next_batch()


def grouped(caps: Capabilities, settings: Settings) -> bool:
    """Whether a client's lone enqueues go through group commit: ``Settings.group_commit``,
    on every backend with a commit to share (``Capabilities.group_commit``: not memory,
    where a write is a dict update under a lock)."""
    return settings.group_commit and caps.group_commit
