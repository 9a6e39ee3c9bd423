"""``leaseq worker --processes N``: N worker processes under one supervisor.

The supervisor is the process the command started. It runs no jobs; it starts N children,
each an OS process running one ``Worker`` with the same options, and then:

* **restarts a child that ended unasked** (a crash, a kill, a handler that called
  ``os._exit``) after a back-off that doubles while the restarted child keeps dying young
  (``RESTART_DELAY`` up to ``RESTART_DELAY_MAX``; a child that ran ``STABLE_AFTER`` seconds
  resets it), so a crash loop costs a start every half minute, not a spinning CPU. Each
  restart is logged with the exit code. In ``--burst`` runs a child that exits 0 has
  emptied its queues and is not restarted;
* **does not restart what a restart cannot cure**: a child that exits 78 (``EX_CONFIG``:
  bad URL or credentials, unknown database, tables missing or older than this leaseq)
  or 69 (``EX_UNAVAILABLE``: the database stayed unreachable for ``--start-timeout``)
  stops the group, and the supervisor exits with that code (worker/startup.py);
* **stops the group on SIGTERM or SIGINT**: it asks every child to stop as a first signal
  would (each stops fetching and lets its running jobs finish within ``grace``) and waits
  for them; a child still alive ``grace + STOP_MARGIN`` seconds later is killed. A second
  signal kills every child at once. The exit code is 0 when every child stopped with 0,
  the code of a child that exited 78 or 69 (below), else 1;
* **leaves no orphans**: each child watches its pipe to the supervisor; when the
  supervisor dies (even by SIGKILL) the pipe closes and the child stops as on SIGTERM,
  and exits by itself ``grace + STOP_MARGIN`` seconds later at the latest.

Children are started with the ``spawn`` method: a fresh interpreter that imports the app
by ``MODULE:APP``, exactly as ``leaseq worker`` does. ``fork`` would copy the supervisor's
threads' state (the metrics server, the database client that reads the queue state) and
whatever the app's import opened (connection pools, tracing exporters) into every child,
where they are unsafe to use; a spawned child owns everything it uses, and a restart
behaves like the first start.

The stop request travels over the pipe rather than as a forwarded signal on purpose: a
terminal's Ctrl-C and systemd's default ``KillMode=control-group`` already signal every
process of the group, and a forwarded signal on top would be each child's second one,
which means "exit at once". A request over the pipe counts as no signal, so a child sees
one stop however many routes it came by, and the second Ctrl-C still exits at once.

With metrics on, each child serves its ``WorkerMetrics`` on a loopback port chosen by the
kernel and reports the port over the pipe; the supervisor serves one endpoint whose
``GroupMetrics`` sums the children and reads the queue state once (docs/workers.md).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from leaseq.errors import ConfigurationError, LeaseqError
from leaseq.tasks import App
from leaseq.worker import logs
from leaseq.worker.startup import EX_CONFIG, EX_UNAVAILABLE
from leaseq.worker.worker import Worker

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    # prometheus-client is imported only when metrics are on
    from leaseq.metrics import GroupMetrics, WorkerMetrics

log = logging.getLogger("leaseq.supervisor")

RESTART_DELAY = 0.5
"""Seconds before a child that ended unasked is started again; doubled for each further
early death in a row..."""
RESTART_DELAY_MAX = 30.0
"""...up to this."""
STABLE_AFTER = 30.0
"""A child that ran this many seconds before it died is restarted after ``RESTART_DELAY``
again: it was not crash-looping."""
STOP_MARGIN = 15.0
"""Seconds past ``grace`` a stopping child gets to give its jobs back and exit before it is
killed (by the supervisor, or by itself when the supervisor is gone)."""
LOG_FORMAT = logs.PROCESS_TEXT_FORMAT
"""Log lines of the supervisor and its children name the process (``leaseq-worker-2``)."""
FINAL = (EX_CONFIG, EX_UNAVAILABLE)
"""Exit codes of a child that a restart would not help (worker/startup.py): the group
stops and the supervisor exits with the same code."""


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one, which
    honours ``taskset`` and container CPU sets), else every CPU of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def restart_delay(early_deaths: int) -> float:
    """Seconds before a child is started again after its ``early_deaths``-th death in a row
    (each within ``STABLE_AFTER`` of its start): ``RESTART_DELAY`` doubled for each
    further one, capped at ``RESTART_DELAY_MAX``."""
    return min(RESTART_DELAY_MAX, RESTART_DELAY * 2.0 ** min(max(early_deaths, 1) - 1, 32))


def load_app(target: str, error: Callable[[str], Exception] = ConfigurationError) -> App:
    """Imports ``module:attr`` (attr defaults to ``app``) from the current directory or the
    path, and returns that ``leaseq.App``. A module that cannot be imported or an attribute
    that is no ``App`` raises ``error(message)`` (``ConfigurationError`` by default); what
    the module itself raises while imported propagates."""
    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise error(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        raise error(f"{target!r} is not a leaseq.App (use module:attribute)")
    app.load_includes()
    return app


@dataclass(frozen=True)
class WorkerOptions:
    """What each child builds its ``Worker`` from (sent to it pickled, so plain values
    only). The fields are ``leaseq worker``'s options of the same names."""

    target: str
    """``MODULE:APP`` of the app to run."""
    url: str | None = None
    """Replaces the app's database URL when set."""
    queues: tuple[str, ...] | None = None
    concurrency: int | None = None
    lease: float | None = None
    grace: float = 30.0
    poll_interval: float = 1.0
    reclaim_interval: float = 5.0
    prune_after: float | None = None
    burst: bool = False
    log_level: str = "INFO"
    log_format: str = "text"
    log_jobs: bool = False
    unknown_task_delay: float | None = None
    unknown_task_grace: float | None = None
    start_timeout: float | None = None
    metrics: bool = False
    """Record ``WorkerMetrics`` and serve them on a loopback port for the supervisor."""

    def build(self, app: App, metrics: WorkerMetrics | None = None) -> Worker:
        """The ``Worker`` these options describe, on ``app``."""
        return Worker(app, list(self.queues) if self.queues else None,
                      concurrency=self.concurrency, lease=self.lease, grace=self.grace,
                      poll_interval=self.poll_interval, reclaim_interval=self.reclaim_interval,
                      prune_after=self.prune_after, burst=self.burst, metrics=metrics,
                      log_jobs=self.log_jobs, unknown_task_delay=self.unknown_task_delay,
                      unknown_task_grace=self.unknown_task_grace,
                      start_timeout=self.start_timeout)

    def load(self) -> App:
        """The app, with ``url`` applied."""
        app = load_app(self.target)
        if self.url:
            app.url = self.url
        return app


