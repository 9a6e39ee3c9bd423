"""Scale on the SQL backends: claim latency and drain rate against backlog size, and drain
rate against worker processes, written as JSON and drawn as PNG plots.

    python benchmarks/scale.py --out benchmarks/
    python benchmarks/scale.py --out /tmp/s --backends sqlite --sizes 1000,10000 --quick

Per backend (SQLite in a temporary file, PostgreSQL, MariaDB/MySQL), on one fresh table
prefix dropped at the end:

1. **Backlog sweep.** For each size B (1k, 10k, 100k, 1M by default) the queue is filled
   with ``enqueue_many`` batches of 5,000 to B waiting jobs, then given what the server's
   own maintenance would soon give it (``backlog.analyze``: ANALYZE; on PostgreSQL VACUUM
   (ANALYZE), as autovacuum does after that many inserts or deletes). Then, from one client,
   ``--samples`` claims of a batch of ``--batch`` jobs (``dequeue(limit=batch)`` alone
   timed; acked untimed) and ``--samples`` claim+ack pairs of one job, in ``--repeats``
   rounds (the figures are the median over rounds of each round's percentile); taken jobs
   are replaced, so the backlog stays at B. Then ``--drain-jobs`` N more jobs are added and one
   ``leaseq worker`` process drains N jobs off the top of the B + N (the oldest first):
   the worker starts against a paused queue, the clock starts when the queue is resumed and
   stops when the N-th handler has run (counted by ``benchmarks.adapters.base.record``).
   ``--repeats`` drains, each from a freshly maintained table; after the last one the claims are
   timed again, before any VACUUM: the N jobs just claimed and finished are dead entries
   at the head of PostgreSQL's claim index until VACUUM removes them. On PostgreSQL each
   latency step also records the dead tuples and one claim's ``EXPLAIN (ANALYZE,
   BUFFERS)``: run time and claim-index pages touched.
2. **Worker sweep.** At a fixed backlog (``--workers-backlog``, 100k by default), the same
   drain of ``--workers-jobs`` jobs by 1, 2, 4 and 8 worker processes, each from a
   maintained table.

Each drain also reports how busy all CPUs were while it ran (``/proc/stat``) and the CPU
seconds its worker processes used: when the CPUs are near 100 % the machine, not the
database, sets the rate. Before each measurement the script waits up to ``--idle-wait``
seconds for the CPUs to be idle, and records the busiest reading it started from.

Writes ``scale.json`` (every figure) and ``scale-*.png`` (``scale_plot.py``) into ``--out``.
Needs matplotlib (``benchmarks/requirements-scale.txt``); leaseq does not.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import leaseq  # noqa: E402
from benchmarks import scale_plot  # noqa: E402
from benchmarks.adapters import base  # noqa: E402
from benchmarks.adapters.leaseq_adapter import PREFIX_ENV, QUEUE, URL_ENV  # noqa: E402
from benchmarks.backlog import analyze, claim_latencies, fill, sizes_of  # noqa: E402
from benchmarks.run import (  # noqa: E402
    SERVERS,
    cpu_busy,
    cpu_by_process,
    machine_info,
    server_versions,
    wait_idle,
)
from leaseq.bench import percentile  # noqa: E402

KIND = "noop"  # the no-op task of benchmarks.adapters.leaseq_adapter:app
PAYLOAD = {"t": 0.0}
START_TIMEOUT = 60.0


def backend_urls() -> dict[str, str]:
    """The SQL backends to measure: the PostgreSQL and MySQL servers of the benchmark
    harness (``LEASEQ_BENCH_PG``, ``LEASEQ_BENCH_MYSQL``), SQLite in a temporary file."""
    path = Path(tempfile.gettempdir()) / f"lqscale_{secrets.token_hex(4)}.db"
    return {"sqlite": f"sqlite:///{path}", "postgres": base.PG_DSN, "mysql": base.MYSQL_URL}


def parse_ints(text: str) -> list[int]:
    """``"1000,10k,1M"`` -> ``[1000, 10000, 1000000]``: comma-separated counts, with an
    optional k or M suffix."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1:], 1)
        digits = part[:-1] if scale != 1 else part
        try:
            value = int(float(digits) * scale)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a count: {part!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"counts must be positive: {part!r}")
        out.append(value)
    return out


def latency_summary(latencies: list[float]) -> dict[str, float]:
    """p50/p95/p99 in milliseconds of sorted ``latencies`` (nearest rank)."""
    return {f"p{p}_ms": round(percentile(latencies, p) * 1000, 3) for p in (50, 95, 99)}


