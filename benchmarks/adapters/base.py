"""The interface every benchmarked system implements, and the helpers adapters share.

Keep this module light: worker processes of every system import it (for `record`), so it
must not import any queue library.

Measurement plumbing, the same for every system:

* **Completion counter.** Each job's handler calls `record(enqueued_at)` first thing. It
  appends one 8-byte little-endian double, `time.time() - enqueued_at`, to the file named
  by the `LEASEQ_BENCH_RECORD` environment variable, with one `os.write` on an `O_APPEND`
  descriptor (atomic for 8 bytes, across processes and threads; about a microsecond). The
  parent reads the file's size with `os.stat` every 10 ms: size / 8 is the number of jobs
  started. No network round trip, no lock, nothing shared with the system under test.
* **Worker processes.** `Workers` starts real OS processes (the system's own worker command),
  each in its own session, output to a log file; `stop()` sends SIGTERM to the process group,
  waits, then SIGKILLs it. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "benchmarks"

PG_DSN = os.environ.get("LEASEQ_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("LEASEQ_BENCH_MYSQL", "mysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("LEASEQ_BENCH_REDIS", "redis://127.0.0.1:6379/0")

RECORD_ENV = "LEASEQ_BENCH_RECORD"
# Worker log level. "warning" (the default) turns off the per-job INFO lines that huey,
# procrastinate and RQ print by default: they are output formatting, not queue work, and
# leaseq's workers run at WARNING too. LQBENCH_LOG=default keeps each system's own default.
QUIET_LOGS = os.environ.get("LQBENCH_LOG", "warning") != "default"
BATCH = 1_000  # batch size for enqueue_batch, unless a system's maximum is lower
PRODUCERS = 32  # threads (or asyncio tasks) of enqueue_concurrent: a web app's request workers
POLL = 0.010  # the parent polls the completion counter this often


@runtime_checkable
class Adapter(Protocol):
    """One system on one backend. `run.py` calls setup() before and teardown() after every
    single measurement, so each one starts on fresh, empty storage."""

    name: str  # e.g. "pgqueuer", "huey-sqlite", "leaseq-postgres"
    backend: str  # "postgres", "mysql", "sqlite", "redis"

    def available(self) -> str | None:
        """None when runnable, else why not (import error, server down)."""
        ...

    def setup(self) -> None:
        """Fresh, empty tables/keys/schema of its own (unique names; never touch other data)."""
        ...

    def teardown(self) -> None:
        """Remove what setup made; stop anything still running."""
        ...

    def enqueue_single(self, n: int) -> float:
        """Seconds to enqueue n no-op jobs one call at a time, from one process."""
        ...

    def enqueue_batch(self, n: int) -> float:
        """Seconds to enqueue n jobs with the system's batch API, in batches of `BATCH`
        (or the system's maximum). Raise NotImplementedError when there is no batch API."""
        ...

    def drain(self, n: int, workers: int) -> float:
        """Enqueue n no-op jobs (untimed), start `workers` worker OS processes; seconds from
        starting them until the n-th job is observed (see `Workers.wait_for`)."""
        ...

    def pickup_latency(self, rate: float, seconds: float) -> list[float]:
        """One worker process; enqueue at a steady `rate` jobs/s for `seconds`, each job
        carrying its enqueue time.time(); return (handler start - enqueue) for each job."""
        ...


# Optional methods run.py calls when an adapter has them (else the workload is n/a):
#   enqueue_concurrent(n) -> float        seconds for `PRODUCERS` producers of one process,
#                                         each enqueueing one job per call, n jobs in all,
#                                         in the system's natural web-app shape (threads for
#                                         a sync client, tasks for an async-only one);
#                                         see `threads_enqueue` and `tasks_enqueue`
#   enqueue_concurrent_async(n) -> float  the same with `PRODUCERS` asyncio tasks on one
#                                         event loop (systems with an asyncio client)
# Optional attributes run.py reads with getattr, when an adapter has them:
#   config: str                       one line for the method section: what was chosen
#   last_drain: DrainTiming | None    set by drain(); run.py reports the steady rate too


# --------------------------------------------------------------------------- handler side

_PACK = struct.Struct("<d").pack
_fd: int | None = None
_fd_pid = -1


def record(enqueued_at: float) -> None:
    """Called first thing by every benchmark job handler, in the worker process."""
    global _fd, _fd_pid
    now = time.time()
    if _fd is None or _fd_pid != os.getpid():  # per process: prefork pools fork after import
        _fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND)
        _fd_pid = os.getpid()
    os.write(_fd, _PACK(now - enqueued_at))