@dataclass
class _Child:
    """One slot of the group and the process that fills it now."""

    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    started: float = 0.0
    early_deaths: int = 0  # in a row, each within STABLE_AFTER of its start
    restart_at: float | None = None
    done: bool = False  # a burst child that emptied its queues
    stopped: int | None = None  # its exit code once the group was asked to stop


class Supervisor:
    """Runs ``processes`` children, each a ``Worker`` built from ``options``, until stopped.

    Args:
        options: The workers' options; ``options.metrics`` is set by the supervisor when
            ``metrics_port`` is given.
        processes: How many children, at least 1.
        metrics_port: Serve the group's metrics on this port (0: any free port). Default
            None: no metrics.
        metrics_host: Address of the metrics endpoint.
        app: The app, already loaded from ``options`` (its client reads the queue state
            for the metrics); loaded again when None.

    Call ``run()`` from the main thread (it installs the SIGTERM and SIGINT handlers).
    """

    def __init__(self, options: WorkerOptions, processes: int, *,
                 metrics_port: int | None = None, metrics_host: str = "127.0.0.1",
                 app: App | None = None) -> None:
        if processes < 1:
            raise ConfigurationError(f"processes must be >= 1, got {processes}")
        self.options = replace(options, metrics=metrics_port is not None)
        self.app = app
        self.processes = processes
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.children = [_Child(i + 1) for i in range(processes)]
        self.restarts = 0
        # Imported here: a single-process `leaseq worker` imports this module for load_app
        # and should not pay for multiprocessing at start-up.
        import multiprocessing

        self._context = multiprocessing.get_context("spawn")
        self._signals: list[int] = []
        self._stop_by: float | None = None  # set by the first signal
        self._killed = False
        self._final = 0  # the FINAL exit code a child ended with
        self._metrics: GroupMetrics | None = None

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        """Starts the children and supervises them until they have all stopped; returns
        the exit code (0 when every child stopped cleanly)."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        # The wake-up fd is written by the C-level handler whichever thread the signal
        # lands on, so the wait below returns at once even while the metrics server's
        # thread is the one interrupted.
        previous_fd = signal.set_wakeup_fd(wake_w)
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._start_metrics()
            log.info("supervisor %d: starting %d worker processes", os.getpid(),
                     self.processes)
            for child in self.children:
                self._spawn(child)
            while not self._finished():
                self._step(wake_r)
            return self._exit_code()
        finally:
            self._kill_all()  # only a failure of the supervisor itself leaves any alive
            signal.set_wakeup_fd(previous_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
            for child in self.children:
                if child.conn is not None:
                    child.conn.close()
            if self._metrics is not None:
                self._metrics.close()

    def _step(self, wake_r: int) -> None:
        """Waits for a child to exit or talk, a signal, or the next timer; acts on it."""
        from multiprocessing.connection import wait

        waitables: list[Any] = [wake_r]
        for child in self._alive():
            assert child.process is not None
            waitables.append(child.process.sentinel)
            if child.conn is not None:
                waitables.append(child.conn)
        ready = wait(waitables, self._timeout())
        if wake_r in ready:
            os.read(wake_r, 512)
        self._handle_signals()
        for child in self.children:
            if child.conn is not None and child.conn in ready:
                self._receive(child)
            process = child.process
            if process is not None and process.sentinel in ready:
                self._reap(child)
        now = time.monotonic()
        if self._stop_by is None:
            for child in self.children:
                if child.restart_at is not None and now >= child.restart_at:
                    self._spawn(child)
        elif now >= self._stop_by and self._alive():
            for child in self._alive():
                assert child.process is not None
                log.error("worker process %d (pid %s) did not stop within %.0f s; killing it",
                          child.index, child.process.pid, self.options.grace + STOP_MARGIN)
            self._killed = True
            self._kill_all()

    def _timeout(self) -> float | None:
        timers = [c.restart_at for c in self.children
                  if c.restart_at is not None and self._stop_by is None]
        if self._stop_by is not None:
            timers.append(self._stop_by)
        return max(0.0, min(timers) - time.monotonic()) if timers else None

    def _finished(self) -> bool:
        if self._alive():
            return False
        if self._stop_by is not None or self._killed:
            return True
        return all(c.done for c in self.children)  # a burst run whose queues are empty

    def _alive(self) -> list[_Child]:
        return [c for c in self.children if c.process is not None]

    def _exit_code(self) -> int:
        if self._final:
            return self._final
        if self._killed:
            return 1
        return 0 if all(c.stopped in (None, 0) for c in self.children) else 1

    # -- children ------------------------------------------------------------------------

    def _spawn(self, child: _Child) -> None:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_child_main, args=(self.options, theirs),
                                        name=f"leaseq-worker-{child.index}")
        process.start()
        theirs.close()  # the child holds its end; ours reads EOF when the child is gone
        if child.conn is not None:
            child.conn.close()
        child.process, child.conn = process, ours
        child.started = time.monotonic()
        child.restart_at = None
        log.info("worker process %d started (pid %s)", child.index, process.pid)
        self._count_alive()

    def _receive(self, child: _Child) -> None:
        assert child.conn is not None
        try:
            message = child.conn.recv()
        except (EOFError, OSError):
            child.conn.close()
            child.conn = None  # the child is exiting; its sentinel says when it is gone
            return
        if message[0] == "metrics" and self._metrics is not None:
            self._metrics.add(child.index, message[1])

    def _reap(self, child: _Child) -> None:
        process = child.process
        assert process is not None
        process.join()
        code = process.exitcode if process.exitcode is not None else 1
        child.process = None
        if child.conn is not None:
            child.conn.close()
            child.conn = None
        if self._metrics is not None:
            self._metrics.discard(child.index)
        self._count_alive()
        if self._stop_by is not None or self._killed:
            child.stopped = code
            log.log(logging.INFO if code == 0 else logging.WARNING,
                    "worker process %d (pid %s) stopped with %s", child.index,
                    process.pid, _describe(code))
            return
        if self.options.burst and code == 0:
            log.info("worker process %d (pid %s) finished its burst", child.index, process.pid)
            child.done = True
            return
        if code in FINAL:
            child.stopped = code
            self._final = self._final or code
            log.error("worker process %d (pid %s) cannot run (%s, see its error above); not "
                      "restarting it, stopping the others", child.index, process.pid,
                      _describe(code))
            self._stop_group("a worker process cannot run")
            return
        ran = time.monotonic() - child.started
        child.early_deaths = child.early_deaths + 1 if ran < STABLE_AFTER else 1
        delay = restart_delay(child.early_deaths)
        child.restart_at = time.monotonic() + delay
        self.restarts += 1
        if self._metrics is not None:
            self._metrics.restarts = self.restarts
        log.warning("worker process %d (pid %s) exited unasked with %s after %.1f s; "
                    "restarting it in %.1f s", child.index, process.pid, _describe(code), ran,
                    delay)

    def _count_alive(self) -> None:
        if self._metrics is not None:
            self._metrics.processes = len(self._alive())

    # -- signals -------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            name = signal.Signals(signum).name
            if self._stop_by is None:
                self._stop_group(name)
            elif not self._killed:
                log.warning("second %s: killing %d worker processes; their leases will expire",
                            name, len(self._alive()))
                self._killed = True
                self._kill_all()

    def _stop_group(self, why: str) -> None:
        """Asks every child to finish its jobs and exit, as a first signal does."""
        self._stop_by = time.monotonic() + self.options.grace + STOP_MARGIN
        log.info("%s: asking %d worker processes to finish their jobs (grace %.0f s)",
                 why, len(self._alive()), self.options.grace)
        for child in self.children:
            child.restart_at = None
            if child.conn is not None:
                with contextlib.suppress(OSError):
                    child.conn.send(("stop",))

    def _kill_all(self) -> None:
        for child in self._alive():
            assert child.process is not None
            with contextlib.suppress(OSError):
                child.process.kill()
        for child in self._alive():
            self._reap(child)

    # -- metrics -------------------------------------------------------------------------

    def _start_metrics(self) -> None:
        if self.metrics_port is None:
            return
        from leaseq.metrics import GroupMetrics

        metrics = GroupMetrics()
        app = self.app or self.options.load()
        # The queue state once for the group, through the app's client of this process
        # (opened by the first scrape).
        metrics.watch(lambda: app.queue.stats(),
                      transactions=lambda: app.queue.oldest_transaction_age())
        metrics.serve(self.metrics_port, self.metrics_host)
        self._metrics = metrics


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


# -- in the child ------------------------------------------------------------------------------


class _Stopper:
    """Stops the child's worker once, whichever comes first: SIGTERM or SIGINT before the
    worker installed its own handlers, a stop request from the supervisor, or the
    supervisor's end (the pipe closes)."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.asked = False

    def stop(self) -> None:
        self.asked = True
        if self.worker is not None:
            self.worker.stop()  # before run() starts, it only marks the worker stopping

    def early_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop()


