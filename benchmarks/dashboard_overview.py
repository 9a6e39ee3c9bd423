"""How long the dashboard's overview takes with many queues and jobs (issue 12: 1,000
queues and 1M jobs, under 1 s).

    python benchmarks/dashboard_overview.py --url postgresql://postgres@127.0.0.1/test
    python benchmarks/dashboard_overview.py --url sqlite:///overview.db --jobs 100000

Seeds ``--jobs`` jobs over ``--queues`` queues through the public API (``enqueue_many``;
a tenth of them delayed an hour, so scheduled), then claims and acks 2 % (history) and
buries 0.5 % (dead). Then serves the dashboard with uvicorn on loopback and times, from an
HTTP client in this process, ``GET /`` (the server-rendered overview, every queue) and
``GET /api/queues`` (what the page polls), each ``--samples`` times after one warm-up,
with the 1 s counts cache defeated (each request waits it out) so every sample reads the
database. Keeps the tables (``--prefix``) for the next run unless ``--drop``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

import leaseq
from leaseq.dashboard import create_app, running
from leaseq.dashboard.app import STATS_TTL

BATCH = 5_000


def seed(q: leaseq.Queue, queues: int, jobs: int) -> None:
    started = time.perf_counter()
    batch: list[dict[str, object]] = []
    for i in range(jobs):
        job: dict[str, object] = {"queue": f"q{i % queues:04d}", "payload": {"n": i}}
        if i % 10 == 9:
            job["delay"] = 3600
        batch.append(job)
        if len(batch) == BATCH:
            q.enqueue_many(batch)
            batch.clear()
    if batch:
        q.enqueue_many(batch)
    names = [f"q{i:04d}" for i in range(queues)]
    per_queue = max(1, jobs // queues)
    for name in names:
        done = q.dequeue(name, limit=max(1, per_queue * 2 // 100), worker_id="seed")
        q.ack_many(done)
        for job in q.dequeue(name, limit=max(1, per_queue // 200), worker_id="seed"):
            q.bury(job, reason="seeded dead")
    print(f"seeded {jobs:,} jobs on {queues:,} queues in {time.perf_counter() - started:.0f} s",
          flush=True)


def timed(client: httpx.Client, path: str, samples: int) -> dict[str, float]:
    client.get(path).raise_for_status()
    ms = []
    for _ in range(samples):
        time.sleep(STATS_TTL + 0.05)  # past the counts cache: every sample reads the database
        started = time.perf_counter()
        response = client.get(path)
        ms.append(1000 * (time.perf_counter() - started))
        response.raise_for_status()
    return {"median_ms": round(statistics.median(ms), 1), "max_ms": round(max(ms), 1),
            "bytes": len(response.content)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", default="lqdash_")
    parser.add_argument("--queues", type=int, default=1_000)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--drop", action="store_true", help="Drop the tables afterwards.")
    args = parser.parse_args()

    q = leaseq.connect(args.url, table_prefix=args.prefix)
    q.migrate()
    stats = q.server_stats()
    have = stats.available + stats.scheduled + stats.running + stats.dead + stats.completed
    if have < args.jobs:
        seed(q, args.queues, args.jobs - have)
        stats = q.server_stats()
    with running(create_app(args.url, table_prefix=args.prefix)) as base, \
            httpx.Client(base_url=base, timeout=60) as client:
        results = {"overview": timed(client, "/", args.samples),
                   "api_queues": timed(client, "/api/queues", args.samples)}
    started = time.perf_counter()
    q.stats()
    results["stats_call_ms"] = {"once": round(1000 * (time.perf_counter() - started), 1)}
    print(json.dumps({"backend": q.backend, "server": stats.server_version,
                      "queues": stats.queues,
                      "jobs": {k: getattr(stats, k) for k in (
                          "available", "scheduled", "running", "dead", "completed")},
                      **results}, indent=2))
    if args.drop:
        drop = getattr(q._backend, "drop", None)  # a benchmark's clean-up, not public API
        if drop is not None:
            drop()
    q.close()


if __name__ == "__main__":
    main()
