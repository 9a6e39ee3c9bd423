"""More processes or more concurrency? `leaseq worker --processes P --concurrency C` drain
rates for several layouts (by default one process x 16, two x 8: the same 16 jobs at once,
and two x 16: one more process as it is), per kind of handler, per database.

    python benchmarks/processes.py                       # sqlite and postgres: 1x16, 2x8, 2x16
    python benchmarks/processes.py --backends postgres --layouts 1x16,2x8,4x4 --runs 5
    python benchmarks/processes.py --out benchmarks/RESULTS-processes.md   # + a .json twin

Handlers (all in this module, the app ``benchmarks.processes:app``):

* ``def-noop`` / ``async-noop``: a plain / ``async def`` function that does nothing;
* ``def-cpu`` / ``async-cpu``: the same doing ``--spin`` iterations of pure Python
  arithmetic (20,000 by default, about a millisecond) while holding the GIL.

Every measurement starts on fresh tables (a new prefix; a new SQLite file), enqueues the
jobs (untimed), pauses the queue, waits up to ``--idle-wait`` seconds (10) for the CPUs to
be idle, starts one ``leaseq worker --processes P --concurrency C`` command and waits until
each of its P worker processes logged that it is fetching; then it resumes the queue and
times until the last job's handler has started (each handler's first statement appends 8
bytes to a file: ``benchmarks.adapters.base.record``). Start-up is not timed. Each layout
runs ``--runs`` times, interleaved, and the report gives the median and the range, and how
busy the CPUs were just before the runs (before their workers started: other processes,
which compete for the same cores; figures from a busy machine understate what more
processes buy) and during the timed drains.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
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
from benchmarks.adapters import base  # noqa: E402
from benchmarks.run import wait_idle  # noqa: E402  (the harness's own idle wait)

QUEUE = "procbench"  # each handler on a queue of its own, QUEUE-<handler>: a worker sizes
# itself by the tasks of the queues it works (a plain-only worker leases jobs ahead)
HANDLERS = ("def-noop", "async-noop", "def-cpu", "async-cpu")
SPIN = int(os.environ.get("LEASEQ_BENCH_SPIN", "20000"))


# -- the app the worker processes run ---------------------------------------------------------

app = leaseq.App(os.environ.get("LEASEQ_BENCH_URL", "memory://procbench"),
                 table_prefix=os.environ.get("LEASEQ_BENCH_PREFIX", "leaseq_"))


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


@app.task(queue=f"{QUEUE}-def-noop", name="def-noop")
def def_noop() -> None:
    base.record(0.0)


@app.task(queue=f"{QUEUE}-async-noop", name="async-noop")
async def async_noop() -> None:
    base.record(0.0)


@app.task(queue=f"{QUEUE}-def-cpu", name="def-cpu")
def def_cpu() -> None:
    base.record(0.0)
    _spin(SPIN)


@app.task(queue=f"{QUEUE}-async-cpu", name="async-cpu")
async def async_cpu() -> None:
    base.record(0.0)
    _spin(SPIN)
    await asyncio.sleep(0)


# -- the measurement -------------------------------------------------------------------------


def cpu_sample() -> tuple[int, int]:
    """(all CPU ticks, idle ticks) so far, from /proc/stat; (0, 0) where there is none."""
    try:
        with open("/proc/stat") as f:
            values = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0, 0
    return sum(values), values[3] + values[4]


def busy_between(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Share of all CPUs busy between two ``cpu_sample()``s (nan without /proc/stat)."""
    total, idle = after[0] - before[0], after[1] - before[1]
    return 1 - idle / total if total > 0 else float("nan")


def url_for(backend: str, tmp: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp}/procbench-{time.monotonic_ns()}.db"
    if backend == "postgres":
        return base.PG_DSN
    if backend == "mysql":
        return base.MYSQL_URL
    if backend == "redis":
        return base.REDIS_URL
    raise SystemExit(f"unknown backend {backend!r}")


def fetching(workers: base.Workers) -> int:
    text = "".join(Path(p).read_text(errors="replace") for p in workers.logs)
    return len(re.findall(r"leaseq\.worker: worker \S+ started: ", text))


def measure(backend: str, handler: str, processes: int, concurrency: int, jobs: int,
            tmp: str, idle_wait: float) -> dict[str, Any]:
    """One drain: jobs/s from resuming the queue to the last handler's start."""
    url = url_for(backend, tmp)
    queue = f"{QUEUE}-{handler}"
    prefix = base.unique_name("proc")[:30] + "_"
    q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    q.migrate()
    rec = base.Recorder()
    workers = base.Workers(
        [[sys.executable, "-m", "leaseq.cli", "worker", "benchmarks.processes:app",
          "--queues", queue, "--processes", str(processes), "--concurrency", str(concurrency),
          "--poll-interval", "0.05", "--log-level", "INFO"]],
        {**rec.env(), "LEASEQ_BENCH_URL": url, "LEASEQ_BENCH_PREFIX": prefix,
         "LEASEQ_BENCH_SPIN": str(SPIN)})
    try:
        for first in range(0, jobs, 5000):
            batch = min(5000, jobs - first)
            q.enqueue_many([{"queue": queue, "kind": handler, "payload": {}}] * batch)
        q.pause(queue)
        busy = wait_idle(idle_wait)
        workers.start()
        deadline = time.monotonic() + 60
        while fetching(workers) < processes:
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not start:\n{workers.log_tail()}")
            workers.check_alive()
            time.sleep(0.01)
        workers.started = time.perf_counter()
        during = cpu_sample()
        q.resume(queue)
        timing = workers.wait_for(rec, jobs, base.drain_timeout(jobs))
        return {"per_s": jobs / timing.last, "busy_before": busy,
                "busy_during": busy_between(during, cpu_sample())}
    finally:
        workers.stop()
        rec.close()
        drop = getattr(q._backend, "drop", None)
        if drop is not None:
            drop()
        q.close()


