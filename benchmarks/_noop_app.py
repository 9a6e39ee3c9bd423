"""The App benchmarks/rss_drain.py's worker runs: one no-op task, on the URL and prefix
the script passes in the environment (benchmarks only; library code reads no variable)."""

from __future__ import annotations

import os

import leaseq

app = leaseq.App(os.environ["LEASEQ_BENCH_URL"],
                 table_prefix=os.environ.get("LEASEQ_BENCH_PREFIX", "leaseq_"))


@app.task(queue="rss", name="noop")
def noop() -> None:
    """Does nothing: the drain measures the worker, not the work."""
