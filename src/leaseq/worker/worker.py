"""The worker: fetches jobs for an ``App``'s tasks and runs them.

Shape:

* the **fetch loop** (asyncio) leases at most as many jobs as it has free slots, in one
  claim per batch, then waits: until a PostgreSQL NOTIFY or a Redis pub/sub message
  names one of its queues or another connection commits to the SQLite file, in this
  process until a local enqueue does, and otherwise for an adaptive poll interval that
  grows while queues stay empty. On PostgreSQL and Redis the idle workers of one queue
  set take turns (``worker/turn.py``): only the turn's holder claims on a push wake-up, so one
  job does not cost a claim per idle worker;
* each job runs as an asyncio task: ``async def`` handlers on the loop, plain ones on up
  to ``concurrency`` threads (``threads.py``: one queue in, outcomes back in batches); a
  job's slot frees when its handler returns, and its ack joins the completer's next
  batched write. When every task is a plain function, the loop leases jobs ahead of the
  threads, as many as they run in ``AHEAD_WINDOW`` on average, so short handlers are fed
  by big claims instead of one claim per freed thread;
* a **heartbeat thread** with its own client renews every held lease each lease/3, off
  the handlers' threads and loop, so a CPU-bound handler cannot starve it. A lost lease or
  a missed renewal deadline marks the job lost (async handlers are cancelled, sync ones
  see ``current_job().lease_lost``) and its outcome is never written; a cancel request
  stops the handler and records the job as cancelled; a renewal refused by the queue's
  touch limits counts as a lost lease (``heartbeat.py``, a mixin of ``Worker``);
* **start-up** checks the database and its schema first (``startup.py``): what will not
  fix itself ends the run with exit code 78, an unreachable server is retried with
  backoff; the jobs' log lines are written by ``logs.py``;
* **failure hooks** (``on_failure``, ``on_dead``) run after a failure is written, in a
  task of their own (plain hooks in a small thread pool), with the job as then stored;
* **maintenance**: reclaim of expired leases every few seconds and, when asked
  (``prune_after``), pruning of history, each with jitter so a fleet of workers does not
  run them in step;
* **shutdown** on SIGTERM/SIGINT: stop fetching, let running jobs finish within
  ``grace`` seconds while still heartbeating, then give back the rest without penalty
  (``release``); a second signal exits at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from leaseq import _hooks, tracing
from leaseq import _wakeup as wakeup
from leaseq._aclient import AsyncQueue
from leaseq._aio import wait_event
from leaseq._core import outage as _outage
from leaseq._core import outcome as decide
from leaseq._core.job import Job, JobState
from leaseq._core.outcome import Hook, Outcome
from leaseq._core.redact import redact_url
from leaseq._core.version import VERSION
from leaseq._hooks import FailureHook
from leaseq.errors import (
    AuthenticationFailed,
    BackendUnavailable,
    LeaseLost,
    LeaseqError,
    NotReplicated,
    ValidationError,
)
from leaseq.tasks import App, Task
from leaseq.worker import logs, startup
from leaseq.worker import turn as turn_
from leaseq.worker.completer import RETRY_FIRST, RETRY_MAX, Completer
from leaseq.worker.context import JobContext, set_current
from leaseq.worker.heartbeat import FENCE_MARGIN, Heartbeats, unreplicated
from leaseq.worker.threads import HandlerThreads

if TYPE_CHECKING:  # prometheus-client is imported only when metrics are on
    from leaseq.metrics import WorkerMetrics, WorkerRecorder

T = TypeVar("T")
REPEATABLE = frozenset({"nack", "release", "snooze", "bury"})
"""Outcome writes a worker tries again after an unknown outcome while its lease lasts
(the ack's own retry is the completer's)."""

log = logging.getLogger("leaseq.worker")

ASYNC_CONCURRENCY = 1000
"""Default cap on running jobs when every task is ``async def``."""
SYNC_CONCURRENCY = 10
"""Default cap (and thread count) when some task is a plain function."""
IDLE_FLOOR = 0.002
"""First wait after a claim came back empty; it doubles up to ``poll_interval``."""
WATCH_TICK = 0.02
"""MySQL/MariaDB, which has no push wake-up: how often (±20 %) the one idle worker holding
its queues' turn claims while idle, so that a job enqueued elsewhere, or coming due, starts
within about this long; the other idle workers poll at their poll interval (design
§42)."""
DUE_MARGIN = 0.0005
"""Slept past a job's due time, so that the claim after the sleep finds it due (timers may
fire a little early)."""
GATHER = 0.002
"""Seconds the fetch loop waits for more slots to free before claiming for a few..."""
GATHER_BELOW = 8
"""...when fewer than this many (and under half) are free while jobs run."""
MIN_RECLAIM = 0.1
"""Shortest pause between the worker's reclaims (a client's reclaim_interval of 0 means
"on every dequeue", which the worker's loop must not turn into a busy loop)."""
HOOK_THREADS = 8
"""Threads that run plain (not ``async def``) failure hooks, apart from the jobs' pool."""
AHEAD_WINDOW = 0.01
"""Plain handlers only: lease as many jobs beyond the free threads as the threads run, on
average, in this many seconds, so that one claim feeds them for a while instead of one
claim per freed thread..."""
MAX_AHEAD = 1000
"""...and never more than this many."""
SHUTDOWN_SLACK = 5.0
"""Seconds past ``grace`` a stop may take: what is left to write after the grace (acks,
give-backs) and closing the connections get this long together, then the worker exits
regardless (design §37), leaving any lease it could not give back to expire."""


