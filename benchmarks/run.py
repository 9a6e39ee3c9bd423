"""Run the benchmark workloads on every available system and write a markdown report.

    python benchmarks/run.py [--systems a,b] [--jobs N] [--runs 3] [--quick]
                             [--out benchmarks/RESULTS-run.md] [--merge OLD.json] [--list]

Usually started through `benchmarks/run`, which prepares the virtualenv and the servers.
See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import json
import math
import os
import platform
import shlex
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.adapters import base  # noqa: E402

# Every module here exposes `adapters() -> list[Adapter]`. A module that does not import
# (its library is not installed, or leaseq's adapter is not written yet) is skipped with
# the reason printed.
REGISTRY = [
    "benchmarks.adapters.leaseq_adapter",
    "benchmarks.adapters.pgqueuer_adapter",
    "benchmarks.adapters.procrastinate_adapter",
    "benchmarks.adapters.huey_adapter",
    "benchmarks.adapters.rq_adapter",
    "benchmarks.adapters.dramatiq_adapter",
    "benchmarks.adapters.celery_adapter",
]

PACKAGES = [
    "leaseq", "pgqueuer", "asyncpg", "procrastinate", "psycopg", "psycopg-pool", "huey", "rq",
    "redis", "dramatiq", "celery", "kombu", "PyMySQL", "uvloop",
]

BACKEND_LABEL = {
    "postgres": "PostgreSQL", "mysql": "MariaDB/MySQL", "sqlite": "SQLite", "redis": "Redis",
}


def is_leaseq(name: str) -> bool:
    return name.startswith("leaseq-")


# ------------------------------------------------------------------------------ workloads


@dataclass
class Workload:
    key: str
    title: str
    kind: str  # "rate": report jobs/s; "latency": report percentiles
    describe: str
    run: Callable[[Any, int], Any]
    n: int = 0
    rate: float = 0.0
    seconds: float = 0.0


def concurrent(method: str) -> Callable[[Any, int], Any]:
    """A workload that calls the adapter's optional `method(n)` (see adapters/base.py)."""

    def run(adapter: Any, n: int) -> Any:
        call = getattr(adapter, method, None)
        if call is None:
            raise NotImplementedError(f"no {method} in this adapter")
        return call(n)

    return run