def _child_main(options: WorkerOptions, conn: Connection) -> None:
    """The body of one child process (spawned: this is its entry point)."""
    logs.configure(options.log_level, options.log_format, processes=True)
    stopper = _Stopper()
    # Until Worker.run() installs its handlers, a stop signal (a Ctrl-C during start-up)
    # is remembered rather than raised in the middle of the app's import.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stopper.early_signal)
    try:
        app = options.load()
        recorder = None
        if options.metrics:
            from leaseq.metrics import WorkerMetrics, _serve

            recorder = WorkerMetrics()
            port = _serve(recorder.registry, 0, "127.0.0.1", [], level=logging.DEBUG)
            conn.send(("metrics", port))
        worker = options.build(app, recorder)
    except LeaseqError as exc:
        log.error("worker process cannot start: %s: %s", type(exc).__name__, exc)
        sys.exit(EX_CONFIG if isinstance(exc, ConfigurationError) else 1)
    stopper.worker = worker
    if stopper.asked:
        worker.stop()
    threading.Thread(target=_watch_supervisor, args=(conn, stopper, options.grace),
                     name="leaseq-supervisor-pipe", daemon=True).start()
    sys.exit(worker.run())


def _watch_supervisor(conn: Connection, stopper: _Stopper, grace: float) -> None:
    """Stops the worker when the supervisor asks, or when it is gone (the pipe's EOF); in
    the second case exits by force if the drain overruns, so no orphan outlives it."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "stop":
            stopper.stop()
    log.warning("the supervisor is gone: finishing running jobs (grace %.0f s), then exiting",
                grace)
    stopper.stop()
    time.sleep(grace + STOP_MARGIN)
    log.error("still running %.0f s after the supervisor ended: exiting", grace + STOP_MARGIN)
    logging.shutdown()
    os._exit(1)