class Worker(Heartbeats):
    """Runs an ``App``'s tasks from ``queues``.

    Args:
        app: The app whose tasks this worker runs.
        queues: Queues to take jobs from; default: every queue the app's tasks use.
        concurrency: Jobs run at once. Defaults to ``ASYNC_CONCURRENCY`` (1,000) when
            every task on the worked queues is ``async def`` (waiting coroutines cost next
            to nothing), else ``SYNC_CONCURRENCY`` (10: at most one thread per running
            job, started as the work needs them). Lower it for async handlers that hold
            scarce resources or burn CPU. Jobs leased ahead for plain handlers wait for a
            thread and do not count against it.
        lease: Lease length in seconds for every claimed job. Defaults to None: each
            job's own lease (its task's ``lease``), else its queue's ``default_lease``, else
            the app's ``Settings.lease``; the queue's ``max_lease`` caps them all.
        grace: Seconds running jobs get to finish after a stop signal. Defaults to 30.
        poll_interval: Longest wait between polls of empty queues. Defaults to 1.
        reclaim_interval: Seconds between reclaims of expired leases. Defaults to 5, or
            the app's ``Settings.reclaim_interval`` (1 s) when that is shorter: the worker
            reclaims in its maintenance task, never inline before a claim.
        prune_after: Prune history (completed, cancelled and discarded jobs) older than
            this many seconds: on the first maintenance pass, then about hourly. Defaults
            to None: history is kept until you prune it (``leaseq prune``, or
            ``leaseq worker --prune-history-after 7d``).
        worker_id: Names this worker in the jobs it holds. Defaults to host:pid:random.
        burst: Stop by itself (exit code 0) once nothing of its queues is due and no job
            runs in it, whether or not it ran any: jobs held back only by a rate or
            concurrency limit are due (it waits for them); jobs scheduled for later (a
            retry this run scheduled included) and jobs of paused queues are not. For
            batch runs and benchmarks. Defaults to False.
        metrics: A ``leaseq.metrics.WorkerMetrics`` to record into (jobs processed by
            outcome, run and wait times, claim and ack latency, jobs held); serve it with
            its ``serve(port)``. Defaults to None: nothing is recorded or imported.
        log_jobs: Also log one INFO line per job that succeeded (``leaseq.worker.jobs``);
            failures, deaths and unknown tasks are logged always. Defaults to False.
        unknown_task_delay: Seconds before a job of a task this worker does not know is
            offered again; defaults to the app's ``unknown_task_delay`` (60).
        unknown_task_grace: Seconds such a job may stay unknown before it is buried;
            defaults to the app's ``unknown_task_grace`` (3600).
        start_timeout: Seconds to keep trying an unreachable database at start before
            giving up (exit code 69). Defaults to None: for ever. A database that answers
            but cannot be used (bad credentials, unknown database, tables missing or
            older than this leaseq) ends the run at once with exit code 78 (design §53).
    """

    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int | None = None,
        lease: float | None = None,
        grace: float = 30.0,
        poll_interval: float = 1.0,
        reclaim_interval: float = 5.0,
        prune_after: float | None = None,
        worker_id: str | None = None,
        burst: bool = False,
        metrics: WorkerMetrics | None = None,
        log_jobs: bool = False,
        unknown_task_delay: float | None = None,
        unknown_task_grace: float | None = None,
        start_timeout: float | None = None,
    ) -> None:
        self.app = app
        app.load_includes()
        self.queues = list(queues or sorted({t.defaults.queue for t in app.tasks.values()}))
        if not self.queues:
            raise LeaseqError(f"no queues to work: {app.no_tasks_hint([])}, or pass queues")
        if hint := app.no_tasks_hint(self.queues):
            log.warning("%s", hint)
        mine = [t for t in app.tasks.values() if t.defaults.queue in self.queues]
        every_async = bool(mine) and all(t.is_async for t in mine)
        if concurrency is None:
            concurrency = ASYNC_CONCURRENCY if every_async else SYNC_CONCURRENCY
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        # None: each job's own lease (its task's), else its queue's default_lease, else
        # the app's Settings.lease; an explicit lease overrides them all.
        self.lease = lease
        self.grace = grace
        self.poll_interval = poll_interval
        self.reclaim_interval = reclaim_interval
        self._reclaim_every = reclaim_interval
        self.prune_after = prune_after
        self.burst = burst
        self.metrics = metrics
        self.log_jobs = log_jobs
        self.start_timeout = start_timeout
        self._exit_code = 0
        self._outage = 0  # failed claims in a row while the database is unreachable
        self.unknown_task_delay = (app.unknown_task_delay if unknown_task_delay is None
                                   else unknown_task_delay)
        self.unknown_task_grace = (app.unknown_task_grace if unknown_task_grace is None
                                   else unknown_task_grace)
        # This run's recorder; None (metrics off) costs one comparison per event.
        self._metrics: WorkerRecorder | None = None
        suffix = f"{random.randrange(16**4):04x}"
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{suffix}"
        self.inflight: dict[int, tuple[JobContext, asyncio.Task[None]]] = {}
        # Handlers running now. A job whose handler has returned frees its slot at once,
        # while its ack waits for the next batched write (it stays in ``inflight``, leased).
        self.running = 0
        self.processed = 0
        self.failed = 0
        self.stopping = False
        self._signals = 0
        self._wake: asyncio.Event | None = None  # work may be waiting: claim now
        self._freed: asyncio.Event | None = None  # a slot (or room for acks) came free
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: HandlerThreads | None = None
        # Jobs are leased ahead of the threads only when every task on the worked queues
        # is a plain function: an async job leased ahead would start at once, past the cap.
        self._lease_ahead = bool(mine) and not any(t.is_async for t in mine)
        self._hook_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._hook_runs: set[asyncio.Task[None]] = set()
        self._beats_stop = threading.Event()
        self._beats_poke = threading.Event()  # wakes the heartbeat thread
        self._stop_by: float | None = None  # monotonic: exit by then once stopping
        self._fetch_task: asyncio.Task[Any] | None = None
        self._fetching = False  # the fetch loop awaits the database (a claim, next_due)
        self._cut = False  # ...and the stop cut that wait short
        self._owns_process = False  # run(): the stop may end the process (watchdog)
        self._abandoned = False  # a shutdown step was given up on (_bounded)
        self._limits: Callable[[str], bool] = lambda queue: False
        self._aq: AsyncQueue | None = None  # this run's client
        self._turn = turn_.Turn()
        self._watches = False  # turn_without_push: the turn's holder polls every WATCH_TICK
        self.started = threading.Event()
        """Set once the worker is fetching (for code that runs it in a thread)."""

    # -- entry points --------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped by SIGTERM/SIGINT (or ``stop()``); returns the exit code.
        The process exits by ``grace`` + ``SHUTDOWN_SLACK`` seconds after the stop, even
        if a connection still hangs."""
        self._owns_process = True
        code = _event_loop_runner()(self.run_async(install_signals=True))
        if any(t.is_alive() for t in threading.enumerate() if t.name.startswith("leaseq-job")):
            # A sync handler ignored shutdown and still runs (its job was given back), or
            # a sync hook outlived the grace period.
            logging.shutdown()
            os._exit(code)
        return code

    def stop(self) -> None:
        """Ask the worker to stop as a first SIGTERM would (thread-safe)."""
        self.stopping = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._request_stop)

    async def run_async(self, install_signals: bool = False) -> int:
        """Run inside an existing event loop until stopped; returns the exit code: 0, or
        ``startup.EX_CONFIG`` (78) when the database cannot be used as configured, or
        ``startup.EX_UNAVAILABLE`` (69) when it stayed unreachable for ``start_timeout``."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._freed = asyncio.Event()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._on_signal)
        # The client's own reclaim would run inline, before a claim, on the path from a
        # job's due time to its start; the maintenance task reclaims as often instead.
        inline = self.app.settings.reclaim_interval
        if inline is not None:
            self._reclaim_every = min(self.reclaim_interval, max(inline, MIN_RECLAIM))
        try:
            aq = AsyncQueue(self.app.url, replace(self.app.settings, reclaim_interval=None))
        except LeaseqError as exc:  # a bad URL, a missing driver extra
            return self._cannot_run(startup.cannot_run(exc, self.app.url))
        try:
            await startup.reach(aq, self.app.url, self.start_timeout, lambda: self.stopping)
        except startup.CannotRun as exc:
            await aq.close()
            return self._cannot_run(exc)
        if self.stopping:  # stopped while waiting for the database
            await aq.close()
            return 0
        self._threads = HandlerThreads(self._loop, self.concurrency, "leaseq-job")
        self._hook_pool = concurrent.futures.ThreadPoolExecutor(
            HOOK_THREADS, thread_name_prefix="leaseq-job-hook"
        )
        self._aq = aq
        self._limits = aq._concurrency_limited
        if self.metrics is not None:
            self._metrics = self.metrics.recorder(aq.backend, self.queues, self._held_queues)
        self._completer = Completer(aq, self._acked,
                                    timed=None if self._metrics is None else self._metrics.acked,
                                    lease_ends=self._lease_ends)
        self._completer.start()
        beats = threading.Thread(target=self._heartbeats, name="leaseq-heartbeat", daemon=True)
        beats.start()
        unsubscribe = wakeup.subscribe(wakeup.key(self.app.url, self.app.settings.table_prefix),
                                       self._on_local_enqueue)
        helpers = [asyncio.create_task(self._maintenance(aq), name="leaseq-maintenance")]
        if self.app.schedules:
            # Every worker runs every schedule: each tick's job is keyed, so it is
            # enqueued once however many run (docs/schedules.md).
            from leaseq.worker.scheduler import Scheduler  # only an app with schedules

            scheduler = Scheduler(self.app, aq)
            helpers.append(asyncio.create_task(scheduler.run(lambda: self.stopping),
                                               name="leaseq-scheduler"))
        listener = self._listener(aq)
        if listener is not None:
            helpers.append(listener)
        if listener is not None or aq._caps.turn_without_push:
            # Without push (MySQL/MariaDB) the turn picks the one idle worker that polls
            # quickly (WATCH_TICK) instead of the one that answers wake-ups.
            turns = self._take_turns(aq)
            if turns is not None:
                helpers.append(turns)
        helpers.append(asyncio.create_task(self._fence(), name="leaseq-fence"))
        url = redact_url(self.app.url)
        log.info("worker %s started: leaseq %s on %s, queues=%s, concurrency=%d",
                 self.worker_id, VERSION, url, ",".join(self.queues), self.concurrency,
                 extra={"event": "worker_started", "worker_id": self.worker_id,
                        "version": VERSION, "url": url, "queues": self.queues,
                        "concurrency": self.concurrency})
        self.started.set()
        self._fetch_task = asyncio.current_task()
        try:
            await self._fetch_loop(aq)
            await self._drain(aq)
        finally:
            if self._stop_by is None:  # a burst run's end, or an error: no grace to give
                self._stop_by = time.monotonic() + SHUTDOWN_SLACK
            unsubscribe()
            if self._outage:
                self._outage = 0
                _outage.end()
            # Helpers also watch the flag: a cancel can be lost inside redis-py (design
            # §27), and a burst run ends without a stop signal.
            self.stopping = True
            self._turn.set_idle(False)
            for helper in helpers:
                helper.cancel()
            # Each step below waits at most until _stop_by: on a dead network a write or
            # a close can hang for as long as the connection takes to be declared dead.
            # Helpers have nothing to finish: a second at most (a driver's cancel of a
            # query on a dead connection waits for seconds), the rest is for the acks.
            await self._bounded(asyncio.gather(*helpers, return_exceptions=True), "helpers",
                                limit=1.0)
            await self._bounded(self._completer.close(), "pending acks")
            self._beats_stop.set()
            self._beats_poke.set()
            await self._finish_hooks()
            beats.join(max(0.0, min(5.0, self._stop_by - time.monotonic())))
            await self._bounded(aq.close(), "closing connections")
            self._threads.close()
            self._hook_pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped: %d job%s processed, %d failed", self.worker_id,
                 self.processed, "" if self.processed == 1 else "s", self.failed)
        if self._abandoned and self._owns_process:
            # Steps given up on still wait on a dead connection, and the event loop's own
            # teardown would wait for their cancellation: the stop is done, so exit.
            logging.shutdown()
            os._exit(self._exit_code)
        return self._exit_code

    def _cannot_run(self, exc: startup.CannotRun) -> int:
        """The one line that says why this worker cannot run; its exit code."""
        log.error("worker %s cannot run: %s", self.worker_id, exc,
                  extra={"event": "worker_cannot_run", "exit_code": exc.exit_code})
        self._exit_code = exc.exit_code
        return exc.exit_code

    # -- signals and wake-ups ------------------------------------------------------------

    def _on_signal(self) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second stop signal: exiting at once; held leases will expire")
            logging.shutdown()
            os._exit(1)
        log.info("stop signal: finishing running jobs (grace %.0f s)", self.grace)
        self._request_stop()

    def _overdue(self) -> None:
        log.warning("shutdown took longer than grace + %.0f s (a connection that does not "
                    "answer?): exiting now; leases not given back will expire",
                    SHUTDOWN_SLACK)
        logging.shutdown()
        os._exit(1)

    def _request_stop(self) -> None:
        if self._stop_by is None:
            self._stop_by = time.monotonic() + self.grace + SHUTDOWN_SLACK
            if self._owns_process:
                # The last resort: whatever still waits on a dead connection (a driver's
                # cleanup, a thread in a blocking call) cannot keep the process past
                # grace + slack. Only when run() owns the process: an embedding program
                # is not ended from under it.
                watchdog = threading.Timer(self.grace + SHUTDOWN_SLACK, self._overdue)
                watchdog.daemon = True
                watchdog.start()
            if self._loop is not None and self.grace >= 0:
                # A claim in flight when the stop came gets the grace to return (its jobs
                # then run or are given back); past that it is abandoned, and any jobs
                # it leased expire.
                self._loop.call_later(self.grace, self._cut_fetch)
        self.stopping = True
        self._turn.set_idle(False)  # a holder hands the turn on
        if self._wake is not None and self._freed is not None:
            self._wake.set()
            self._freed.set()

    def _on_local_enqueue(self, queues: Sequence[str]) -> None:
        if self._loop is not None and self._wake is not None and set(queues) & set(self.queues):
            self._loop.call_soon_threadsafe(self._wake.set)

    def _listener(self, aq: AsyncQueue) -> asyncio.Task[None] | None:
        """Push wake-ups, when the backend has them: PostgreSQL LISTEN/NOTIFY (on the
        client's ``listen_url``; none behind a transaction pooler without one), Redis
        pub/sub, SQLite's commit counter. The poll stays as the safety net."""
        subscribe = aq._caps.listener
        url = None if subscribe is None else aq._push_url()
        if subscribe is None or url is None:
            return None
        return asyncio.create_task(
            subscribe(url, self.app.settings.table_prefix, self.queues,
                      self._pushed, lambda: self.stopping),
            name="leaseq-listen",
        )

    def _cut_fetch(self) -> None:
        if self._fetching and self._fetch_task is not None and not self._fetch_task.done():
            log.warning("the database did not answer a claim within the grace period; "
                        "stopping without it")
            self._cut = True
            self._fetch_task.cancel()

    async def _bounded(self, step: Any, what: str, limit: float | None = None) -> None:
        """Awaits ``step`` until ``_stop_by`` (or for ``limit`` seconds, if sooner); past
        it, cancels the step without waiting for it (a driver's cancel may itself wait on
        the dead connection) and goes on."""
        task = asyncio.ensure_future(step)
        if self._stop_by is None:  # a burst run's end: no grace to give
            self._stop_by = time.monotonic() + SHUTDOWN_SLACK
        # Half a second before the watchdog, so that the process exits by itself.
        until = self._stop_by - 0.5
        if limit is not None:
            until = min(until, time.monotonic() + limit)
        done, _ = await asyncio.wait({task}, timeout=max(0.0, until - time.monotonic()))
        if not done:
            self._abandoned = True
            task.cancel()
            # Its end (a cancel, or whatever it raises meanwhile) is of no interest now.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            log.warning("shutdown: %s did not finish in time, given up", what)
            return
        task.result()

    def _take_turns(self, aq: AsyncQueue) -> asyncio.Task[None] | None:
        """The idle workers of one queue set take turns answering push wake-ups
        (``worker/turn.py``) where the backend brings a turn (``Capabilities.take_turns``:
        PostgreSQL's advisory lock, single-server Redis' key; MySQL/MariaDB's named lock,
        whose holder is the one that polls quickly). Elsewhere (Redis Cluster, SQLite) and
        in burst runs every worker answers every wake-up."""
        url = aq._push_url()
        if url is None or self.burst:
            # A burst run stops once it has run jobs and finds its queues empty, so one that
            # never gets a job waits for ever (seen in leaseq bench's drain on a loaded
            # machine, before turns too); turns would make that likelier.
            return None
        take_turns = aq._caps.take_turns
        if take_turns is None:
            return None
        run = take_turns(url, self.app.settings.table_prefix, self.queues, self.worker_id,
                         self._turn, self._wake_soon, lambda: self.stopping)
        return asyncio.create_task(run, name="leaseq-turn")

    def _pushed(self) -> None:
        """A push wake-up: claim if this worker holds its queues' turn, or takes none."""
        if self._turn.claims_on_wake():
            self._wake_soon()

    def _wake_soon(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- fetching and running ------------------------------------------------------------

    async def _fetch_loop(self, aq: AsyncQueue) -> None:
        assert self._wake is not None
        idle = 0.0
        gathered = False
        again = False  # claimed again at once after next_due said a job is due now
        self._watches = aq._caps.turn_without_push
        # While watching: when next_due was last read (monotonic) and the due time it gave
        # (None: nothing due), reused between reads, which a wake-up makes stale.
        due_read, due_at = -math.inf, None
        while not self.stopping:
            slots = self.concurrency + self._ahead()
            free = slots - self.running
            if free <= 0 or len(self.inflight) >= slots + self._completer.max_batch:
                await self._wait(None, self._freed)
                continue
            if self.running and free < min(self.concurrency / 2, GATHER_BELOW) and not gathered:
                # Jobs are running and only a few slots are free: give the others a moment
                # to free theirs, so one claim fills several slots instead of one each.
                gathered = True
                await asyncio.sleep(GATHER)
                continue
            gathered = False
            metrics = self._metrics
            began = time.perf_counter() if metrics is not None else 0.0
            claim_began = time.monotonic()
            self._fetching = True
            try:
                jobs = await aq.dequeue(self.queues, worker_id=self.worker_id,
                                        lease=self.lease, limit=free)
            except NotReplicated as exc:
                # The primary leased these jobs to us: run them. Lost in a failover, the
                # claim is undone and they run again elsewhere, as after a lost lease.
                unreplicated(exc, "claim")
                jobs = exc.result if isinstance(exc.result, list) else []
            except LeaseqError as exc:
                if metrics is not None:
                    metrics.dequeued(time.perf_counter() - began)
                if startup.fatal(exc):  # tables dropped, a password changed: stop
                    self._cannot_run(startup.cannot_run(exc, self.app.url))
                    break
                # No next_due either: the database did not answer, so ask it again after
                # a backoff (on a dead network each call waits for the connection to be
                # declared dead), with one WARNING per attempt.
                pause = self._unreachable(exc)
                await self._wait(pause)
                idle = self.poll_interval
                continue
            except asyncio.CancelledError:
                if not self._cut:
                    raise
                break  # the stop gave up on this claim (_cut_fetch)
            finally:
                self._fetching = False
            if self._outage:
                self._reachable()
            if metrics is not None:
                metrics.dequeued(time.perf_counter() - began)
                for job in jobs:
                    metrics.started(job)
            started = time.monotonic()
            for job in jobs:
                self._start(aq, job, started)
            # Room to spare: take (or keep) the turn; full: hand it on, more may wait.
            self._turn.set_idle(len(jobs) < free)
            if jobs:
                self._beats_poke.set()
                idle = 0.0
                again = False
                # Let the handlers begin before the next claim's own Python runs.
                await asyncio.sleep(0)
                continue
            if self.burst and not self.inflight and not await self._due(aq):
                log.info("nothing due in %s: burst run done (%d job%s processed)",
                         ",".join(self.queues), self.processed,
                         "" if self.processed == 1 else "s",
                         extra={"event": "burst_done", "worker_id": self.worker_id})
                break
            # Empty queues: wait longer each time (up to poll_interval), with jitter so a
            # fleet of idle workers does not poll in step; at once the poll interval when
            # workers take turns: a new job wakes the turn's holder, so a quick re-poll
            # would only add claims (design §36)...
            idle = min(self.poll_interval, max(IDLE_FLOOR, idle * 2))
            if self._turn.active:
                idle = self.poll_interval
            # MySQL/MariaDB sends no wake-up: its turn's holder claims every WATCH_TICK
            # instead, and alone (design §42).
            watching = self._watches and self._turn.holding
            if watching:
                idle = min(WATCH_TICK, self.poll_interval)
            pause = idle * random.uniform(0.8, 1.2)
            if watching:
                # Ticks counted from the last claim's start: a slow claim (a busy server)
                # shortens the wait after it rather than adding to the pickup latency,
                # and the rate stays at most one claim per tick, a few ms apart at least.
                pause = max(pause / 4, claim_began + pause - time.monotonic())
            longest = pause if watching else self.poll_interval
            # ...unless the database knows when a job comes due or a rate limit lets one
            # start: then sleep exactly that long, so a delayed job starts on time. An
            # enqueue (of an earlier job too) wakes the loop before then.
            asked = time.monotonic()
            # While another worker holds the turn, it alone times itself to the next due
            # job: all of them waking at that instant would be a herd again.
            waiting = self._turn.active and not self._turn.holding
            if waiting:
                due = None
            elif (watching and asked - due_read < self.poll_interval
                    and (due_at is None or due_at > asked)):
                # A watching worker's ticks are claims alone; it asks next_due (a few reads
                # on MySQL) once per poll interval, or after a wake-up or a due time.
                due = None if due_at is None else due_at - asked
            else:
                due = await self._next_due(aq)
                due_read, due_at = asked, None if due is None else asked + due
            if due is not None and due > 0:
                # Counted from the question, not the answer: the read's round trip is
                # already part of the wait.
                until = asked + due + DUE_MARGIN
                pause = min(max(0.0, until - time.monotonic()), longest)
            elif due is not None and not again:
                # Due now, yet the claim missed it: it came due between the two reads
                # (SQLite's clock counts whole milliseconds) or another claimer held it.
                # Claim again at once, once; after that the back-off keeps this from
                # spinning on a job some other client holds.
                again = True
                pause = 0.0
            if await self._wait(pause):
                due_read = -math.inf  # woken: a job may have come with an earlier due time

    def _unreachable(self, exc: LeaseqError) -> float:
        """A claim failed: one WARNING for this attempt; the seconds until the next."""
        if not self._outage:
            _outage.begin()  # the other connections' retries go quiet meanwhile
        self._outage += 1
        pause = startup.retry_delay(self._outage)
        what = ("unreachable" if isinstance(exc, BackendUnavailable)
                else "refused a claim")  # a database error that may pass: retried the same
        log.warning("database %s %s (%s); attempt %d failed, retrying in %.1f s",
                    redact_url(self.app.url), what, startup.one_line(exc), self._outage, pause,
                    extra={"event": "database_unreachable", "attempt": self._outage,
                           "retry_in": round(pause, 3), "worker_id": self.worker_id})
        return pause

    def _reachable(self) -> None:
        log.info("database %s reachable again after %d failed attempts",
                 redact_url(self.app.url), self._outage)
        self._outage = 0
        _outage.end()

    def _ahead(self) -> int:
        """Jobs to lease beyond the threads: as many as they run in ``AHEAD_WINDOW``, so a
        leased job waits for a thread about that long at most, on average."""
        typical = self._threads.typical_run if self._threads is not None else None
        if not self._lease_ahead or typical is None:
            return 0
        return min(MAX_AHEAD, int(self.concurrency * AHEAD_WINDOW / max(typical, 1e-6)))

    async def _due(self, aq: AsyncQueue) -> bool:
        """A burst run: whether a job of its queues is due now (held back by a limit or
        not; design §53). True when the database does not answer: the run waits for it."""
        return await self._lookup(aq._due_now(self.queues), "due-job", True, False)

    async def _next_due(self, aq: AsyncQueue) -> float | None:
        # Asked only after a claim that worked, so rare: the database went away between
        # the two (logged as a failed claim is).
        return await self._lookup(aq.next_due(self.queues), "next-due", None, None)

    async def _lookup(self, call: Coroutine[Any, Any, T], what: str, failed: T, cut: T
                      ) -> T:
        """A read the fetch loop makes between claims, as a fetch (``_cut_fetch`` may end
        it at a stop): ``failed`` when the database did not answer, ``cut`` when the stop
        gave up on it (the loop ends next)."""
        self._fetching = True
        try:
            return await call
        except LeaseqError as exc:
            log.log(_outage.level_for(exc), "%s lookup failed, polling again: %s", what, exc)
            return failed
        except asyncio.CancelledError:
            if not self._cut:
                raise
            return cut
        finally:
            self._fetching = False

    async def _wait(self, timeout: float | None, event: asyncio.Event | None = None) -> bool:
        """Waits for ``event`` (default: a wake-up) or ``timeout``; True when the event
        came. Idle waits do not end when a slot frees: that would cut the poll back-off
        short once per finished job."""
        event = event or self._wake
        assert event is not None
        woken = await wait_event(event, timeout)
        event.clear()
        return woken

    def _start(self, aq: AsyncQueue, job: Job, claimed_at: float) -> None:
        task = self.app.tasks.get(job.kind or "")
        lease = task.lease if task and task.defaults.lease else job.lease
        ctx = JobContext(job=job, lease=lease,
                         deadline=claimed_at + job.lease * (1 - FENCE_MARGIN),
                         next_beat=claimed_at + min(job.lease, lease) / 3,
                         until=job.lease_until, expires=claimed_at + job.lease)
        runner = asyncio.create_task(self._run(aq, ctx, task), name=f"leaseq-job-{job.id}")
        self.running += 1
        self.inflight[job.id] = (ctx, runner)

    def _done(self, job_id: int) -> None:
        """The job's outcome is written (or given up on): it no longer counts as held."""
        held = self.inflight.pop(job_id, None)
        if self._freed is not None:
            self._freed.set()  # below the cap on jobs awaiting their ack
        if held is not None and self._wake is not None and self._limits(held[0].job.queue):
            # Its queue has a concurrency limit: the job just gave back a slot, which the
            # idle loop would otherwise only find at its next poll.
            self._wake.set()

    def _slot_freed(self) -> None:
        self.running -= 1
        if self._freed is not None:
            self._freed.set()

    async def _run(self, aq: AsyncQueue, ctx: JobContext, task: Task[Any, Any] | None) -> None:
        if not tracing.on:
            await self._attempt(aq, ctx, task)
            return
        # Inside the job's consumer span (leaseq.tracing), which ends once the outcome is
        # written or handed to the completer.
        with tracing.running(ctx.job, task.name if task else None) as span:
            result, handed_off = await self._attempt(aq, ctx, task)
            error = result.error if result.action in ("nack", "bury", "discard") else None
            if result.action == "ack" and not handed_off and not ctx.lease_lost:
                error = "the result could not be stored"
            span.finished(_traced_outcome(ctx, result, handed_off), result.exc, error)

    async def _attempt(
        self, aq: AsyncQueue, ctx: JobContext, task: Task[Any, Any] | None
    ) -> tuple[Outcome, bool]:
        """Runs the handler and records its outcome; True when the completer took the
        job over (it then ends the job's books itself)."""
        handed_off = False
        try:
            try:
                result = await self._outcome(ctx, task)
            finally:
                self._slot_freed()
            handed_off = await self._record(aq, ctx, result, task)
        finally:
            if not handed_off:
                self._done(ctx.job.id)
        return result, handed_off

    def _held_queues(self) -> list[str]:
        """The queue of every job held now (metrics read it from the scrape's thread; a
        list() of a dict is one step under the GIL, as for the heartbeat thread)."""
        return [ctx.job.queue for ctx, _ in list(self.inflight.values())]

    def _lease_ends(self, job: Job) -> float:
        """When (monotonic) this worker's lease on ``job`` ends by its own estimate; 0
        when it does not hold the job (any more)."""
        held = self.inflight.get(job.id)
        return 0.0 if held is None or held[0].lease_lost else held[0].expires

    def _acked(self, job: Job, outcome: bool | BaseException) -> None:
        """The completer wrote (or failed to write) ``job``'s ack."""
        self._done(job.id)
        if outcome is True:
            self.processed += 1
            if self._metrics is not None:
                self._metrics.finished(job, "completed")
        elif outcome is False:
            log.warning("job %s: lease lost before its outcome was written", job.id)
            if self._metrics is not None:
                self._metrics.finished(job, "lease_lost")
        else:
            log.error("job %s: outcome not written (%s); the lease will expire", job.id, outcome)

    async def _outcome(self, ctx: JobContext, task: Task[Any, Any] | None) -> Outcome:
        """Runs the handler; what it returned or raised, as an outcome to record."""
        if task is None:
            return await self._unknown(ctx.job)
        timeout = task.defaults.timeout
        began = time.monotonic()
        try:
            return decide.succeeded(await self._call(ctx, task))
        except asyncio.CancelledError:
            if not (ctx.lease_lost or ctx.cancelled or ctx.shutting_down):
                raise
            return Outcome("release")
        except Exception as exc:
            # A TimeoutError the handler raised itself is an ordinary failure.
            if timeout and isinstance(exc, TimeoutError) and time.monotonic() - began >= timeout:
                ctx.timed_out = True
                return decide.timed_out(timeout)
            return decide.failed(exc)
        finally:
            ctx.ran = time.monotonic() - began
            if self._metrics is not None:
                self._metrics.ran(ctx.job, ctx.ran)

    async def _unknown(self, job: Job) -> Outcome:
        """A job of a task this worker does not know: handed back, with when a worker first
        saw it unknown (read from the job), until ``unknown_task_grace`` has passed since
        then; times are the database's (the claim's, from the lease it granted)."""
        now = job.lease_until - timedelta(seconds=job.lease)
        first_seen = None
        if self.unknown_task_grace > 0:
            try:
                assert self._aq is not None
                info = await self._aq.get(job.id)
                first_seen = decide.first_seen_unknown(info.error_detail)
            except LeaseqError as exc:  # handed back as if first seen: the grace is longer
                log.warning("job %s: its earlier hand-backs could not be read (%s)", job.id, exc)
        return decide.unknown_task(job.kind, sorted(self.app.tasks), first_seen=first_seen,
                                   now=now, delay=self.unknown_task_delay,
                                   grace=self.unknown_task_grace)

    async def _call(self, ctx: JobContext, task: Task[Any, Any]) -> Any:
        payload = ctx.job.payload
        if not isinstance(payload, dict):
            raise TypeError(f"task payload must be a JSON object of arguments, got {payload!r:.80}")
        timeout = task.defaults.timeout
        if task.is_async:
            token = set_current(ctx)
            try:
                ctx.started = True
                conversion = task.conversion  # None for plain tasks: nothing to convert
                if conversion is None:
                    return await asyncio.wait_for(task.fn(**payload), timeout)
                arguments = conversion.load_arguments(payload)
                result = await asyncio.wait_for(task.fn(**arguments), timeout)
                return conversion.dump_result(result)
            finally:
                set_current(None)
                del token
        assert self._threads is not None
        return await asyncio.wait_for(self._threads.submit(_run_sync, ctx, task, payload),
                                      timeout)

    async def _record(
        self, aq: AsyncQueue, ctx: JobContext, result: Outcome, task: Task[Any, Any] | None
    ) -> bool:
        """Write the job's outcome, unless the lease is gone; cancelled jobs are released
        (which records them as cancelled). True when an ack was handed to the completer,
        which finishes the job's bookkeeping when it has written it."""
        job = ctx.job
        if ctx.lease_lost:
            log.warning("job %s: lease lost, outcome not recorded", job.id)
            if self._metrics is not None:
                self._metrics.finished(job, "lease_lost")
            return False
        if ctx.shutting_down and result.action == "release" and not ctx.cancelled:
            return False  # shutdown gives it back itself
        if ctx.cancelled:
            result = Outcome("release")  # recorded as cancelled: a cancel was requested
        backoff = task.retry_backoff(job) if task else None
        if result.action == "nack" and result.delay is None:
            # The backoff's delay, drawn here rather than inside nack, so that the log
            # line can say when the job runs again.
            await aq._fresh_configs()
            result = replace(result, delay=aq._retry_delay(job, None, backoff))
        state: JobState | None = None  # what a nack left the job as
        name = task.name if task else None
        try:
            try:
                if result.action == "ack":
                    aq._result(result.result)  # an unstorable result fails this job alone
                    self._completer.submit(job, result.result)
                    logs.written(job, name, self.worker_id, result, None, None, ctx.ran,
                                 self.log_jobs)
                    return True
                for method, args, kwargs in decide.calls(job, result, backoff):
                    try:
                        returned = await self._while_held(aq, job, method, args, kwargs)
                    except NotReplicated as exc:  # written on the primary: carry on
                        unreplicated(exc, f"{method} of job {job.id}")
                        returned = exc.result
                    state = returned if method in ("nack", "snooze") else state
            except ValidationError as exc:  # the result was not storable JSON
                result = decide.unstorable_result(exc)
                result = replace(result, delay=aq._retry_delay(job, None, backoff))
                state = await aq.nack(job, result.error, delay=result.delay)
            if not ctx.cancelled:
                logs.written(job, name, self.worker_id, result, state, result.delay, ctx.ran,
                             self.log_jobs)
            self.processed += 1
            self.failed += result.action in ("nack", "bury", "discard")
            if self._metrics is not None:
                self._metrics.finished(job, _outcome_label(result, state, ctx.cancelled))
            self._start_hooks(aq, job, result, state, task)
        except LeaseLost:
            log.warning("job %s: lease lost before its outcome was written", job.id)
            # At shutdown the give-back may have won the race: it counts the job.
            if self._metrics is not None and not ctx.shutting_down:
                self._metrics.finished(job, "lease_lost")
        except LeaseqError as exc:
            log.error("job %s: outcome not written (%s); the lease will expire", job.id, exc)
        return False

    async def _while_held(self, aq: AsyncQueue, job: Job, method: str,
                          args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """``aq.method(*args, **kwargs)``, tried again while the lease lasts when its
        outcome is unknown (the database unreachable, a reply lost): a repeated ``nack``,
        ``release``, ``snooze`` or ``bury`` returns what the first one did if that one
        committed (design §62), so giving up at once would only leave the job to its
        lease's expiry. Other calls (``discard`` after a bury) are made once."""
        pause = RETRY_FIRST
        while True:
            try:
                return await getattr(aq, method)(*args, **kwargs)
            except BackendUnavailable as exc:
                again = (method in REPEATABLE and not isinstance(exc, AuthenticationFailed)
                         and self._lease_ends(job) > time.monotonic() + pause)
                if not again:
                    raise
                log.log(_outage.level(), "%s of job %s failed (%s); trying again in %.1f s "
                        "while its lease lasts", method, job.id, exc, pause)
                await asyncio.sleep(pause)
                pause = min(RETRY_MAX, pause * 2)

    # -- failure hooks -------------------------------------------------------------------

    def _start_hooks(self, aq: AsyncQueue, job: Job, written: Outcome, state: JobState | None,
                     task: Task[Any, Any] | None) -> None:
        """Call the failure hooks the written outcome calls, in a task of their own: the
        job leaves the worker's books first, so a slow hook is never taken for a job that
        holds a lease (heartbeats, shutdown)."""
        if task is None or written.exc is None:
            return
        hooks = [(which, hook) for which in decide.hooks(written, state)
                 if (hook := task.hook(which)) is not None]
        if not hooks:
            return
        runner = asyncio.create_task(self._call_hooks(aq, job.id, written.exc, hooks, task.name),
                                     name=f"leaseq-hooks-{job.id}")
        self._hook_runs.add(runner)
        runner.add_done_callback(self._hook_runs.discard)

    async def _call_hooks(self, aq: AsyncQueue, job_id: int, exc: BaseException,
                          hooks: list[tuple[Hook, FailureHook]], task: str) -> None:
        try:
            info = await aq.get(job_id)  # the job as the failure left it
        except LeaseqError as error:
            log.error("job %s: failure hooks not called, the job could not be read (%s)",
                      job_id, error)
            return
        for which, hook in hooks:
            await _hooks.call_async(hook, info, exc, task, which, self._hook_pool)

    async def _finish_hooks(self) -> None:
        """Shutdown: hooks still running get ``grace`` seconds, then are cancelled."""
        if not self._hook_runs:
            return
        _, late = await asyncio.wait(set(self._hook_runs), timeout=self.grace)
        for runner in late:
            runner.cancel()
        if late:
            log.warning("%d failure hooks still running at shutdown were cancelled", len(late))

    async def _drain(self, aq: AsyncQueue) -> None:
        """Shutdown: let running jobs finish within grace, then give the rest back."""
        if not self.inflight:
            return
        running = [runner for _, runner in self.inflight.values() if not runner.done()]
        if running:
            log.info("waiting up to %.0f s for %d running jobs", self.grace, len(running))
            await asyncio.wait(running, timeout=self.grace)
        # Finished jobs are completed, not given back.
        await self._bounded(self._completer.flush(), "pending acks")
        await self._bounded(self._give_back(aq), "giving back jobs")
        await self._bounded(asyncio.gather(*(r for _, r in list(self.inflight.values())),
                                           return_exceptions=True), "cancelled jobs")

    async def _give_back(self, aq: AsyncQueue) -> None:
        for ctx, runner in list(self.inflight.values()):
            ctx.shutting_down = True
            runner.cancel()
            try:
                try:
                    await aq.release(ctx.job)
                except NotReplicated as exc:  # given back on the primary
                    unreplicated(exc, f"give-back of job {ctx.job.id}")
                log.info("job %s given back at shutdown", ctx.job.id)
                if self._metrics is not None:
                    self._metrics.finished(ctx.job, "released")
            except LeaseqError as exc:
                log.warning("job %s not given back (%s); its lease will expire", ctx.job.id, exc)
                # A lost lease or a cancel was counted by the job's own _record.
                if (self._metrics is not None and isinstance(exc, LeaseLost)
                        and not (ctx.lease_lost or ctx.cancelled)):
                    self._metrics.finished(ctx.job, "lease_lost")

    # -- maintenance ---------------------------------------------------------------------

    async def _maintenance(self, aq: AsyncQueue) -> None:
        next_prune = 0.0  # the first pass prunes; the passes' jitter spreads a fleet
        while True:
            # Jitter keeps a fleet of workers from reclaiming in step.
            await asyncio.sleep(self._reclaim_every * random.uniform(0.5, 1.5))
            try:
                reclaimed = await aq.reclaim()
                if reclaimed:
                    log.info("reclaimed %d jobs whose lease expired", reclaimed)
                    self._wake_soon()
                if self.prune_after is not None and time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + 3600 * random.uniform(0.9, 1.1)
                    pruned = await aq.prune(older_than=self.prune_after)
                    if pruned:
                        log.info("pruned %d history rows", pruned)
            except LeaseqError as exc:
                log.log(_outage.level_for(exc), "maintenance failed, will retry: %s", exc)
            if not self._outage:
                self._wake_soon()  # the fetch loop finds out, and reports it




def _event_loop_runner() -> Callable[[Coroutine[Any, Any, int]], int]:
    """uvloop's runner when it is installed (the ``fast`` extra): its loop and transports
    are written in C and cut the worker's own latency; else asyncio's."""
    if os.environ.get("LEASEQ_NO_UVLOOP"):
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def _outcome_label(written: Outcome, state: JobState | None, cancelled: bool) -> str:
    """The ``outcome`` label of a written failure, snooze or cancel: a nack that left the
    job waiting is a retry, a ``RetryAfter`` a snooze; a nack that used up its attempts, a
    snooze past ``max_snoozes``, a bury (unknown task included) and a discard all end the
    job's runs (``dead``)."""
    if written.action == "release" and written.note is not None and not cancelled:
        return "released"  # a job of an unknown task, handed back
    if cancelled or written.action == "release":
        return "cancelled"
    if written.action == "snooze":  # put back by RetryAfter: no attempt used
        return {"dead": "dead", "cancelled": "cancelled"}.get(state or "", "snoozed")
    if written.action == "nack" and state not in ("dead", "discarded"):
        return "retried"
    return "dead"


def _traced_outcome(ctx: JobContext, written: Outcome, handed_off: bool) -> str:
    """The run span's ``leaseq.job.outcome``, in the metrics' words, as the worker decided
    it: a failure leaves the job dead when it used its last attempt (what the backend
    does), else it is retried. A result that could not be stored (an ack not handed off)
    failed the attempt."""
    if ctx.lease_lost:
        return "lease_lost"
    if ctx.cancelled:
        return "cancelled"
    if written.action == "ack" and handed_off:
        return "completed"
    if written.action == "release":
        return "released"
    if written.action == "snooze":
        return "snoozed"
    if written.action in ("bury", "discard"):
        return "dead"
    return "dead" if ctx.job.attempts >= ctx.job.max_attempts else "retried"


def _run_sync(ctx: JobContext, task: Task[Any, Any], payload: dict[str, Any]) -> Any:
    """Runs in a pool thread with the job as ``current_job()``."""
    if ctx.should_stop:
        raise asyncio.CancelledError  # given back before it started
    set_current(ctx)
    ctx.started = True
    try:
        conversion = task.conversion  # None for plain tasks: nothing to convert
        if conversion is None:
            return task.fn(**payload)
        result = task.fn(**conversion.load_arguments(payload))
        return conversion.dump_result(result)
    finally:
        set_current(None)