def rounds_summary(rounds: list[list[float]]) -> dict[str, Any]:
    """The median over rounds of each round's p50/p95/p99 (ms), and each round's p50."""
    each = [latency_summary(r) for r in rounds]
    out: dict[str, Any] = {key: round(statistics.median(s[key] for s in each), 3)
                           for key in each[0]}
    out["rounds_p50_ms"] = [s["p50_ms"] for s in each]
    return out


def cpu_ticks() -> tuple[int, int]:
    """(all, idle) jiffies over every CPU so far, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return sum(vals), vals[3] + vals[4]


def busy_between(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Fraction of all CPUs busy between two ``cpu_ticks`` readings."""
    total = after[0] - before[0]
    return round(1 - (after[1] - before[1]) / total, 3) if total > 0 else float("nan")


def cpu_delta(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
              pids: list[int] | None = None, names: set[str] | None = None) -> float:
    """CPU seconds used between two ``cpu_by_process`` snapshots by the processes ``pids``,
    or by every process named in ``names`` (one that started in between counts whole)."""
    total = 0.0
    for pid, (name, cpu) in after.items():
        if (pids is not None and pid in pids) or (names is not None and name in names):
            total += cpu - before.get(pid, (name, 0.0))[1]
    return total


class Scale:
    """One backend's measurements on its own table prefix; ``close`` drops the tables."""

    def __init__(self, name: str, url: str, args: argparse.Namespace) -> None:
        self.name, self.url, self.args = name, url, args
        self.prefix = f"lqscale{secrets.token_hex(3)}_"
        self.q = leaseq.connect(url, table_prefix=self.prefix, reclaim_interval=None)
        self.q.migrate()
        self.waiting = 0  # jobs this script believes are waiting in the queue
        self.busiest = 0.0  # the busiest CPU reading a measurement started from

    def close(self) -> None:
        drop = getattr(self.q._backend, "drop", None)
        if drop is not None:
            drop()
        self.q.close()
        if self.url.startswith("sqlite:///"):
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.url.split("sqlite:///", 1)[1] + suffix)

    def settle(self) -> float:
        """Waits for idle CPUs (up to --idle-wait s); returns and records how busy they were."""
        busy = wait_idle(self.args.idle_wait) if self.args.idle_wait > 0 else cpu_busy(0.2)
        self.busiest = max(self.busiest, busy)
        return round(busy, 3)

    def fill_to(self, target: int) -> float:
        """Tops the queue up to ``target`` waiting jobs; returns the seconds it took."""
        started = time.perf_counter()
        if target > self.waiting:
            fill(self.q, QUEUE, target - self.waiting, KIND, PAYLOAD)
            self.waiting = target
        return time.perf_counter() - started

    def recount(self) -> None:
        """Reads the real number of waiting jobs (a drain's workers may take a few more than
        asked before they stop)."""
        self.waiting = self.q.stats()[QUEUE].available

    def maintain(self) -> None:
        """What the server's own maintenance does soon after a bulk change: ANALYZE, and on
        PostgreSQL VACUUM (``backlog.analyze``)."""
        analyze(self.url, self.prefix, vacuum=True)

    def latencies(self) -> dict[str, Any]:
        """Claim of a batch, and claim+ack of one job, at the current backlog; on
        PostgreSQL also the claim's plan and the table's dead tuples before them."""
        a = self.args
        probe = pg_probe(self.url, self.prefix, a.batch) if self.name == "postgres" else {}
        busy = self.settle()
        batches, singles = [], []
        for _ in range(a.repeats):  # rounds: a burst of load elsewhere spoils one, not all
            batches.append(claim_latencies(self.q, QUEUE, a.samples, limit=a.batch,
                                           ack=False, kind=KIND, payload=PAYLOAD))
            singles.append(claim_latencies(self.q, QUEUE, a.samples, limit=1, ack=True,
                                           kind=KIND, payload=PAYLOAD))
        return {"busy_before": busy, "claim_batch": rounds_summary(batches),
                "claim_ack": rounds_summary(singles), **probe}

    def drain(self, jobs: int, workers: int) -> dict[str, Any]:
        """``workers`` worker processes drain ``jobs`` jobs off the top of the queue."""
        if self.waiting < jobs:
            raise RuntimeError(f"{self.waiting} jobs waiting, fewer than the {jobs} to drain")
        self.q.pause(QUEUE)
        rec = base.Recorder()
        command = [sys.executable, "-m", "leaseq.cli", "worker",
                   "benchmarks.adapters.leaseq_adapter:app", "--queues", QUEUE,
                   "--poll-interval", "0.05", "--log-level", "INFO"]
        ws = base.Workers([command] * workers,
                          {URL_ENV: self.url, PREFIX_ENV: self.prefix} | rec.env())
        try:
            busy = self.settle()
            ws.start()
            wait_started(ws)
            pids = [p.pid for p in ws.procs]
            procs_before = cpu_by_process()
            ticks = cpu_ticks()
            ws.started = time.perf_counter()
            self.q.resume(QUEUE)
            timing = ws.wait_for(rec, jobs, base.drain_timeout(jobs))
            ticks_after = cpu_ticks()
            procs_after = cpu_by_process()
        finally:
            ws.stop()
            rec.close()
            self.q.resume(QUEUE)
        self.recount()
        return {
            "workers": workers,
            "jobs": jobs,
            "seconds": round(timing.last, 3),
            "jobs_per_s": round(jobs / timing.last),
            "steady_jobs_per_s": round(timing.steady_rate),
            "cpu_busy": busy_between(ticks, ticks_after),
            # CPU seconds while draining (resume to the last job) of the worker processes
            # and of the database server's processes (none for SQLite: it runs in the
            # workers); the CPU capacity of the window is cores times seconds.
            "worker_cpu_s": round(cpu_delta(procs_before, procs_after, pids=pids), 3),
            "server_cpu_s": round(cpu_delta(procs_before, procs_after, names=SERVERS), 3),
            "cores_x_seconds": round((os.cpu_count() or 1) * timing.last, 3),
            "busy_before": busy,
        }


