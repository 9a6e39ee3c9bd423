"""A worker's resident memory over one long drain: the series that showed the Redis
worker's 5 MiB step (benchmarks/RESULTS.md, the soak section) and its fix.

    python benchmarks/rss_drain.py --url redis://127.0.0.1:6379/0 --jobs 700000 \
        --out rss.tsv

It loads ``--jobs`` no-op jobs with ``enqueue_many``, starts one ``leaseq worker --burst``
process on them (the App in benchmarks/_noop_app.py) and, every ``--every`` seconds until
it exits, writes a line of the TSV: seconds since start, the worker's RSS in MiB (from
/proc) and the jobs completed so far (``stats()``). At the end it prints one JSON line:
RSS at the first sample after ``--warm-up`` jobs, the last RSS, the largest step between
two samples and the drain's duration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import leaseq
from leaseq._core.redact import redact_url

QUEUE = "rss"
BATCH = 5000
HERE = Path(__file__).resolve().parent


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=700_000)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--warm-up", type=int, default=45_000,
                        help="jobs after which RSS counts as settled")
    parser.add_argument("--out", type=Path, default=Path("rss.tsv"))
    args = parser.parse_args()

    prefix = f"rss{secrets.token_hex(3)}_"
    q = leaseq.connect(args.url, table_prefix=prefix, reclaim_interval=None)
    q.migrate()
    for start in range(0, args.jobs, BATCH):
        q.enqueue_many([{"queue": QUEUE, "kind": "noop", "payload": {}}
                        for _ in range(min(BATCH, args.jobs - start))])
    env = {**os.environ, "LEASEQ_BENCH_URL": args.url, "LEASEQ_BENCH_PREFIX": prefix,
           "PYTHONPATH": str(HERE.parent)}
    started = time.monotonic()
    worker = subprocess.Popen([sys.executable, "-m", "leaseq.cli", "worker",
                               "benchmarks._noop_app:app", "--queues", QUEUE, "--burst"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows: list[tuple[float, float, int]] = []
    with args.out.open("w") as out:
        out.write("seconds\trss_mib\tcompleted\n")
        while worker.poll() is None:
            try:
                row = (round(time.monotonic() - started, 1), round(rss_mib(worker.pid), 1),
                       q.stats().get(QUEUE, leaseq.QueueStats(QUEUE)).completed)
            except FileNotFoundError:  # exited between poll and read
                break
            rows.append(row)
            out.write("\t".join(map(str, row)) + "\n")
            out.flush()
            time.sleep(args.every)
    duration = time.monotonic() - started
    q.close()
    settled = [r for r in rows if r[2] >= args.warm_up] or rows
    steps = [b[1] - a[1] for a, b in itertools.pairwise(settled)]
    print(json.dumps({"url": redact_url(args.url), "jobs": args.jobs, "samples": len(rows),
                      "rss_settled_mib": settled[0][1] if settled else None,
                      "rss_last_mib": settled[-1][1] if settled else None,
                      "largest_step_mib": round(max(steps, default=0.0), 1),
                      "seconds": round(duration, 1), "exit": worker.returncode}))


if __name__ == "__main__":
    main()
