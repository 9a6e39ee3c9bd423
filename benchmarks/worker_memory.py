"""Worker memory against backlog: a worker's peak RSS while it drains 1,000, 100,000 and
1,000,000 waiting jobs.

    python benchmarks/worker_memory.py --url sqlite:///memory-bench.db
    python benchmarks/worker_memory.py --url postgresql://postgres@127.0.0.1/test

At each size it loads the backlog with ``enqueue_many``, starts one ``leaseq worker --burst``
process (default options: the no-op task is ``async def``, so up to 1,000 jobs at once),
samples the process's resident memory every 50 ms until it exits, and reports the peak
(``VmHWM``) and the drain rate. A worker holds at most its concurrency in jobs plus the
acks awaiting their batched write, so the peak must not grow with the backlog.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time

import leaseq
from leaseq.bench import QUEUE

BATCH = 5000


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure(url: str, size: int) -> dict[str, float]:
    prefix = f"mem{secrets.token_hex(3)}_"
    q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    q.migrate()
    try:
        items = [{"queue": QUEUE, "payload": {}, "kind": "noop"} for _ in range(BATCH)]
        for first in range(0, size, BATCH):
            q.enqueue_many(items[: min(BATCH, size - first)])
        env = {**os.environ, "LEASEQ_BENCH_URL": url, "LEASEQ_BENCH_PREFIX": prefix}
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "worker", "leaseq.bench:app", "--burst",
             "--log-level", "WARNING"], env=env)
        peak = 0
        deadline = time.monotonic() + max(300.0, size / 500)
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"drain of {size} jobs did not finish")
            try:
                peak = max(peak, status_kib(proc.pid, "VmHWM"))
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - start
        done = q.stats()[QUEUE].completed
        if done != size:
            raise RuntimeError(f"worker completed {done} of {size} jobs")
        return {"backlog": size, "peak_rss_mib": round(peak / 1024, 1),
                "jobs_per_s": round(size / elapsed)}
    finally:
        drop = getattr(q._backend, "drop", None)
        if drop is not None:
            drop()
        q.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--sizes", default="1000,100000,1000000")
    args = p.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        print(json.dumps({"url": args.url.split("@")[-1], **measure(args.url, size)}),
              flush=True)


if __name__ == "__main__":
    main()
