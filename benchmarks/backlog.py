"""Claim latency as the backlog grows: 1,000, then 100,000, then 1,000,000 waiting jobs.

    python benchmarks/backlog.py --url postgresql://postgres@127.0.0.1/test
    python benchmarks/backlog.py --url sqlite:///backlog.db --sizes 1000,100000

At each size it times ``samples`` claims of one job each (dequeue + ack, the hot path of a
worker), reports p50/p95/p99, and the live and history tables' sizes with their indexes;
then the live table is drained of the sampled jobs only. Uses its own table prefix and
drops its tables at the end. The claim must stay flat: it walks one index from its head.
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
        import pymysql

        from leaseq.backends.mysql.driver import connect_args

        args = connect_args(url, leaseq.Settings())
        args.pop("init_command")
        conn = pymysql.connect(**args)
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
    with sqlite3.connect(path) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    return {"database_file": pages * size}


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
            while loaded < size:
                n = min(BATCH, size - loaded)
                q.enqueue_many([{"queue": "backlog", "payload": {"i": loaded + i}}
                                for i in range(n)])
                loaded += n
            load_s = time.perf_counter() - started
            latencies = []
            for _ in range(args.samples):
                t = time.perf_counter()
                jobs = q.dequeue("backlog", worker_id="backlog")
                q.ack(jobs[0])
                latencies.append(time.perf_counter() - t)
            loaded -= args.samples
            latencies.sort()
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
