"""Soak: hours of steady load, one sample a minute, to find leaks and bloat (issue 23).

    python benchmarks/soak.py --url postgresql://postgres@127.0.0.1/soak --minutes 30 --rate 500
    python benchmarks/soak.py --url postgresql://postgres@127.0.0.1/soak --minutes 40 --rate 500 \\
        --hold-snapshot-at 12 --hold-minutes 10          # S11: a REPEATABLE READ held 10 min
    python benchmarks/soak.py --url sqlite:///soak.db --minutes 3 --rate 500 --warmup 1   # smoke

What runs:

* fresh tables (a new prefix, ``leaseq.bench.Bench``; dropped at the end unless ``--keep``);
* ``--producers`` processes (2) enqueueing ``--rate`` jobs/s between them, one ``enqueue``
  per job, paced against a monotonic schedule (job k is due at start + k/rate; a producer
  that falls more than a second behind sends what it owes with one ``enqueue_many`` and
  counts a catch-up, so the offered rate is met and the shortfall is visible);
* one real ``leaseq worker benchmarks.soak:app --processes 2`` (default options) draining;
  the handler (``async def``) appends 16 bytes (its start time and its pickup latency:
  start minus the ``time.time()`` taken just before the job's ``enqueue``) to one file;
* every ``--sample-seconds`` (60) one row: jobs enqueued and started in the interval,
  p50/p99/max pickup, the backlog, each worker process's RSS (``/proc/PID/status`` VmRSS
  of the supervisor's children), the workers' open connections (their TCP sockets to the
  server, or their descriptors of the SQLite file) and the server's count for the same
  database, table and index sizes (PostgreSQL: ``pg_relation_size``/``pg_indexes_size``
  and ``n_dead_tup``; MariaDB: the InnoDB tablespace files and the purge's history list
  length; Redis: ``used_memory`` and the database's key count; SQLite: ``dbstat`` and the
  free list), the age of the oldest open transaction, and the machine's load.

After ``--minutes``, the producers stop, the workers drain, and the script waits up to
``--settle`` seconds (120) for autovacuum (PostgreSQL) or the purge (MariaDB) to catch up,
then takes a last sample. It writes ``soak-<backend>-<stamp>.csv`` and ``.png`` under
``--out`` (benchmarks/results) and prints one summary line with the goals checked (after
the warm-up: each worker's RSS grows by at most 5 %; p99 pickup of the last 5 minutes
within 1.5x of the first 5; the live jobs table and its indexes back within 10 % of their
size at the end of the warm-up). History grows by design (every finished job is archived)
and is reported apart. Give the script a database of its own (PostgreSQL/MariaDB database
``soak``, a Redis db number nobody else uses): server-side counts are per database.

Needs matplotlib for the plot (``benchmarks/requirements-soak.txt``; never a leaseq
dependency). Without it the CSV and the summary are still written.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import multiprocessing as mp
import os
import platform
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import leaseq  # noqa: E402
from leaseq.bench import Bench, percentile  # noqa: E402

QUEUE = "soak"
RECORD_ENV = "LEASEQ_SOAK_RECORD"
_REC = struct.Struct("<dd")  # handler start (time.time()), pickup latency (s)

# -- the app the worker processes run ---------------------------------------------------------

app = leaseq.App(os.environ.get("LEASEQ_BENCH_URL", "memory://soak"),
                 table_prefix=os.environ.get("LEASEQ_BENCH_PREFIX", "leaseq_"))
_fd: int | None = None
TRACE_ENV = "LEASEQ_SOAK_TRACEMALLOC"  # seconds between reports; set by --tracemalloc


def _trace_memory(every: float, out: str) -> None:
    """In a worker process (``--tracemalloc``): where its Python memory grows. Takes a
    snapshot after ``every`` seconds (the warm-up's end is the caller's choice) and then
    every ``every`` seconds appends the 12 biggest growths since that first snapshot,
    by line, to ``out``."""
    import tracemalloc

    tracemalloc.start(3)

    def report() -> None:
        time.sleep(every)
        first = tracemalloc.take_snapshot()
        while True:
            time.sleep(every)
            now = tracemalloc.take_snapshot()
            lines = [f"-- pid {os.getpid()} at {time.strftime('%H:%M:%S')}: traced "
                     f"{tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB"]
            for stat in now.compare_to(first, "traceback")[:12]:
                lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  "
                             + " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}"
                                           for f in reversed(stat.traceback)))
            with open(out, "a") as f:
                f.write("\n".join(lines) + "\n")

    threading.Thread(target=report, daemon=True, name="soak-tracemalloc").start()


if os.environ.get(TRACE_ENV) and os.environ.get(RECORD_ENV) and \
        sys.argv[:1] != [__file__] and __name__ != "__main__":
    _trace_memory(float(os.environ[TRACE_ENV]), os.environ[RECORD_ENV] + ".tracemalloc")


@app.task(queue=QUEUE, name="soak.tick")
async def tick(t: float) -> None:
    """A no-op that records when it started and how long after its enqueue."""
    global _fd
    now = time.time()
    if _fd is None:
        _fd = os.open(os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, _REC.pack(now, now - t))  # one 16-byte O_APPEND write: atomic


# -- producers ---------------------------------------------------------------------------------


def produce(url: str, prefix: str, rate: float, start: float, end: float,
            sent: Any, catchups: Any, errors: Any) -> None:
    """One producer process: ``rate`` jobs/s from ``start`` to ``end`` (monotonic). A
    failed enqueue is counted and its job sent again on the next turn (the schedule
    still owes it), as an application would retry."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    n = 0
    try:
        while True:
            now = time.monotonic()
            if now >= end:
                break
            owed = int((now - start) * rate) + 1 - n
            if owed <= 0:
                time.sleep(min(0.005, start + n / rate - now))
                continue
            try:
                if owed > rate:  # more than a second behind: pay the debt in one batch
                    t = time.time()
                    q.enqueue_many([{"queue": QUEUE, "payload": {"t": t}, "kind": "soak.tick"}
                                    for _ in range(owed)])
                    n += owed
                    with catchups.get_lock():
                        catchups.value += 1
                else:
                    q.enqueue(QUEUE, {"t": time.time()}, kind="soak.tick")
                    n += 1
            except leaseq.LeaseqError as exc:
                with errors.get_lock():
                    errors.value += 1
                print(f"soak producer: enqueue failed ({exc}); sent again", file=sys.stderr)
                time.sleep(0.1)
                continue
            with sent.get_lock():
                sent.value = sent.value + (owed if owed > rate else 1)
    finally:
        q.close()