def pg_probe(url: str, prefix: str, limit: int) -> dict[str, Any]:
    """PostgreSQL only: the live table's dead tuples (``pg_stat_user_tables``) and one claim
    of ``limit`` jobs under ``EXPLAIN (ANALYZE, BUFFERS)``, rolled back: its run time and
    the pages its walk of the claim index touched. Dead index entries at the head of the
    claim index (jobs claimed since the last VACUUM) show up as pages, not as rows."""
    import psycopg

    from leaseq.backends.postgres.driver import PostgresDialect

    params = {"queues": [QUEUE], "takes": [None], "limit": limit, "lease": None,
              "default_lease": 30.0, "worker_id": "scale-explain"}
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                           "WHERE relname = %s", [f"{prefix}jobs"]).fetchone()
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                            + PostgresDialect(prefix).q["claim"], params).fetchone()
        conn.rollback()
    assert plan is not None
    top = plan[0][0]
    scans = [n for n in _nodes(top) if n.get("Index Name") == f"{prefix}jobs_claim"]
    pages = sum(n.get("Shared Hit Blocks", 0) + n.get("Shared Read Blocks", 0) for n in scans)
    return {"pg": {"dead_tuples": row[1] if row else None,
                   "claim_execution_ms": round(top["Execution Time"], 3),
                   "claim_index_pages": pages}}


def _nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan tree, depth first."""
    out = []
    if isinstance(plan, dict):
        out.append(plan)
        for value in plan.values():
            out += _nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            out += _nodes(value)
    return out


def wait_started(ws: base.Workers) -> None:
    """Returns once every worker logged that it started fetching (imports done)."""
    deadline = time.monotonic() + START_TIMEOUT
    pending = set(ws.logs)
    while pending:
        for path in list(pending):
            with contextlib.suppress(OSError):
                if " started: " in Path(path).read_text(errors="replace"):
                    pending.discard(path)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} worker(s) did not start:\n{ws.log_tail()}")
        ws.check_alive()
        time.sleep(0.02)


def log(msg: str) -> None:
    print(f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def worker_sweep(scale: Scale, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Drains of ``--workers-jobs`` jobs off a backlog of ``--workers-backlog`` by each
    worker process count of ``--workers``; the queue holds that backlog before each."""
    rows = []
    for workers in args.workers:
        for _ in range(args.repeats):
            scale.fill_to(args.workers_backlog + args.workers_jobs)
            scale.maintain()
            result = scale.drain(args.workers_jobs, workers)
            result["waiting"] = args.workers_backlog
            rows.append(result)
            log(f"{scale.name} {workers} worker process(es): {result['jobs_per_s']} jobs/s, "
                f"CPUs {result['cpu_busy']:.0%} busy")
    return rows


