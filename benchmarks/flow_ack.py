"""What a chain step's ack costs: one Redis server against a Redis Cluster, where a flow's
queues live in different slots and a step's ack is three calls (docs/workflows.md,
design §45).

    python benchmarks/flow_ack.py --url redis://127.0.0.1:6379/0 \
        --url redis+cluster://127.0.0.1:7001 --steps 500

For each URL it starts ``--steps`` two-step chains (``a`` then ``b``, both on one queue),
claims every first step, and times each ``ack`` of a first step alone (the call that
advances the flow and writes the follow-up), then the same number of plain jobs' acks for
comparison. It prints the median and p90 of both, per URL, as one JSON line each.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time

import leaseq
from leaseq._core.redact import redact_url

QUEUE = "flowack"


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(url: str, steps: int) -> dict[str, object]:
    prefix = f"fa{secrets.token_hex(3)}_"
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)

    @app.task(queue=QUEUE, name="a")
    def a(n: int) -> int:
        return n

    @app.task(queue=QUEUE, name="b")
    def b(n: int) -> int:
        return n

    q = app.queue
    q.migrate()
    try:
        for n in range(steps):
            leaseq.chain(a.s(n), b.s()).enqueue()
        flow_acks = timed_acks(q, steps)
        q.enqueue_many([{"queue": QUEUE, "payload": n} for n in range(steps)])
        plain_acks = timed_acks(q, steps)
    finally:
        q.close()
    return {"url": redact_url(url), "steps": steps,
            "flow_step_ack_ms": {"p50": round(statistics.median(flow_acks) * 1000, 3),
                                 "p90": round(quantile(flow_acks, 0.9) * 1000, 3)},
            "plain_ack_ms": {"p50": round(statistics.median(plain_acks) * 1000, 3),
                             "p90": round(quantile(plain_acks, 0.9) * 1000, 3)}}


def timed_acks(q: leaseq.Queue, count: int) -> list[float]:
    """Claims ``count`` available jobs and times each one's ack alone."""
    jobs: list[leaseq.Job] = []
    while len(jobs) < count:
        got = q.dequeue(QUEUE, worker_id="bench", limit=min(500, count - len(jobs)))
        if not got:
            raise SystemExit(f"only {len(jobs)} of {count} jobs were available")
        jobs.extend(got)
    times = []
    for job in jobs:
        started = time.perf_counter()
        q.ack(job, job.payload)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    for url in args.url:
        print(json.dumps(measure(url, args.steps)), flush=True)


if __name__ == "__main__":
    main()
