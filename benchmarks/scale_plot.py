"""Plots and markdown tables of ``benchmarks/scale.py``'s ``scale.json``.

    python benchmarks/scale_plot.py benchmarks/scale.json     # redraw the PNGs beside it

Three PNGs: drain rate against backlog size (log x), drain rate against worker processes,
claim latency against backlog size (log x); each point is the median of its repeats.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}
FILES = {"backlog": "scale-throughput-backlog.png", "workers": "scale-throughput-workers.png",
         "latency": "scale-claim-latency.png"}


def median_rate(drains: list[dict[str, Any]]) -> float:
    """Median jobs/s of a point's drains (nan when there are none)."""
    return float(statistics.median(d["jobs_per_s"] for d in drains)) if drains else float("nan")


def by_workers(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The worker sweep's drains grouped by worker process count, in ascending order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["workers"], []).append(row)
    return dict(sorted(out.items()))


def after(row: dict[str, Any]) -> str:
    """The after-a-drain p50 cells of a backlog row, or n/a."""
    a = row.get("after_drain")
    if a is None:
        return "n/a"
    return f"{a['claim_batch']['p50_ms']:.2f} / {a['claim_ack']['p50_ms']:.2f}"


def share(drains: list[dict[str, Any]], key: str) -> float:
    """Median share of the CPUs' capacity during a drain that ``key``'s CPU seconds were."""
    return float(statistics.median(d[key] / d["cores_x_seconds"] for d in drains))


def per_job(drains: list[dict[str, Any]], key: str) -> float:
    """Median CPU microseconds per job that ``key``'s CPU seconds were during a drain."""
    return float(statistics.median(d[key] / d["jobs"] * 1e6 for d in drains))


def ratio_1m_to_1k(rows: list[dict[str, Any]], key: str) -> float | None:
    """p50 claim latency at the largest backlog ÷ at the smallest (None below two sizes)."""
    if len(rows) < 2:
        return None
    return float(rows[-1][key]["p50_ms"] / rows[0][key]["p50_ms"])


def plot(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draws the three PNGs into ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = report["backends"]
    stamp = f"leaseq scale, {report['started']}, {report['machine'].get('cores', '?')} cores"
    paths = []

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, data in backends.items():
        rows = data["backlog"]
        ax.plot([r["waiting"] for r in rows], [median_rate(r["drains"]) for r in rows],
                marker="o", label=LABELS.get(name, name))
    drain = report["options"]["drain_jobs"]
    ax.set(xscale="log", xlabel="waiting jobs (backlog)", ylabel="jobs/s",
           title=f"Drain of {drain:,} no-op jobs by 1 worker process\n{stamp}")
    ax.set_ylim(bottom=0)
    paths.append(_save(fig, ax, out_dir / FILES["backlog"]))

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, data in backends.items():
        groups = by_workers(data["workers"])
        if groups:
            ax.plot(list(groups), [median_rate(g) for g in groups.values()], marker="o",
                    label=LABELS.get(name, name))
    opts = report["options"]
    ax.set(xscale="log", xlabel="worker processes", ylabel="jobs/s",
           title=f"Drain of {opts['workers_jobs']:,} jobs at a backlog of "
                 f"{opts['workers_backlog']:,}\n{stamp}")
    ax.set_xticks(opts["workers"], [str(w) for w in opts["workers"]])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    paths.append(_save(fig, ax, out_dir / FILES["workers"]))

    fig, ax = plt.subplots(figsize=(10, 4.6))
    for name, data in backends.items():
        rows = data["backlog"]
        x = [r["waiting"] for r in rows]
        line = ax.plot(x, [r["claim_batch"]["p50_ms"] for r in rows], marker="o",
                       label=f"{LABELS.get(name, name)}: claim of {opts['batch']}")
        ax.plot(x, [r["claim_ack"]["p50_ms"] for r in rows], marker="s", linestyle="--",
                color=line[0].get_color(), label=f"{LABELS.get(name, name)}: claim+ack of 1")
        if all("after_drain" in r for r in rows):
            ax.plot(x, [r["after_drain"]["claim_batch"]["p50_ms"] for r in rows], marker="x",
                    linestyle=":", color=line[0].get_color(),
                    label=f"{LABELS.get(name, name)}: claim of {opts['batch']}, after a drain")
    ax.set(xscale="log", yscale="log", xlabel="waiting jobs (backlog)", ylabel="p50 ms",
           title=f"Claim latency against backlog (p50)\n{stamp}")
    paths.append(_save(fig, ax, out_dir / FILES["latency"], outside=True))
    return paths


def _save(fig: Any, ax: Any, path: Path, outside: bool = False) -> Path:
    ax.grid(True, which="major", alpha=0.3)
    if outside:  # many lines: the legend goes beside the plot, not over it
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def markdown(report: dict[str, Any]) -> str:
    """The tables of RESULTS.md's scale section, from one report."""
    opts = report["options"]
    lines = [
        f"Claim latency (ms; median over {opts['repeats']} rounds of {opts['samples']} claims "
        "of each kind, on a maintained "
        f"table, and again right after a drain of {opts['drain_jobs']:,} jobs) and drain "
        f"rate (jobs/s, {opts['drain_jobs']:,} jobs by 1 worker process; median of "
        f"{opts['repeats']}, min-max) against the backlog:",
        "",
        "| backend | waiting | claim of "
        f"{opts['batch']} p50 / p99 | claim+ack of 1 p50 / p99 | after a drain: claim of "
        f"{opts['batch']} / claim+ack p50 | drain jobs/s | CPUs busy |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, data in report["backends"].items():
        for r in data["backlog"]:
            rates = [d["jobs_per_s"] for d in r["drains"]]
            busy = [d["cpu_busy"] for d in r["drains"]]
            lines.append(
                f"| {LABELS.get(name, name)} | {r['waiting']:,} "
                f"| {r['claim_batch']['p50_ms']:.2f} / {r['claim_batch']['p99_ms']:.2f} "
                f"| {r['claim_ack']['p50_ms']:.2f} / {r['claim_ack']['p99_ms']:.2f} "
                f"| {after(r)} "
                f"| {median_rate(r['drains']):,.0f} ({min(rates):,}-{max(rates):,}) "
                f"| {statistics.median(busy):.0%} |")
    pg_rows = report["backends"].get("postgres", {}).get("backlog", [])
    if pg_rows and "pg" in pg_rows[0]:
        lines += ["", "PostgreSQL, one claim of "
                  f"{opts['batch']} under EXPLAIN (ANALYZE, BUFFERS): run time, pages of the "
                  "claim index it touched, and the table's dead tuples:", "",
                  "| waiting | maintained: ms / pages / dead | after a drain: ms / pages / dead |",
                  "|---|---|---|"]
        for r in pg_rows:
            cells = [r.get("pg"), r.get("after_drain", {}).get("pg")]
            lines.append(f"| {r['waiting']:,} | " + " | ".join(
                "n/a" if c is None else
                f"{c['claim_execution_ms']:.2f} / {c['claim_index_pages']:,} / "
                f"{c['dead_tuples']:,}" for c in cells) + " |")
    lines += ["", "p50 at the largest backlog ÷ at the smallest (target ≤ 1.5):", "",
              "| backend | claim of a batch | claim+ack of 1 |", "|---|---|---|"]
    for name, data in report["backends"].items():
        cells = [ratio_1m_to_1k(data["backlog"], key) for key in ("claim_batch", "claim_ack")]
        lines.append(f"| {LABELS.get(name, name)} | "
                     + " | ".join("n/a" if c is None else f"{c:.2f}x" for c in cells) + " |")
    lines += ["", f"Drain of {opts['workers_jobs']:,} jobs at a backlog of "
              f"{opts['workers_backlog']:,}, against worker processes (jobs/s, median "
              "(min-max); while draining: all CPUs busy, and the share of the CPUs' capacity "
              "the worker processes and the database server used, and their CPU time per job; "
              "SQLite runs inside the workers, so its server columns are other servers' work):",
              "", "| backend | workers | jobs/s | CPUs busy | workers | server "
              "| worker µs/job | server µs/job |",
              "|---|---|---|---|---|---|---|---|"]
    for name, data in report["backends"].items():
        for workers, group in by_workers(data["workers"]).items():
            rates = [d["jobs_per_s"] for d in group]
            lines.append(
                f"| {LABELS.get(name, name)} | {workers} | {median_rate(group):,.0f} "
                f"({min(rates):,}-{max(rates):,}) "
                f"| {statistics.median(d['cpu_busy'] for d in group):.0%} "
                f"| {share(group, 'worker_cpu_s'):.0%} | {share(group, 'server_cpu_s'):.0%} "
                f"| {per_job(group, 'worker_cpu_s'):.0f} | {per_job(group, 'server_cpu_s'):.0f} |")
    busiest = max((d.get("busiest_before", 0.0) for d in report["backends"].values()),
                  default=0.0)
    lines += ["", f"Busiest CPU reading a measurement started from: {busiest:.0%} of both "
              "cores."]
    return "\n".join(lines)


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/scale.json")
    report = json.loads(path.read_text())
    for out in plot(report, path.parent):
        print(out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