# ---------------------------------------------------------------------------- parent side


def threads_enqueue(n: int, enqueue: Callable[[], object], producers: int = PRODUCERS) -> float:
    """Seconds for `producers` threads to make n `enqueue()` calls in all, one at a time
    each (a web app's request threads, each enqueueing one job per request). The threads
    are started and parked on a barrier first, so thread start-up is not timed."""
    import threading

    left = [n]
    lock = threading.Lock()
    gate = threading.Barrier(producers + 1)
    errors: list[BaseException] = []

    def produce() -> None:
        gate.wait()
        try:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                enqueue()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, daemon=True) for _ in range(producers)]
    for t in threads:
        t.start()
    gate.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


async def tasks_enqueue(
    n: int, enqueue: Callable[[], Awaitable[object]], producers: int = PRODUCERS
) -> float:
    """Seconds for `producers` asyncio tasks to make n `await enqueue()` calls in all, one
    at a time each (an async web app's concurrent requests)."""
    import asyncio

    left = [n]

    async def produce() -> None:
        while left[0] > 0:
            left[0] -= 1
            await enqueue()

    start = time.perf_counter()
    await asyncio.gather(*(produce() for _ in range(producers)))
    return time.perf_counter() - start


def unique_name(system: str) -> str:
    """A name no other run (or other data) uses: lqbench_<system>_<12 hex>."""
    return f"lqbench_{system}_{uuid.uuid4().hex[:12]}"


class Recorder:
    """The file the handlers append to. One per measurement."""

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="lqbench-", suffix=".rec")
        os.close(fd)
        self.path = path

    def env(self) -> dict[str, str]:
        return {RECORD_ENV: self.path}

    def count(self) -> int:
        return os.stat(self.path).st_size // 8

    def latencies(self) -> list[float]:
        data = Path(self.path).read_bytes()
        data = data[: len(data) // 8 * 8]
        return [v for (v,) in struct.iter_unpack("<d", data)]

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class DrainTiming:
    """What drain observed: seconds from worker start to the first and to the n-th job."""

    def __init__(self, n: int, first: float, last: float) -> None:
        self.n, self.first, self.last = n, first, last

    @property
    def steady_rate(self) -> float:
        """Jobs/s between the first and the n-th job: the rate without worker start-up."""
        span = self.last - self.first
        return (self.n - 1) / span if span > 0 else float("nan")


class WorkerDied(RuntimeError):
    pass


class Workers:
    """Real worker OS processes for one measurement, always stopped at the end."""

    def __init__(self, commands: Sequence[Sequence[str]], env: dict[str, str]) -> None:
        self.commands = [list(c) for c in commands]
        self.env = {**os.environ, **env}
        # Workers import `benchmarks.adapters.*` from the repository root.
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[str] = []
        self.started = 0.0

    def start(self) -> float:
        """Start every command; returns the perf_counter() just before the first starts."""
        self.started = time.perf_counter()
        for cmd in self.commands:
            fd, path = tempfile.mkstemp(prefix="lqbench-worker-", suffix=".log")
            self.logs.append(path)
            try:
                self.procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=str(REPO),
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=fd,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # own process group: stop() gets children too
                    )
                )
            finally:
                os.close(fd)
        return self.started

    def log_tail(self, chars: int = 1500) -> str:
        out = []
        for path in self.logs:
            with contextlib.suppress(OSError):
                out.append(Path(path).read_text(errors="replace")[-chars:])
        return "\n---\n".join(out)

    def check_alive(self) -> None:
        for proc in self.procs:
            code = proc.poll()
            if code is not None:
                raise WorkerDied(f"worker {proc.args!r} exited with {code}:\n{self.log_tail()}")

    def wait_for(self, rec: Recorder, n: int, timeout: float) -> DrainTiming:
        """Poll the counter every 10 ms until it reaches n. Times are from start()."""
        deadline = time.perf_counter() + timeout
        first = None
        checks = 0
        while True:
            c = rec.count()
            now = time.perf_counter()
            if first is None and c > 0:
                first = now - self.started
            if c >= n:
                return DrainTiming(n, first if first is not None else now, now - self.started)
            if now > deadline:
                raise TimeoutError(f"{c} of {n} jobs seen after {timeout:.0f} s")
            checks += 1
            if checks % 50 == 0:
                self.check_alive()
            time.sleep(POLL)

    def stop(self, grace: float = 10.0) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            # SIGKILL the whole group: pool children may outlive a parent that exited.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(timeout=10)
        for path in self.logs:
            if os.environ.get("LEASEQ_BENCH_KEEP_LOGS"):
                print(f"    worker log kept: {path}", file=sys.stderr)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self.procs, self.logs = [], []