def make_workloads(jobs: int, quick: bool, rate: float, seconds: float) -> list[Workload]:
    div = 10 if quick else 1
    n_single = max(1, jobs // 10 // div)
    n_batch = max(1, jobs // div)
    n_conc = max(1, jobs // 2 // div)
    pickup_s = max(2.0, seconds / div)
    return [
        Workload(
            "enqueue_single", f"Enqueue, one job per call (N={n_single:,})", "rate",
            f"{n_single:,} no-op jobs enqueued one call at a time from one process, on a client "
            "opened beforehand; jobs/s = N / wall time of the loop.",
            lambda a, n: a.enqueue_single(n), n=n_single,
        ),
        Workload(
            "enqueue_concurrent",
            f"Enqueue, {base.PRODUCERS} concurrent producers (N={n_conc:,})", "rate",
            f"{n_conc:,} no-op jobs enqueued by {base.PRODUCERS} producers of one process, "
            "each enqueueing one job per call (a web app's request workers), in each "
            "system's natural shape: threads sharing one client for a sync client, asyncio "
            "tasks for an async-only one (see each system's configuration); jobs/s = N / "
            "wall time from releasing the producers until the last call returned.",
            concurrent("enqueue_concurrent"), n=n_conc,
        ),
        Workload(
            "enqueue_concurrent_async",
            f"Enqueue, {base.PRODUCERS} asyncio tasks (N={n_conc:,})", "rate",
            f"as above with {base.PRODUCERS} asyncio tasks on one event loop sharing one "
            "async client; n/a for systems without an asyncio client.",
            concurrent("enqueue_concurrent_async"), n=n_conc,
        ),
        Workload(
            "enqueue_batch", f"Enqueue, batch API (N={n_batch:,}, batches of {base.BATCH:,})",
            "rate",
            f"{n_batch:,} no-op jobs enqueued with the system's batch API in batches of "
            f"{base.BATCH:,} (or its maximum), from one process; n/a for systems without one.",
            lambda a, n: a.enqueue_batch(n), n=n_batch,
        ),
        Workload(
            "drain_1", f"Drain, 1 worker process (N={n_batch:,})", "rate",
            f"{n_batch:,} no-op jobs enqueued first (untimed); then one worker OS process is "
            "started with the system's own worker command; jobs/s = N / seconds from starting "
            "the process until the N-th job has started (so worker start-up is included; the "
            "'steady' column leaves it out: (N-1) / (time of N-th - time of 1st job)).",
            lambda a, n: a.drain(n, 1), n=n_batch,
        ),
        Workload(
            "drain_2", f"Drain, 2 worker processes (N={n_batch:,})", "rate",
            "as above with two worker OS processes (for systems whose worker is one supervisor "
            "forking a pool, the pool has two processes: see each system's configuration).",
            lambda a, n: a.drain(n, 2), n=n_batch,
        ),
        Workload(
            "pickup", f"Pickup latency at {rate:g} jobs/s for {pickup_s:g} s", "latency",
            f"one worker process, warmed up with 3 jobs; a producer in the benchmark process "
            f"enqueues {rate:g} jobs/s on a fixed schedule for {pickup_s:g} s, each job "
            "carrying time.time() taken just before its enqueue call; the handler's first "
            "statement takes time.time() again; latency = the difference (same host clock).",
            lambda a, _n: a.pickup_latency(rate, pickup_s), n=round(rate * pickup_s),
            rate=rate, seconds=pickup_s,
        ),
    ]


# ------------------------------------------------------------------------------- results


@dataclass
class Cell:
    """Every run of one workload on one system."""

    n: int = 0
    runs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the first failure's message
    na: str | None = None
    failed: int = 0  # tries that raised (each retried, up to RETRIES times per run)
    discarded: int = 0  # tries thrown away because other processes used the CPU meanwhile
    source: str | None = None  # set when merged in from an earlier run's JSON


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    k = max(0, math.ceil(p / 100 * len(sorted_values)) - 1)
    return sorted_values[min(k, len(sorted_values) - 1)]


def cpu_busy(interval: float = 0.5) -> float:
    """Fraction of all CPUs busy over `interval`, from /proc/stat (nan when unavailable)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return sum(vals), idle

    try:
        t1, i1 = sample()
        time.sleep(interval)
        t2, i2 = sample()
    except OSError:
        return math.nan
    total = t2 - t1
    return 1 - (i2 - i1) / total if total > 0 else math.nan


def wait_idle(limit: float, threshold: float = 0.15) -> float:
    """Wait (at most `limit` s) until the machine is idle; return the last busy fraction."""
    deadline = time.monotonic() + limit
    busy = cpu_busy()
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy(1.0)
    return busy


SERVERS = {"postgres", "mariadbd", "mysqld", "redis-server"}  # they work for us, too
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds used so far), from /proc (empty elsewhere)."""
    out: dict[int, tuple[str, float]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    data = f.read()
            except OSError:
                continue
            rpar = data.rfind(")")
            fields = data[rpar + 2 :].split()
            if len(fields) > 12:
                cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
                out[int(entry.name)] = (data[data.find("(") + 1 : rpar], cpu)
    return out


def foreign_cpu(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> float:
    """CPU seconds that processes other than this one, its workers (started and stopped in
    between, so absent from `before`) and the database servers used in between. It misses
    processes that came and went in between: a lower bound of the interference."""
    me = os.getpid()
    total = 0.0
    for pid, (name, cpu) in after.items():
        if pid == me or pid not in before or name in SERVERS or before[pid][0] != name:
            continue
        total += max(0.0, cpu - before[pid][1])
    return total


CONTENDED = 0.10  # foreign CPU above 10 % of one core during a run: run it again
RETRIES = 2  # extra tries of a run that failed or was contended


def measure(adapter: Any, wl: Workload, runs: int, cap: int | None, idle_wait: float) -> Cell:
    n = wl.n if cap is None or wl.kind == "latency" else min(wl.n, cap)
    cell = Cell(n=n)
    for i in range(runs):
        for attempt in range(RETRIES + 1):
            last_try = attempt == RETRIES
            busy = wait_idle(idle_wait)
            entry: dict[str, Any] = {"busy_before": round(busy, 3)}
            snap = cpu_by_process()
            t0 = time.monotonic()
            try:
                try:
                    if hasattr(adapter, "last_drain"):
                        adapter.last_drain = None
                    adapter.setup()
                    value = wl.run(adapter, n)
                finally:
                    try:
                        adapter.teardown()  # also after a failed setup: cleans what exists
                    except Exception as exc:
                        log(f"  {wl.key}: teardown failed: {type(exc).__name__}: {exc}")
            except NotImplementedError as exc:
                cell.na = str(exc) or "no batch API"
                log(f"  {wl.key}: n/a ({cell.na})")
                return cell
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                err = f"{type(exc).__name__}: {exc}".strip()
                cell.error = cell.error or err
                cell.failed += 1
                log(f"  {wl.key} run {i + 1}/{runs}: FAILED {err[:2000]}")
                if os.environ.get("LEASEQ_BENCH_TRACEBACK"):
                    traceback.print_exc()
                if last_try:
                    break
                continue
            elapsed = max(time.monotonic() - t0, 1e-9)
            entry["foreign_cpu"] = round(foreign_cpu(snap, cpu_by_process()) / elapsed, 3)
            contended = entry["foreign_cpu"] > CONTENDED
            if contended and not last_try:
                cell.discarded += 1
                log(
                    f"  {wl.key} run {i + 1}/{runs}: other processes used "
                    f"{entry['foreign_cpu']:.0%} of a CPU meanwhile: running it again"
                )
                continue
            entry["contended"] = contended
            if wl.kind == "rate":
                entry["seconds"] = value
                entry["rate"] = n / value if value > 0 else math.nan
                timing = getattr(adapter, "last_drain", None)
                if wl.key.startswith("drain") and timing is not None:
                    entry["first"] = timing.first
                    entry["steady"] = timing.steady_rate
                extra = (
                    f" (first job after {entry['first']:.2f} s, "
                    f"steady {entry['steady']:,.0f}/s)" if "first" in entry else ""
                )
                log(f"  {wl.key} run {i + 1}/{runs}: {entry['rate']:,.0f} jobs/s{extra}")
            else:
                lat = sorted(value)
                entry.update(
                    count=len(lat),
                    p50=percentile(lat, 50), p95=percentile(lat, 95), p99=percentile(lat, 99),
                    max=lat[-1] if lat else math.nan,
                )
                log(
                    f"  {wl.key} run {i + 1}/{runs}: p50 {entry['p50'] * 1e3:.2f} ms, "
                    f"p95 {entry['p95'] * 1e3:.2f} ms, p99 {entry['p99'] * 1e3:.2f} ms "
                    f"({len(lat)} jobs)"
                )
            cell.runs.append(entry)
            break
    return cell


def med(cell: Cell, key: str) -> float:
    vals = [r[key] for r in cell.runs if key in r and not math.isnan(r[key])]
    return statistics.median(vals) if vals else math.nan


def rng(cell: Cell, key: str) -> tuple[float, float]:
    vals = [r[key] for r in cell.runs if key in r and not math.isnan(r[key])]
    return (min(vals), max(vals)) if vals else (math.nan, math.nan)


# --------------------------------------------------------------------------- environment


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def machine_info() -> dict[str, str]:
    info = {"cores": str(os.cpu_count()), "kernel": platform.release()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["ram"] = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip('"')
    return info


def server_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        import psycopg

        with psycopg.connect(base.PG_DSN, connect_timeout=3) as conn:
            row = conn.execute("SELECT version()").fetchone()
            out["PostgreSQL"] = row[0] if row else "?"
            for setting in ("synchronous_commit", "shared_buffers", "max_connections"):
                row = conn.execute(f"SHOW {setting}").fetchone()
                out["PostgreSQL"] += f"; {setting}={row[0] if row else '?'}"
    except Exception as exc:
        out["PostgreSQL"] = f"unavailable ({type(exc).__name__})"
    try:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", connect_timeout=3)
        with conn.cursor() as cur:
            cur.execute("SELECT version()")
            row = cur.fetchone()
            out["MariaDB/MySQL"] = str(row[0]) if row else "?"
        conn.close()
    except Exception as exc:
        out["MariaDB/MySQL"] = f"unavailable ({type(exc).__name__})"
    try:
        import redis

        r = redis.Redis.from_url(base.REDIS_URL, socket_connect_timeout=2)
        srv = r.info("server")
        persist = r.info("persistence")
        aof = "yes" if persist.get("aof_enabled") else "no"
        rdb = "on" if r.config_get("save").get("save") else "off"
        out["Redis"] = f"{srv.get('redis_version')} (appendonly={aof}, rdb save points {rdb})"
        r.close()
    except Exception as exc:
        out["Redis"] = f"unavailable ({type(exc).__name__})"
    import sqlite3

    out["SQLite (library)"] = sqlite3.sqlite_version
    return out


def load_adapters() -> tuple[list[Any], list[tuple[str, str]]]:
    found: list[Any] = []
    skipped: list[tuple[str, str]] = []
    for mod_name in REGISTRY:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            skipped.append((mod_name.rsplit(".", 1)[-1], f"{type(exc).__name__}: {exc}"))
            continue
        found.extend(mod.adapters())
    return found, skipped


def select(adapters: list[Any], spec: str | None) -> list[Any]:
    if not spec:
        return adapters
    names = [a.name for a in adapters]
    chosen: list[Any] = []
    for tok in (t.strip() for t in spec.split(",") if t.strip()):
        if tok == "peers":
            match = [a for a in adapters if not is_leaseq(a.name)]
        elif tok == "leaseq":
            match = [a for a in adapters if is_leaseq(a.name)]
        else:
            match = [a for a in adapters if a.name == tok or a.name.startswith(tok + "-")]
        if not match:
            raise SystemExit(f"--systems: no system {tok!r}; known: {', '.join(names)}")
        chosen.extend(a for a in match if a not in chosen)
    return chosen


# ----------------------------------------------------------------------------- reporting


def fmt_rate(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:,.0f}"


def fmt_ms(v: float) -> str:
    if math.isnan(v):
        return "—"
    ms = v * 1e3
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.2f}"


TIMES, EN_DASH = "\u00d7", "\u2013"  # the report's multiplication sign and range dash


def fmt_ratio(v: float) -> str:
    return "—" if math.isnan(v) or math.isinf(v) else f"{v:.2f}{TIMES}"


def headline(cell: Cell | None, kind: str) -> float:
    """The figure ratios are taken of: median jobs/s, or median p99 latency."""
    if cell is None or not cell.runs:
        return math.nan
    return med(cell, "rate" if kind == "rate" else "p99")


def runs_text(cell: Cell) -> str:
    """Number of runs kept, with a ‡ when some ran while other processes used the CPU."""
    bad = sum(1 for r in cell.runs if r.get("contended"))
    return f"{len(cell.runs)}" + (f" ({bad}‡)" if bad else "")


def ratio_text(systems: dict[str, Any], peer: str, key: str, kind: str) -> str:
    """'leaseq-x: 3.1x' for every leaseq adapter on the peer's backend."""
    backend = systems[peer]["backend"]
    peer_v = headline(systems[peer]["cells"].get(key), kind)
    parts = []
    for name, s in systems.items():
        if is_leaseq(name) and s["backend"] == backend:
            lv = headline(s["cells"].get(key), kind)
            parts.append(f"{name}: {fmt_ratio(lv / peer_v)}")
    return "; ".join(parts) if parts else "—"


def render(
    meta: dict[str, Any], workloads: list[Workload], systems: dict[str, Any]
) -> str:
    order = list(BACKEND_LABEL)
    systems = dict(  # grouped by backend, leaseq first in each group, else in run order
        sorted(
            systems.items(),
            key=lambda kv: (
                order.index(kv[1]["backend"]) if kv[1]["backend"] in order else len(order),
                not is_leaseq(kv[0]),
            ),
        )
    )
    out: list[str] = []
    w = out.append
    w("# Benchmark results: leaseq and its peers\n")
    w(
        f"Generated {meta['finished']} by `{meta['command']}` "
        f"({meta['minutes']:.1f} min; {meta['runs']} run(s) of every workload"
        f"{', quick mode' if meta['quick'] else ''}). Every figure below comes from this "
        "machine, the systems measured one after the other."
        + (" Rows marked † come from an earlier run on this machine, merged in with `--merge`."
           if meta.get("merged") else "")
        + "\n"
    )
    w("## Machine\n")
    m = meta["machine"]
    w(f"- CPU: {m.get('cpu', '?')}, {m['cores']} cores; RAM {m.get('ram', '?')}")
    w(f"- OS: {m.get('os', '?')}, kernel {m['kernel']}")
    for k, v in meta["servers"].items():
        w(f"- {k}: {v}")
    w(f"- Python {meta['python']}")
    w("- Packages: " + ", ".join(f"{k} {v}" for k, v in meta["packages"].items() if v != "?"))
    kept = [r for s in systems.values() for c in s["cells"].values() for r in c.runs]
    busy = [r["busy_before"] for r in kept if not math.isnan(r.get("busy_before", math.nan))]
    contended = sum(1 for r in kept if r.get("contended"))
    discarded = sum(c.discarded for s in systems.values() for c in s["cells"].values())
    if busy:
        w(
            f"- Other work on the machine: before each measurement the harness waited (up to "
            f"{meta['idle_wait']:g} s) for idle CPUs (busiest found: {max(busy):.0%}); "
            f"{discarded} measurement(s) during which other processes used more than "
            f"{CONTENDED:.0%} of a CPU were thrown away and run again; {contended} kept "
            "after the last retry are marked ‡"
            + (" — **treat those with care**" if contended else "")
        )
    w("")

    w("## Method\n")
    w(
        "- Every measurement starts on fresh, empty storage of its own: `setup()` creates "
        "tables, a schema, a key prefix or a file with a unique name, `teardown()` removes "
        "them; the servers run on loopback on this machine with their Debian defaults. "
        "Systems run one after the other, never two at once."
    )
    w(
        "- Jobs are no-ops: the handler's only statement records `time.time()` minus the "
        "enqueue time the job carries, as one 8-byte `os.write` to a file opened "
        "`O_APPEND` (atomic across processes). The benchmark process polls that file's size "
        "every 10 ms to count jobs; it shares no lock, connection or server with the "
        "system under test."
    )
    w(
        f"- A run during which processes other than the benchmark, its workers and the "
        f"database servers used more than {CONTENDED:.0%} of a CPU (read from /proc before "
        f"and after) is thrown away and run again, up to {RETRIES} more times; so is a run "
        "that raised (a server restarted by someone else, say)."
    )
    w(
        "- Workers are real OS processes started with each system's own worker command "
        "(its CLI, or the same entry point the CLI calls); they are stopped with SIGTERM, "
        "then SIGKILL, after each measurement. Every wait has a deadline."
    )
    w(
        f"- Each workload runs {meta['runs']} time(s); tables show the median, and the "
        f"min{EN_DASH}max over runs. Latency percentiles are nearest-rank within a run, then the "
        "median across runs. Ratios are leaseq ÷ peer on the same backend: for jobs/s "
        "above 1 means leaseq is faster; for latency below 1 means leaseq is faster."
    )
    w("")
    w("Workloads:\n")
    for wl in workloads:
        w(f"- **{wl.title}**: {wl.describe}")
    w("")
    w("How each system is run:\n")
    for name, s in systems.items():
        srcs = sorted({c.source for c in s["cells"].values() if c.source})
        src = f" († from {'; '.join(srcs)})" if srcs else ""
        w(f"- **{name}** ({BACKEND_LABEL.get(s['backend'], s['backend'])}): {s['config']}{src}")
    if meta["skipped"]:
        w("")
        w("Not measured:\n")
        for name, why in meta["skipped"]:
            w(f"- {name}: {why}")
    w("")

    w("## Results\n")
    for wl in workloads:
        w(f"### {wl.title}\n")
        if wl.kind == "rate":
            drain = wl.key.startswith("drain")
            head = ["system", "backend", "jobs/s (median)", f"min{EN_DASH}max"]
            if drain:
                head += ["steady jobs/s", "first job after"]
            head += ["runs", "leaseq ÷ peer"]
        else:
            head = ["system", "backend", "p50 ms", "p95 ms", "p99 ms", "worst max ms",
                    "jobs", "runs", "leaseq p99 ÷ peer p99"]
        w("| " + " | ".join(head) + " |")
        w("|" + "---|" * len(head))
        for name, s in systems.items():
            cell: Cell | None = s["cells"].get(wl.key)
            label = name + (" †" if cell is not None and cell.source else "")
            row = [label, BACKEND_LABEL.get(s["backend"], s["backend"])]
            if cell is None:
                row += ["not run"] + [""] * (len(head) - 3)
            elif cell.na:
                row += [f"n/a: {cell.na}"] + [""] * (len(head) - 3)
            elif cell.error and not cell.runs:
                row += [f"failed: {cell.error.splitlines()[0][:160]}"] + [""] * (len(head) - 3)
            elif wl.kind == "rate":
                lo, hi = rng(cell, "rate")
                row += [fmt_rate(med(cell, "rate")), f"{fmt_rate(lo)}{EN_DASH}{fmt_rate(hi)}"]
                if drain:
                    first = med(cell, "first")
                    row += [fmt_rate(med(cell, "steady")),
                            "—" if math.isnan(first) else f"{first:.2f} s"]
                cap_note = f" (N={cell.n:,})" if cell.n != wl.n else ""
                row += [f"{runs_text(cell)}{cap_note}"]
                row += ["—" if is_leaseq(name) else ratio_text(systems, name, wl.key, "rate")]
            else:
                worst = max((r["max"] for r in cell.runs), default=math.nan)
                row += [fmt_ms(med(cell, "p50")), fmt_ms(med(cell, "p95")),
                        fmt_ms(med(cell, "p99")), fmt_ms(worst),
                        f"{int(med(cell, 'count')):,}", runs_text(cell)]
                row += ["—" if is_leaseq(name) else ratio_text(systems, name, wl.key, "lat")]
            w("| " + " | ".join(row) + " |")
        w("")

    w("## leaseq against each peer on the same backend\n")
    pairs = [
        (lq, peer)
        for lq, ls in systems.items() if is_leaseq(lq)
        for peer, ps in systems.items() if not is_leaseq(peer) and ps["backend"] == ls["backend"]
    ]
    if not pairs:
        w(
            "No leaseq adapter was measured in this run, so there is nothing to compare yet: "
            "run again with `benchmarks/adapters/leaseq_adapter.py` present (or `--merge` "
            "this run's JSON into a leaseq run).\n"
        )
    else:
        head = ["leaseq", "peer"] + [
            (wl.key.replace("_", " ") + (" jobs/s" if wl.kind == "rate" else " p99"))
            for wl in workloads
        ]
        w("| " + " | ".join(head) + " |")
        w("|" + "---|" * len(head))
        for lq, peer in pairs:
            row = [lq, peer]
            for wl in workloads:
                lv = headline(systems[lq]["cells"].get(wl.key), wl.kind)
                pv = headline(systems[peer]["cells"].get(wl.key), wl.kind)
                row.append(fmt_ratio(lv / pv) if pv and not math.isnan(pv) else "—")
            w("| " + " | ".join(row) + " |")
        w("")
        w("jobs/s columns: leaseq ÷ peer (above 1: leaseq faster). p99 column: leaseq ÷ peer "
          "(below 1: leaseq faster).\n")

    errors = [
        (name, key, c)
        for name, s in systems.items() for key, c in s["cells"].items() if c.error
    ]
    if errors:
        w("## Failures\n")
        w(f"A run that raises is tried again, up to {RETRIES} more times.\n")
        for name, key, c in errors:
            w(
                f"- {name} / {key}: {c.failed} failed tr{'y' if c.failed == 1 else 'ies'}, "
                f"{len(c.runs)} good run(s); first error: "
                f"`{(c.error or '').splitlines()[0][:300]}`"
            )
        w("")
    return "\n".join(out)


def to_json(meta: dict[str, Any], systems: dict[str, Any]) -> dict[str, Any]:
    return {
        "meta": meta,
        "systems": {
            name: {
                "backend": s["backend"],
                "config": s["config"],
                "cells": {k: vars(c) for k, c in s["cells"].items()},
            }
            for name, s in systems.items()
        },
    }


def merge_from(path: str, systems: dict[str, Any]) -> int:
    """Add the (system, workload) results of an earlier run that this run did not measure.
    Returns how many were added; the report marks them with a dagger."""
    data = json.loads(Path(path).read_text())
    source = f"{path}, run of {data['meta']['finished']}"
    added = 0
    for name, old in data["systems"].items():
        s = systems.setdefault(
            name, {"backend": old["backend"], "config": old["config"], "cells": {}}
        )
        for key, c in old["cells"].items():
            cell = Cell(**c)
            if key in s["cells"] or not (cell.runs or cell.na):
                continue
            cell.source = c.get("source") or old.get("source") or source
            s["cells"][key] = cell
            added += 1
    return added


# ---------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--systems", help="comma-separated names or families (huey = huey-*), "
                   "or 'peers' / 'leaseq'; default: every available system")
    p.add_argument("--jobs", type=int, default=20_000,
                   help="N for batch enqueue and drains; single enqueue uses N/10 (default 20000)")
    p.add_argument("--runs", type=int, default=3, help="runs of every workload (default 3)")
    p.add_argument("--quick", action="store_true", help="smoke test: N/10 and 1 run")
    p.add_argument("--rate", type=float, default=200.0, help="pickup jobs/s (default 200)")
    p.add_argument("--seconds", type=float, default=10.0, help="pickup duration (default 10)")
    p.add_argument("--workloads", help="comma-separated subset of: enqueue_single, "
                   "enqueue_concurrent, enqueue_concurrent_async, enqueue_batch, drain_1, "
                   "drain_2, pickup")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "RESULTS-run.md"),
                   help="markdown report; its .json twin is written beside it")
    p.add_argument("--merge", action="append", default=[],
                   help="add systems from an earlier run's JSON that this run did not measure")
    p.add_argument("--idle-wait", type=float, default=30.0,
                   help="wait up to this many s before each measurement for idle CPUs (30)")
    p.add_argument("--list", action="store_true", help="list the systems and exit")
    args = p.parse_args(argv)
    runs = 1 if args.quick else args.runs

    all_adapters, skipped = load_adapters()
    for mod, why in skipped:
        log(f"skipping adapter module {mod}: {why}")
    if args.list:
        for a in all_adapters:
            why = a.available()
            print(f"{a.name:20} {a.backend:9} {'ok' if why is None else 'unavailable: ' + why}")
        return 0
    chosen = select(all_adapters, args.systems)
    all_workloads = make_workloads(args.jobs, args.quick, args.rate, args.seconds)
    workloads = all_workloads
    if args.workloads:
        keys = {k.strip() for k in args.workloads.split(",")}
        unknown = keys - {wl.key for wl in workloads}
        if unknown:
            raise SystemExit(f"--workloads: unknown {sorted(unknown)}")
        workloads = [wl for wl in workloads if wl.key in keys]

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # so that teardown() and Workers.stop() run, as on Ctrl-C

    signal.signal(signal.SIGTERM, on_sigterm)
    started = time.monotonic()
    meta: dict[str, Any] = {
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "benchmarks/run " + shlex.join(sys.argv[1:] if argv is None else argv),
        "runs": runs,
        "quick": args.quick,
        "idle_wait": args.idle_wait,
        "machine": machine_info(),
        "servers": server_versions(),
        "python": platform.python_version(),
        "packages": {name: base.pkg_version(name) for name in PACKAGES},
        "skipped": list(skipped),
    }
    systems: dict[str, Any] = {}
    out = Path(args.out)

    def write() -> None:
        meta["finished"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        meta["minutes"] = (time.monotonic() - started) / 60
        for path in args.merge:
            meta["merged"] = merge_from(path, systems) or meta.get("merged", 0)
        out.parent.mkdir(parents=True, exist_ok=True)
        shown = [  # merged results can fill workloads this run skipped
            wl for wl in all_workloads
            if wl in workloads or any(wl.key in s["cells"] for s in systems.values())
        ]
        out.write_text(render(meta, shown, systems))
        out.with_suffix(".json").write_text(json.dumps(to_json(meta, systems), indent=1))
        log(f"wrote {out} and {out.with_suffix('.json')}")

    try:
        for a in chosen:
            why = a.available()
            if why is not None:
                log(f"[{a.name}] unavailable: {why}")
                meta["skipped"].append((a.name, why))
                continue
            log(f"[{a.name}] ({a.backend})")
            cap = getattr(a, "max_drain_jobs", None)
            s = systems[a.name] = {
                "backend": a.backend, "config": getattr(a, "config", ""), "cells": {},
            }
            for wl in workloads:
                s["cells"][wl.key] = measure(
                    a, wl, runs, cap if wl.key.startswith("drain") else None, args.idle_wait
                )
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
        write()
        return 130
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