def layout(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not PROCESSESxCONCURRENCY, e.g. 2x8")
    return int(match[1]), int(match[2])


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    layouts = meta["layouts"]
    lines = [
        "# More processes or more concurrency",
        "",
        f"`{meta['command']}`",
        "",
        f"{meta['date']}, {meta['machine']}; {meta['cpus']} CPUs usable; {meta['jobs']:,} no-op "
        f"jobs, {meta['cpu_jobs']:,} CPU-bound jobs of {meta['spin']:,} iterations; median of "
        f"{meta['runs']} runs (min-max). All CPUs' busy share just before the runs (other "
        f"processes): {meta['busy']}; during the timed drains: {meta['busy_during']}.",
        "",
    ]
    for backend, rows in results["backends"].items():
        lines += [f"## {backend}", "",
                  "| handler | " + " | ".join(f"{p} x {c}" for p, c in layouts) + " | ratio |",
                  "|---|" + "---:|" * (len(layouts) + 1)]
        for handler, cells in rows.items():
            medians = [statistics.median(cells[f"{p}x{c}"]) for p, c in layouts]
            shown = [f"{m:,.0f}/s ({min(cells[f'{p}x{c}']):,.0f}-{max(cells[f'{p}x{c}']):,.0f})"
                     for m, (p, c) in zip(medians, layouts, strict=True)]
            ratio = " / ".join(f"{m / medians[0]:.2f}" for m in medians[1:])
            lines.append(f"| {handler} | " + " | ".join(shown) + f" | {ratio} |")
        lines.append("")
    lines.append("ratio: each layout's median over the first layout's.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global SPIN
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--layouts", default="1x16,2x8,2x16",
                        help="PROCESSESxCONCURRENCY,... (the first is the reference)")
    parser.add_argument("--handlers", default=",".join(HANDLERS))
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs per drain")
    parser.add_argument("--cpu-jobs", type=int, default=2_000, help="CPU-bound jobs per drain")
    parser.add_argument("--spin", type=int, default=SPIN, help="iterations per CPU-bound job")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle-wait", type=float, default=10.0,
                        help="before each run, wait up to this many seconds for idle CPUs")
    parser.add_argument("--out", help="write the report here (and a .json twin)")
    args = parser.parse_args(argv)
    SPIN = args.spin
    layouts = [layout(t) for t in args.layouts.split(",")]
    handlers = [h.strip() for h in args.handlers.split(",")]
    if unknown := set(handlers) - set(HANDLERS):
        parser.error(f"unknown handlers {sorted(unknown)}; known: {', '.join(HANDLERS)}")
    busy: list[float] = []
    during: list[float] = []
    out: dict[str, Any] = {"backends": {}}
    with tempfile.TemporaryDirectory(prefix="procbench-") as tmp:
        for backend in args.backends.split(","):
            rows: dict[str, dict[str, list[float]]] = {}
            for handler in handlers:
                n = args.cpu_jobs if handler.endswith("cpu") else args.jobs
                cells: dict[str, list[float]] = {f"{p}x{c}": [] for p, c in layouts}
                for run in range(args.runs):
                    for p, c in layouts:  # interleaved: drift in load hits every layout
                        figure = measure(backend, handler, p, c, n, tmp, args.idle_wait)
                        cells[f"{p}x{c}"].append(figure["per_s"])
                        busy.append(figure["busy_before"])
                        during.append(figure["busy_during"])
                        print(f"{backend} {handler} {p}x{c} run {run + 1}: "
                              f"{figure['per_s']:,.0f} jobs/s (CPU busy before: "
                              f"{figure['busy_before']:.0%}, during: "
                              f"{figure['busy_during']:.0%})", file=sys.stderr)
                rows[handler] = cells
            out["backends"][backend] = rows
    from leaseq.worker.supervisor import cpu_count

    out["meta"] = {
        "command": "python benchmarks/processes.py " + " ".join(argv or sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()} {platform.processor() or ''} "
                   f"Python {platform.python_version()}".strip(),
        "cpus": cpu_count(), "jobs": args.jobs, "cpu_jobs": args.cpu_jobs, "spin": SPIN,
        "runs": args.runs, "layouts": layouts,
        "busy": f"median {statistics.median(busy):.0%}, max {max(busy):.0%}" if busy else "-",
        "busy_during": f"median {statistics.median(during):.0%}" if during else "-",
    }
    report = render(out)
    print(report)
    if args.out:
        Path(args.out).write_text(report)
        Path(args.out).with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