# -- what the sampler reads ------------------------------------------------------------------


def status_kib(pid: int, field: str = "VmRSS") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    """The supervisor's worker processes, oldest first (not multiprocessing's resource
    tracker, which ``spawn`` starts too)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(p) for p in f.read().split()]
    except OSError:
        kids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))

    def tracker(kid: int) -> bool:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                return b"resource_tracker" in f.read()
        except OSError:
            return True

    return sorted(k for k in kids if not tracker(k))


def _tcp_inodes(port: int) -> set[str]:
    """Inodes of the machine's TCP sockets whose remote port is ``port``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if int(cols[2].rsplit(":", 1)[1], 16) == port and cols[3] == "01":
                    inodes.add(cols[9])
    return inodes


def worker_connections(pids: list[int], port: int | None, path: str | None) -> int:
    """Open connections of ``pids``: TCP sockets to ``port``, or descriptors of ``path``."""
    inodes = _tcp_inodes(port) if port else set()
    count = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    socket = port and target.startswith("socket:[") and target[8:-1] in inodes
                    if socket or (path and target == path):
                        count += 1
    return count


def cpu_sample() -> tuple[int, int]:
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]


class Server:
    """The server-side figures of one backend (a connection of its own, not leaseq's)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url, self.prefix = url, prefix
        self.scheme = urlsplit(url).scheme.split("+")[0]
        parts = urlsplit(url)
        self.port = parts.port or {"postgresql": 5432, "postgres": 5432, "mysql": 3306,
                                   "mariadb": 3306, "redis": 6379}.get(self.scheme)
        self.path: str | None = None
        self.backend = {"postgresql": "postgres", "postgres": "postgres", "mysql": "mysql",
                        "mariadb": "mysql", "redis": "redis", "sqlite": "sqlite"}[self.scheme]
        if self.backend == "postgres":
            import psycopg
            self.conn: Any = psycopg.connect(url.split("?")[0], autocommit=True)
        elif self.backend == "mysql":
            import pymysql
            self.db = parts.path.lstrip("/")
            self.conn = pymysql.connect(host=parts.hostname, port=self.port,
                                        user=parts.username or "root",
                                        password=parts.password or "", database=self.db,
                                        autocommit=True)
        elif self.backend == "redis":
            import redis
            self.conn = redis.Redis.from_url(url.split("?")[0])
            self.db = int(parts.path.lstrip("/") or 0)
        else:
            import sqlite3
            self.port = None
            self.path = os.path.realpath(url.split("///", 1)[1].split("?")[0])
            self.conn = sqlite3.connect(self.path, isolation_level=None)

    def _pg(self, sql: str, *args: Any) -> Any:
        return self.conn.execute(sql, args).fetchall()

    def _my(self, sql: str, *args: Any) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def sample(self, final: bool = False) -> dict[str, Any]:
        jobs, history = self.prefix + "jobs", self.prefix + "history"
        row: dict[str, Any] = {}
        if final and self.backend == "mysql":  # TABLES' lengths are as of the last ANALYZE
            self._my(f"ANALYZE TABLE {jobs}, {history}")
        if self.backend == "postgres":
            for name, table in (("jobs", jobs), ("history", history)):
                (rel, idx, live, dead, vacs), = self._pg(
                    "SELECT pg_relation_size(c.oid), pg_indexes_size(c.oid), s.n_live_tup,"
                    " s.n_dead_tup, s.autovacuum_count FROM pg_class c"
                    " JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = %s",
                    table)
                row |= {f"{name}_bytes": rel, f"{name}_index_bytes": idx,
                        f"{name}_rows": live, f"{name}_dead_tup": dead,
                        f"{name}_autovacuums": vacs}
            (conns, oldest), = self._pg(
                "SELECT count(*) FILTER (WHERE pid <> pg_backend_pid()),"
                " extract(epoch FROM now() - min(xact_start) FILTER"
                " (WHERE pid <> pg_backend_pid() AND state <> 'idle'))"
                " FROM pg_stat_activity WHERE datname = current_database()")
            row |= {"server_connections": conns,
                    "oldest_xact_s": None if oldest is None else round(float(oldest), 1)}
        elif self.backend == "mysql":
            for name, table in (("jobs", jobs), ("history", history)):
                rows = self._my("SELECT FILE_SIZE, ALLOCATED_SIZE FROM"
                                " information_schema.INNODB_SYS_TABLESPACES WHERE NAME = %s",
                                f"{self.db}/{table}")
                stats = self._my("SELECT DATA_LENGTH, INDEX_LENGTH, TABLE_ROWS FROM"
                                 " information_schema.TABLES WHERE TABLE_SCHEMA = %s"
                                 " AND TABLE_NAME = %s", self.db, table)
                row |= {f"{name}_file_bytes": rows[0][0] if rows else None,
                        f"{name}_bytes": stats[0][0], f"{name}_index_bytes": stats[0][1],
                        f"{name}_rows": stats[0][2]}
            (hll,), = self._my("SELECT `COUNT` FROM information_schema.INNODB_METRICS"
                               " WHERE NAME = 'trx_rseg_history_len'")
            (conns,), = self._my("SELECT count(*) FROM information_schema.PROCESSLIST"
                                 " WHERE DB = %s AND ID <> CONNECTION_ID()", self.db)
            (oldest,), = self._my("SELECT TIMESTAMPDIFF(SECOND, min(trx_started), NOW())"
                                  " FROM information_schema.INNODB_TRX")
            row |= {"innodb_history_len": hll, "server_connections": conns,
                    "oldest_xact_s": oldest}
        elif self.backend == "redis":
            info = self.conn.info("memory")
            clients = self.conn.client_list()
            row |= {"used_memory": info["used_memory"], "keys": self.conn.dbsize(),
                    "server_connections": sum(1 for c in clients
                                              if int(c.get("db", -1)) == self.db) - 1}
        else:
            page, = self.conn.execute("PRAGMA page_size").fetchone()
            count, = self.conn.execute("PRAGMA page_count").fetchone()
            free, = self.conn.execute("PRAGMA freelist_count").fetchone()
            row |= {"file_bytes": page * count, "free_bytes": page * free}
            with contextlib.suppress(Exception):  # dbstat is optional in SQLite builds
                sizes = dict(self.conn.execute(
                    "SELECT tbl_name, 0 FROM sqlite_schema WHERE tbl_name IN (?, ?)",
                    (jobs, history)).fetchall())
                for name, table in (("jobs", jobs), ("history", history)):
                    rel, = self.conn.execute(
                        "SELECT sum(pgsize) FROM dbstat WHERE name = ?", (table,)).fetchone()
                    idx = 0
                    for (index,) in self.conn.execute(
                            "SELECT name FROM sqlite_schema WHERE type = 'index'"
                            " AND tbl_name = ?", (table,)).fetchall():
                        size, = self.conn.execute(
                            "SELECT sum(pgsize) FROM dbstat WHERE name = ?", (index,)).fetchone()
                        idx += size or 0
                    row |= {f"{name}_bytes": rel, f"{name}_index_bytes": idx}
                del sizes
            with contextlib.suppress(OSError):
                row["wal_bytes"] = os.path.getsize(self.path + "-wal")
        return row

    def settled(self, row: dict[str, Any]) -> bool:
        """True once autovacuum (PostgreSQL) or the purge (MariaDB) has caught up."""
        if self.backend == "postgres":
            return (row.get("jobs_dead_tup") or 0) <= max(50, 0.2 * (row.get("jobs_rows") or 0))
        if self.backend == "mysql":
            return (row.get("innodb_history_len") or 0) < 1000
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def hold_snapshot(url: str, table: str, seconds: float, done: threading.Event,
                  marks: dict[str, float]) -> None:
    """S11: a REPEATABLE READ transaction on its own connection, its snapshot taken by one
    SELECT, held ``seconds``, then rolled back."""
    import psycopg
    with psycopg.connect(url.split("?")[0]) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        marks["hold_start"] = time.time()
        done.wait(seconds)
        conn.rollback()
        marks["hold_end"] = time.time()


# -- the run ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(args.url)
    prefix = bench.prefix
    server = Server(args.url, prefix)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    name = f"soak-{server.backend}-{stamp}"
    record = out / f"{name}.records"
    record.write_bytes(b"")
    log = open(out / f"{name}.worker.log", "wb")  # noqa: SIM115 (closed in the finally)
    env = {**os.environ, "LEASEQ_BENCH_URL": args.url, "LEASEQ_BENCH_PREFIX": prefix,
           RECORD_ENV: str(record),
           **({TRACE_ENV: str(args.tracemalloc)} if args.tracemalloc else {}),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    worker = subprocess.Popen(
        [sys.executable, "-m", "leaseq.cli", "worker", "benchmarks.soak:app", "--queues", QUEUE,
         "--processes", str(args.processes), "--log-level", "INFO", *args.worker_args],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    producers: list[mp.Process] = []
    rows: list[dict[str, Any]] = []
    marks: dict[str, float] = {}
    release = threading.Event()
    holder: threading.Thread | None = None
    try:
        deadline = time.monotonic() + 60
        while (out / f"{name}.worker.log").read_bytes().count(b" started: ") < args.processes:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the workers did not start: see " + str(log.name))
            time.sleep(0.1)
        pids = children(worker.pid)
        sent = mp.Value("q", 0)
        catchups = mp.Value("q", 0)
        errors = mp.Value("q", 0)
        t0 = time.monotonic()
        wall0 = time.time()
        end = t0 + args.minutes * 60
        per = args.rate / args.producers
        ctx = mp.get_context("fork")
        for k in range(args.producers):
            p = ctx.Process(target=produce, args=(args.url, prefix, per, t0 + k / args.rate,
                                                  end, sent, catchups, errors),
                            daemon=True)
            p.start()
            producers.append(p)
        offset, last_sent = 0, 0
        cpu = cpu_sample()
        samples = int(args.minutes * 60 / args.sample_seconds)
        print(f"soak {server.backend} prefix={prefix} workers={pids} rate={args.rate}/s "
              f"{args.minutes} min, samples every {args.sample_seconds} s -> {out / name}.*",
              flush=True)

        def take(k: int, final: bool = False) -> dict[str, Any]:
            nonlocal offset, last_sent, cpu
            data = record.read_bytes()[offset:]
            whole = len(data) // _REC.size * _REC.size
            offset += whole
            lat = sorted(x[1] for x in _REC.iter_unpack(data[:whole]))
            now_sent = sent.value
            cpu_now = cpu_sample()
            busy = 1 - (cpu_now[1] - cpu[1]) / max(1, cpu_now[0] - cpu[0])
            cpu = cpu_now
            st = bench.q.stats().get(QUEUE)
            live = children(worker.pid) or pids
            row = {
                "minute": round((time.monotonic() - t0) / 60, 2), "final": int(final),
                "enqueued": now_sent - last_sent, "started": len(lat),
                "p50_ms": round(percentile(lat, 50) * 1000, 2),
                "p99_ms": round(percentile(lat, 99) * 1000, 2),
                "max_ms": round(lat[-1] * 1000, 2) if lat else float("nan"),
                "backlog": st.available if st else 0, "completed_total": st.completed if st else 0,
                "catchups": catchups.value, "enqueue_errors": errors.value,
                **{f"rss_w{i + 1}_kib": status_kib(pid) for i, pid in enumerate(pids)},
                "rss_supervisor_kib": status_kib(worker.pid),
                "worker_connections": worker_connections(live, server.port, server.path),
                **server.sample(final),
                "held": int("hold_start" in marks and "hold_end" not in marks),
                "load1": os.getloadavg()[0], "cpu_busy": round(busy, 3),
                "workers_alive": len(live),
            }
            last_sent = now_sent
            rows.append(row)
            print(json.dumps(row), flush=True)
            lats.append(lat)
            return row

        lats: list[list[float]] = []
        for k in range(1, samples + 1):
            due = t0 + k * args.sample_seconds
            if args.hold_snapshot_at is not None and holder is None and \
                    due - args.sample_seconds >= t0 + args.hold_snapshot_at * 60 - 1:
                holder = threading.Thread(target=hold_snapshot, daemon=True, args=(
                    args.url, prefix + "jobs", args.hold_minutes * 60, release, marks))
                holder.start()
            while (pause := due - time.monotonic()) > 0:
                time.sleep(min(pause, 1.0))
            take(k)
        for p in producers:
            p.join(30)
        # Settle: the backlog drained, then autovacuum / the purge given --settle seconds.
        settle_end = time.monotonic() + args.settle
        while time.monotonic() < settle_end:
            st = bench.q.stats().get(QUEUE)
            if st is not None and st.available + st.running == 0 and \
                    server.settled(server.sample()):
                break
            time.sleep(5)
        take(samples + 1, final=True)
    finally:
        release.set()
        if holder is not None:
            holder.join(30)
        for p in producers:
            if p.is_alive():
                p.terminate()
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        log.close()
        server.close()
        if not args.keep:
            bench.close()
    summary = summarize(args, server.backend, rows, lats, marks, wall0)
    write(out / name, rows, summary, marks, wall0, args)
    with contextlib.suppress(OSError):
        record.unlink()
    with contextlib.suppress(OSError):
        os.replace(f"{record}.tracemalloc", out / f"{name}.tracemalloc.txt")
    return summary


def _pooled(lats: list[list[float]], first: int, last: int) -> list[float]:
    return sorted(x for lat in lats[first:last] for x in lat)


def summarize(args: argparse.Namespace, backend: str, rows: list[dict[str, Any]],
              lats: list[list[float]], marks: dict[str, float], wall0: float) -> dict[str, Any]:
    per_min = max(1, round(60 / args.sample_seconds))
    w = int(args.warmup * per_min)  # rows[w - 1] is the last warm-up sample
    timed = [r for r in rows if not r["final"]]
    n = len(timed)
    five = 5 * per_min
    s: dict[str, Any] = {"backend": backend, "rate": args.rate, "minutes": args.minutes,
                         "enqueued": sum(r["enqueued"] for r in timed),
                         "started": sum(r["started"] for r in rows)}
    s["achieved_rate"] = round(s["enqueued"] / (args.minutes * 60), 1)
    s["catchups"] = rows[-1]["catchups"] if rows else 0
    s["enqueue_errors"] = rows[-1].get("enqueue_errors", 0) if rows else 0
    if n <= w:
        return s
    base = timed[w - 1] if w else timed[0]
    last = timed[-1]
    growth = []
    for key in (k for k in base if k.startswith("rss_w")):
        if base[key]:
            growth.append((last[key] - base[key]) / base[key] * 100)
    s["rss_after_warmup_mib"] = [round(base[k] / 1024, 1) for k in base if k.startswith("rss_w")]
    s["rss_end_mib"] = [round(last[k] / 1024, 1) for k in last if k.startswith("rss_w")]
    s["rss_growth_pct"] = round(max(growth), 2) if growth else None
    first5 = _pooled(lats, w, min(n, w + five))
    last5 = _pooled(lats, max(w, n - five), n)
    s["p99_first5_ms"] = round(percentile(first5, 99) * 1000, 2)
    s["p99_last5_ms"] = round(percentile(last5, 99) * 1000, 2)
    s["p50_first5_ms"] = round(percentile(first5, 50) * 1000, 2)
    s["p50_last5_ms"] = round(percentile(last5, 50) * 1000, 2)
    s["p99_ratio"] = round(s["p99_last5_ms"] / s["p99_first5_ms"], 2) if first5 else None
    final = rows[-1]
    if "jobs_bytes" in base and base.get("jobs_bytes") is not None:
        def size(r: dict[str, Any]) -> int:
            # MariaDB: TABLES' data and index lengths, the pages in use (the last sample
            # runs ANALYZE first); its tablespace file only grows, and is reported apart.
            return int((r["jobs_bytes"] or 0) + (r.get("jobs_index_bytes") or 0))

        size0, size1 = size(base), size(final)
        peak = max(size(r) for r in rows)
        s["jobs_table_kib"] = {"after_warmup": size0 // 1024, "peak": peak // 1024,
                               "end_settled": size1 // 1024}
        s["jobs_table_ok"] = size1 <= 1.10 * size0 + 64 * 1024
        hist = [(r.get("history_bytes") or 0) + (r.get("history_index_bytes") or 0) for r in rows]
        s["history_mib"] = {"after_warmup": round(hist[w - 1] / 2**20, 1),
                            "end": round(hist[-1] / 2**20, 1),
                            "rows_end": final.get("history_rows")}
    for key in ("jobs_file_bytes", "history_file_bytes"):
        if key in final:
            s[key.replace("_bytes", "_mib")] = {
                "after_warmup": round((base.get(key) or 0) / 2**20, 1),
                "end": round((final.get(key) or 0) / 2**20, 1)}
    for key in ("used_memory", "keys", "file_bytes", "free_bytes", "wal_bytes",
                "innodb_history_len", "jobs_dead_tup", "worker_connections",
                "server_connections"):
        if key in final:
            s[key] = {"after_warmup": base.get(key), "peak": max(r.get(key) or 0 for r in rows),
                      "end": final.get(key)}
    s["load1_mean"] = round(sum(r["load1"] for r in timed) / n, 2)
    s["cpu_busy_mean"] = round(sum(r["cpu_busy"] for r in timed) / n, 3)
    s["rate_met_minutes"] = sum(1 for r in timed[w:]
                                if r["enqueued"] >= 0.98 * args.rate * args.sample_seconds)
    s["minutes_after_warmup"] = n - w
    if "hold_start" in marks:
        s |= hold_effect(rows, lats, marks, wall0, args)
    s["goals"] = {"rss_5pct": s["rss_growth_pct"] is not None and s["rss_growth_pct"] <= 5,
                  "p99_1_5x": s["p99_ratio"] is not None and s["p99_ratio"] <= 1.5,
                  "jobs_table_baseline": s.get("jobs_table_ok")}
    return s


def hold_effect(rows: list[dict[str, Any]], lats: list[list[float]], marks: dict[str, float],
                wall0: float, args: argparse.Namespace) -> dict[str, Any]:
    """Throughput and pickup before, during and after the held snapshot; minutes to recover:
    the first sample after the release whose p50 (and p99) is within 1.2x of the 5
    minutes before the hold with throughput within 1.2x too, and the first from which on
    every sample is (on a shared machine p99 moves with the neighbours' load)."""
    timed = [r for r in rows if not r["final"]]
    at = [r["minute"] for r in timed]
    h0 = (marks["hold_start"] - wall0) / 60
    h1 = (marks.get("hold_end", time.time()) - wall0) / 60
    before = [i for i, m in enumerate(at) if h0 - 5 < m <= h0 + 0.01]
    during = [i for i, m in enumerate(at) if h0 + 0.99 < m <= h1 + 0.01]
    after = [i for i, m in enumerate(at) if m > h1 + 0.01]

    def p99(idx: list[int]) -> float:
        return percentile(_pooled_idx(lats, idx), 99) * 1000

    def thr(idx: list[int]) -> float:
        return sum(timed[i]["started"] for i in idx) / max(1, len(idx)) / args.sample_seconds

    def p50(idx: list[int]) -> float:
        return percentile(_pooled_idx(lats, idx), 50) * 1000

    ref_p99, ref_thr, ref_p50 = p99(before), thr(before), p50(before)

    def back(k: int, p99_too: bool) -> bool:
        return (p50([k]) <= 1.2 * ref_p50 and thr([k]) >= ref_thr / 1.2
                and (not p99_too or p99([k]) <= 1.2 * ref_p99))

    first = {flag: next((round(at[i] - h1, 2) for i in after if back(i, flag)), None)
             for flag in (False, True)}
    recovered = None
    for j, i in enumerate(after):
        if all(back(k, True) for k in after[j:]):
            recovered = round(at[i] - h1, 2)
            break
    dead = [r.get("jobs_dead_tup") or 0 for r in timed]
    return {"hold": {"start_min": round(h0, 2), "end_min": round(h1, 2),
                     "p99_before_ms": round(ref_p99, 2), "p99_during_ms": round(p99(during), 2),
                     "p99_worst_minute_ms": max((timed[i]["p99_ms"] for i in during), default=None),
                     "throughput_before": round(ref_thr, 1),
                     "throughput_during": round(thr(during), 1),
                     "throughput_worst_minute": round(min((timed[i]["started"] for i in during),
                                                          default=0) / args.sample_seconds, 1),
                     "dead_tup_before": max((dead[i] for i in before), default=None),
                     "dead_tup_peak": max((dead[i] for i in during), default=None),
                     "jobs_kib_before": (timed[before[-1]]["jobs_bytes"]
                                         + timed[before[-1]]["jobs_index_bytes"]) // 1024
                     if before else None,
                     "jobs_kib_peak": max(((timed[i]["jobs_bytes"] + timed[i]["jobs_index_bytes"])
                                           // 1024 for i in during + after), default=None),
                     "p50_before_ms": round(ref_p50, 2), "p50_during_ms": round(p50(during), 2),
                     "p50_back_after_min": first[False], "p99_back_after_min": first[True],
                     "recovered_for_good_after_min": recovered}}


def _pooled_idx(lats: list[list[float]], idx: list[int]) -> list[float]:
    return sorted(x for i in idx for x in lats[i])


def write(base: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
          marks: dict[str, float], wall0: float, args: argparse.Namespace) -> None:
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with open(base.with_suffix(".csv"), "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=fields)
        out.writeheader()
        out.writerows(rows)
    meta = {"summary": summary, "machine": machine(), "argv": sys.argv[1:],
            "url": args.url.split("@")[-1], "marks": {k: round(v - wall0, 1)
                                                      for k, v in marks.items()}}
    base.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    try:
        plot(base, rows, summary, marks, wall0, args)
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -r "
              "benchmarks/requirements-soak.txt)", file=sys.stderr)


def machine() -> dict[str, Any]:
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    return {"python": platform.python_version(), "leaseq": leaseq.__version__,
            "cpus": os.cpu_count(), "mem_mib": locals().get("mem"),
            "platform": platform.platform()}


def plot(base: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
         marks: dict[str, float], wall0: float, args: argparse.Namespace) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in rows if not r["final"]]
    x = [r["minute"] for r in timed]
    fig, axes = plt.subplots(5, 1, figsize=(9, 14), sharex=True)
    per_s = args.sample_seconds
    axes[0].plot(x, [r["started"] / per_s for r in timed], label="jobs started/s")
    axes[0].plot(x, [r["enqueued"] / per_s for r in timed], "--", label="jobs enqueued/s")
    axes[0].set_ylabel("jobs/s")
    axes[1].plot(x, [r["p50_ms"] for r in timed], label="p50")
    axes[1].plot(x, [r["p99_ms"] for r in timed], label="p99")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("pickup (ms)")
    for key in (k for k in timed[0] if k.startswith("rss_")):
        axes[2].plot(x, [r[key] / 1024 for r in timed], label=key[4:-4])
    axes[2].set_ylabel("RSS (MiB)")
    axes[3].plot(x, [r["worker_connections"] for r in timed], label="worker connections")
    if "server_connections" in timed[0]:
        axes[3].plot(x, [r["server_connections"] for r in timed], label="server's count")
    axes[3].set_ylabel("connections")
    ax = axes[4]
    if "jobs_bytes" in timed[0] and timed[0]["jobs_bytes"] is not None:
        ax.plot(x, [((r["jobs_bytes"] or 0) + (r["jobs_index_bytes"] or 0)) / 1024
                    for r in timed], label="jobs + indexes (KiB)")
        ax.set_ylabel("KiB")
        ax.set_yscale("log")
        ax.plot(x, [((r["history_bytes"] or 0) + (r["history_index_bytes"] or 0)) / 1024
                    for r in timed], label="history + indexes (KiB)")
    if "jobs_dead_tup" in timed[0]:
        ax.plot(x, [max(1, r["jobs_dead_tup"]) for r in timed], label="jobs dead tuples")
    if "innodb_history_len" in timed[0]:
        ax.plot(x, [max(1, r["innodb_history_len"]) for r in timed],
                label="InnoDB history list length")
    if "used_memory" in timed[0]:
        ax.plot(x, [r["used_memory"] / 1024 for r in timed], label="used_memory (KiB)")
        ax.plot(x, [r["keys"] for r in timed], label="keys")
        ax.set_yscale("log")
    ax.set_xlabel("minutes")
    for a in axes:
        a.axvspan(0, args.warmup, color="0.9", label="_warm-up")
        if "hold_start" in marks:
            a.axvspan((marks["hold_start"] - wall0) / 60,
                      (marks.get("hold_end", wall0 + 60 * x[-1]) - wall0) / 60,
                      color="orange", alpha=0.2, label="_held snapshot")
        a.legend(fontsize="small", loc="upper left")
        a.grid(alpha=0.3)
    fig.suptitle(f"leaseq soak: {summary['backend']}, {args.rate:g} jobs/s offered, "
                 f"{args.minutes:g} min (grey: warm-up; orange: held snapshot)")
    fig.tight_layout()
    fig.savefig(base.with_suffix(".png"), dpi=80)
    plt.close(fig)


def summary_line(s: dict[str, Any]) -> str:
    goals = s.get("goals", {})
    # None: the goal does not apply (Redis has no jobs table to return to its size).
    ok = all(v is not False for v in goals.values()) if goals else False
    parts = [f"soak {s['backend']}: {'PASS' if ok else 'MISS'}",
             f"rate {s['achieved_rate']}/{s['rate']:g} jobs/s",
             f"RSS growth {s.get('rss_growth_pct')} % (<= 5: {goals.get('rss_5pct')})",
             f"p99 {s.get('p99_first5_ms')} -> {s.get('p99_last5_ms')} ms, x{s.get('p99_ratio')}"
             f" (<= 1.5: {goals.get('p99_1_5x')})"]
    if "jobs_table_kib" in s:
        t = s["jobs_table_kib"]
        parts.append(f"jobs table {t['after_warmup']} -> peak {t['peak']} -> "
                     f"{t['end_settled']} KiB (baseline: {goals.get('jobs_table_baseline')})")
        parts.append(f"history {s['history_mib']['after_warmup']} -> "
                     f"{s['history_mib']['end']} MiB (grows by design)")
    if "used_memory" in s:
        parts.append(f"used_memory {s['used_memory']['after_warmup']} -> "
                     f"{s['used_memory']['end']}, keys {s['keys']['end']}")
    if "hold" in s:
        h = s["hold"]
        parts.append(f"held snapshot: throughput {h['throughput_before']} -> "
                     f"{h['throughput_during']}/s, p99 {h['p99_before_ms']} -> "
                     f"{h['p99_during_ms']} ms, dead tuples {h['dead_tup_before']} -> "
                     f"{h['dead_tup_peak']}, p50 back after {h['p50_back_after_min']} min, "
                     f"p99 after {h['p99_back_after_min']} min")
    parts.append(f"load {s.get('load1_mean')}, cpu busy {s.get('cpu_busy_mean')}")
    return "; ".join(parts)


@contextlib.contextmanager
def private_postgres(directory: str, port: int) -> Any:
    """A PostgreSQL server of the soak's own, with the stock settings (autovacuum on; a
    CI server often runs with it off, as this repository's does), on 127.0.0.1:``port``,
    data in ``directory``; stopped and removed at the end. Yields its URL (database soak).
    """
    import shutil
    run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                            check=True).stdout.strip()
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    if run_as:
        shutil.chown(directory, "postgres")
    subprocess.run([*run_as, f"{bindir}/initdb", "-D", directory, "-U", "postgres",
                    "--auth=trust", "-E", "UTF8"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*run_as, f"{bindir}/pg_ctl", "-D", directory, "-l", f"{directory}/log",
                    "-w", "-o", f"-p {port} -k {directory} -c listen_addresses=127.0.0.1",
                    "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        subprocess.run([f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U",
                        "postgres", "soak"], check=True)
        yield f"postgresql://postgres@127.0.0.1:{port}/soak"
    finally:
        subprocess.run([*run_as, f"{bindir}/pg_ctl", "-D", directory, "-m", "fast", "-w",
                        "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(directory, ignore_errors=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up as Ctrl-C does (workers, tables, server)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="the backend (or --private-postgres)")
    p.add_argument("--private-postgres", metavar="PORT", type=int, default=None,
                   help="start a stock PostgreSQL of its own on this loopback port")
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--rate", type=float, required=True, help="jobs/s offered")
    p.add_argument("--warmup", type=float, default=5.0, help="minutes not judged (5)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--processes", type=int, default=2, help="leaseq worker --processes")
    p.add_argument("--sample-seconds", type=float, default=60.0)
    p.add_argument("--settle", type=float, default=120.0,
                   help="seconds to wait after the run for autovacuum / the purge")
    p.add_argument("--hold-snapshot-at", type=float, default=None, metavar="MIN",
                   help="PostgreSQL: open a REPEATABLE READ transaction at this minute")
    p.add_argument("--hold-minutes", type=float, default=10.0)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--keep", action="store_true", help="do not drop the tables at the end")
    p.add_argument("--tracemalloc", type=float, default=None, metavar="SECONDS",
                   help="profile the workers' memory: every SECONDS, the biggest growths "
                        "since the first report go to <out>/<run>.records.tracemalloc")
    p.add_argument("worker_args", nargs="*", help="more `leaseq worker` options, after --")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with `&`
    with contextlib.ExitStack() as stack:
        if args.private_postgres:
            args.url = stack.enter_context(private_postgres(
                f"/tmp/leaseq-soak-pg-{args.private_postgres}", args.private_postgres))
        elif not args.url:
            p.error("--url or --private-postgres is required")
        summary = run(args)
    print(summary_line(summary), flush=True)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