def drain_timeout(n: int) -> float:
    """Deadline for draining n jobs: generous (50 jobs/s), never below a minute."""
    return max(60.0, n / 50.0)


def run_drain(commands: Sequence[Sequence[str]], env: dict[str, str], rec: Recorder, n: int,
              on_timing: Callable[[DrainTiming], None] | None = None) -> float:
    """Start the workers, wait for n jobs, stop them. Returns seconds start -> n-th job."""
    ws = Workers(commands, env | rec.env())
    try:
        ws.start()
        timing = ws.wait_for(rec, n, drain_timeout(n))
    finally:
        ws.stop()
    if on_timing is not None:
        on_timing(timing)
    return timing.last


def run_pickup(
    command: Sequence[str],
    env: dict[str, str],
    rec: Recorder,
    enqueue: Callable[[float], object],
    rate: float,
    seconds: float,
    warmup: int = 3,
) -> list[float]:
    """One worker; warm it up with `warmup` jobs (waited for, then dropped), then call
    `enqueue(time.time())` at a steady `rate` for `seconds` and wait for every job.

    The producer keeps a fixed schedule (job i is due at start + i/rate); when an enqueue
    call runs late, the next ones are sent at once until it is back on schedule."""
    ws = Workers([command], env | rec.env())
    try:
        ws.start()
        for i in range(warmup):
            enqueue(time.time())
            ws.wait_for(rec, i + 1, 120.0)
        total = round(rate * seconds)
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            enqueue(time.time())
        ws.wait_for(rec, warmup + total, max(60.0, seconds * 10))
    finally:
        ws.stop()
    return rec.latencies()[warmup:]


def venv_script(name: str) -> str:
    """Path of a console script installed next to this interpreter (the bench venv)."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def pkg_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def check_redis() -> str | None:
    try:
        import redis
    except ImportError as exc:
        return f"redis client not installed: {exc}"
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        return f"Redis at {REDIS_URL} does not answer: {exc}"
    return None


def check_postgres() -> str | None:
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg not installed: {exc}"
    try:
        with psycopg.connect(PG_DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_DSN} does not answer: {exc}"
    return None


def analyze_pg(*tables: str) -> None:
    """ANALYZE tables that were just filled, before a drain. On a live database autovacuum
    does this within a minute of a bulk insert; without it the planner knows nothing of a
    fresh table, and some queues' claim queries pick a plan hundreds of times slower (the
    drain would measure the missing statistics, not the queue)."""
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"ANALYZE {table}")


def delete_redis_keys(pattern: str) -> int:
    """Delete the keys matching `pattern` (always one of our unique names) with SCAN."""
    import redis

    r = redis.Redis.from_url(REDIS_URL)
    deleted = 0
    batch: list[bytes] = []
    for key in r.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += r.delete(*batch)
            batch = []
    if batch:
        deleted += r.delete(*batch)
    r.close()
    return deleted