def run_backend(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both sweeps on one backend; its tables are dropped whatever happens."""
    scale = Scale(name, url, args)
    out: dict[str, Any] = {"backlog": [], "workers": []}
    try:
        for size in args.sizes:
            load = scale.fill_to(size)
            scale.maintain()
            row: dict[str, Any] = {"waiting": size, "load_seconds": round(load, 1)}
            row.update(scale.latencies())
            row["tables"] = sizes_of(url, scale.prefix)
            drains = []
            for _ in range(args.repeats):
                scale.fill_to(size + args.drain_jobs)
                scale.maintain()  # each drain starts from the same state
                drains.append(scale.drain(args.drain_jobs, 1))
            row["drains"] = drains
            # Again, with the last drain's claimed jobs not yet vacuumed away.
            scale.fill_to(size)
            row["after_drain"] = scale.latencies()
            out["backlog"].append(row)
            log(f"{name} {size:>9,}: claim {row['claim_batch']['p50_ms']} ms "
                f"(batch of {args.batch}), claim+ack {row['claim_ack']['p50_ms']} ms; "
                f"after a drain {row['after_drain']['claim_batch']['p50_ms']} / "
                f"{row['after_drain']['claim_ack']['p50_ms']} ms; "
                f"drain {[d['jobs_per_s'] for d in drains]} jobs/s (load {load:.1f} s)")
            if size == args.workers_backlog:
                out["workers"] = worker_sweep(scale, args)
        if args.workers and not out["workers"]:
            # Not one of the sizes: trim (claiming and acking the excess) or top up to it.
            scale.recount()
            while scale.waiting > args.workers_backlog:
                taken = scale.q.dequeue(QUEUE, limit=min(5000, scale.waiting -
                                                          args.workers_backlog),
                                        worker_id="scale-trim")
                scale.q.ack_many(taken)
                scale.waiting -= len(taken)
            scale.fill_to(args.workers_backlog)
            out["workers"] = worker_sweep(scale, args)
    finally:
        out["busiest_before"] = round(scale.busiest, 3)
        scale.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "benchmarks"),
                        help="directory for scale.json and the PNGs (default: benchmarks/)")
    parser.add_argument("--backends", default="sqlite,postgres,mysql")
    parser.add_argument("--sizes", type=parse_ints, default=parse_ints("1k,10k,100k,1M"),
                        help="backlog sizes, ascending (default 1k,10k,100k,1M)")
    parser.add_argument("--samples", type=int, default=200,
                        help="timed claims of each kind per round (default 200)")
    parser.add_argument("--batch", type=int, default=100,
                        help="jobs per timed batch claim (default 100)")
    parser.add_argument("--drain-jobs", type=int, default=20_000,
                        help="jobs one worker drains at each backlog size (default 20,000)")
    parser.add_argument("--workers", type=parse_ints, default=parse_ints("1,2,4,8"),
                        help="worker process counts of the worker sweep (default 1,2,4,8)")
    parser.add_argument("--workers-backlog", type=int, default=100_000)
    parser.add_argument("--workers-jobs", type=int, default=40_000,
                        help="jobs drained per worker-sweep measurement (default 40,000)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="drains, and rounds of claims, per point; the tables and "
                             "plots show the median (default 3)")
    parser.add_argument("--idle-wait", type=float, default=5.0,
                        help="seconds to wait for idle CPUs before each measurement")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 50 samples, 2,000-job drains, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.drain_jobs, args.workers_jobs, args.repeats = 50, 2000, 2000, 1
        args.workers_backlog = min(args.workers_backlog, 10_000)
    if args.sizes != sorted(args.sizes):
        parser.error("--sizes must be ascending: each size tops up the one before")
    urls = backend_urls()
    unknown = set(args.backends.split(",")) - set(urls)
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}; choose from {sorted(urls)}")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "started": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "command": " ".join(["python benchmarks/scale.py", *(argv or sys.argv[1:])]),
        "options": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": machine_info() | {"load_average": os.getloadavg()[0]},
        "versions": server_versions() | {"leaseq": leaseq.__version__,
                                         "python": sys.version.split()[0]},
        "backends": {},
    }
    for name in args.backends.split(","):
        log(f"{name}: starting")
        report["backends"][name] = run_backend(name, urls[name], args)
    report["finished"] = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    (out_dir / "scale.json").write_text(json.dumps(report, indent=1) + "\n")
    for path in scale_plot.plot(report, out_dir):
        log(f"wrote {path}")
    print(scale_plot.markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
