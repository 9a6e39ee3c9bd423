"""Claim latency as the backlog grows: 1,000, then 100,000, then 1,000,000 waiting jobs.

    python benchmarks/backlog.py --url postgresql://postgres@127.0.0.1/test
    python benchmarks/backlog.py --url sqlite:///backlog.db --sizes 1000,100000

At each size it ANALYZEs the live table (as autovacuum would soon after such an insert),
times ``samples`` claims of one job each (dequeue + ack, the hot path of a worker), reports
p50/p95/p99, and the live and history tables' sizes with their indexes; the sampled jobs
are replaced as they go, so the backlog keeps its size. Uses its own table prefix and drops
its tables at the end. The claim must stay flat: it walks one index from its head.
``benchmarks/scale.py`` builds on these helpers (claims of a batch, drains, plots).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import time
from typing import Any

import leaseq
from leaseq.bench import percentile

BATCH = 5000
REFILL = 100  # claim_latencies tops the queue up once it took this many jobs


def sizes_of(url: str, prefix: str) -> dict[str, Any]:
    """Bytes used by the live and history tables (with indexes), per dialect."""
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT pg_total_relation_size(%s), pg_indexes_size(%s), "
                "pg_total_relation_size(%s)",
                [f"{prefix}jobs", f"{prefix}jobs", f"{prefix}history"],
            ).fetchone()
        assert row is not None
        return {"jobs_total": row[0], "jobs_indexes": row[1], "history_total": row[2]}
    if url.startswith("mysql"):
        conn = _mysql(url)
        with conn.cursor() as cur:
            cur.execute(f"ANALYZE TABLE {prefix}jobs, {prefix}history")
            cur.fetchall()
            cur.execute(
                "SELECT table_name, data_length, index_length FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name IN (%s, %s)",
                [f"{prefix}jobs", f"{prefix}history"],
            )
            found = {name: (data, index) for name, data, index in cur.fetchall()}
        conn.close()
        jobs = found.get(f"{prefix}jobs", (0, 0))
        return {"jobs_total": sum(jobs), "jobs_indexes": jobs[1],
                "history_total": sum(found.get(f"{prefix}history", (0, 0)))}
    path = url.split("sqlite:///", 1)[1]
    with sqlite3.connect(path) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return {"database_file": pages * size}


def fill(q: leaseq.Queue, queue: str, count: int, kind: str | None = None,
         payload: dict[str, Any] | None = None) -> None:
    """Enqueues ``count`` jobs with ``enqueue_many`` in batches of ``BATCH``: the fastest
    path of the public API (one statement per batch on PostgreSQL and MySQL)."""
    item: dict[str, Any] = {"queue": queue, "payload": payload or {}}
    if kind is not None:
        item["kind"] = kind
    done = 0
    while done < count:
        n = min(BATCH, count - done)
        q.enqueue_many([item] * n)
        done += n


def analyze(url: str, prefix: str, vacuum: bool = False) -> None:
    """Refreshes the planner's statistics of the live table, as a running server does by
    itself soon after a bulk insert (PostgreSQL's autovacuum; InnoDB recalculates persistent
    statistics once a tenth of a table changed). With ``vacuum``, PostgreSQL also VACUUMs
    it, as autovacuum does after that many inserted or deleted rows: claimed and finished
    jobs leave dead entries at the head of the claim index until then. SQLite keeps no
    statistics unless the application runs ANALYZE, and leaseq does not, so it is left as a
    real deployment has it."""
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"{'VACUUM (ANALYZE)' if vacuum else 'ANALYZE'} {prefix}jobs")
    elif url.startswith("mysql"):
        conn = _mysql(url)
        with conn.cursor() as cur:
            cur.execute(f"ANALYZE TABLE {prefix}jobs")
            cur.fetchall()
        conn.close()


def _mysql(url: str) -> Any:
    import pymysql

    from leaseq.backends.mysql.driver import connect_args

    args = connect_args(url, leaseq.Settings())
    args.pop("init_command")
    return pymysql.connect(**args)


def claim_latencies(q: leaseq.Queue, queue: str, samples: int, limit: int = 1,
                    ack: bool = True, kind: str | None = None,
                    payload: dict[str, Any] | None = None) -> list[float]:
    """Seconds of ``samples`` claims of up to ``limit`` jobs each, sorted; with ``ack`` the
    time includes acknowledging them (one ``ack`` or ``ack_many`` call), otherwise they are
    acknowledged untimed. The queue is topped up (untimed) with as many jobs as were taken
    whenever that reaches ``REFILL`` (or ``limit``), and at the end, so its backlog stays
    within that many jobs of where it was."""
    latencies = []
    taken = 0
    for _ in range(samples):
        t = time.perf_counter()
        jobs = q.dequeue(queue, limit=limit, worker_id="backlog")
        if not jobs:
            raise RuntimeError(f"queue {queue!r} ran dry: the backlog is smaller than a claim")
        if not ack:
            latencies.append(time.perf_counter() - t)
        if len(jobs) == 1:
            q.ack(jobs[0])
        else:
            q.ack_many(jobs)
        if ack:
            latencies.append(time.perf_counter() - t)
        taken += len(jobs)
        if taken >= max(limit, REFILL):
            fill(q, queue, taken, kind, payload)
            taken = 0
    fill(q, queue, taken, kind, payload)
    return sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    prefix = f"backlog{secrets.token_hex(3)}_"
    q = leaseq.connect(args.url, table_prefix=prefix, reclaim_interval=None)
    q.migrate()
    report: list[dict[str, Any]] = []
    loaded = 0
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            started = time.perf_counter()
            fill(q, "backlog", size - loaded)
            loaded = size
            load_s = time.perf_counter() - started
            analyze(args.url, prefix)
            latencies = claim_latencies(q, "backlog", args.samples)
            row = {
                "waiting": size,
                "load_seconds": round(load_s, 1),
                **{f"claim_ack_p{p}_ms": round(percentile(latencies, p) * 1000, 3)
                   for p in (50, 95, 99)},
                **sizes_of(args.url, prefix),
            }
            report.append(row)
            print(json.dumps(row) if args.json else row, flush=True)
    finally:
        drop = getattr(q._backend, "drop", None)
        if drop is not None:
            drop()
        q.close()


if __name__ == "__main__":
    main()
