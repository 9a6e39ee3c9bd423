"""Per-call latency of single Redis writes, for the cost of ``wait_replicas`` and for
before/after comparisons of the code path without it (docs/redis.md, design §30).

    python benchmarks/redis_wait_cost.py redis://127.0.0.1:6379/0 [N]

Median and 99th percentile over ``N`` (default 2000) single ``enqueue`` calls and ``N``
single ``dequeue`` + ``ack`` pairs, on fresh keys (dropped after). Run it alternately on
two checkouts (``PYTHONPATH=<checkout>/src``) or two URLs (with and without
``?wait_replicas=1``).
"""

from __future__ import annotations

import statistics
import sys
import time

from leaseq.bench import Bench


def main(url: str, n: int) -> None:
    bench = Bench(url)  # fresh keys, dropped by close()
    q = bench.q
    try:
        for _ in range(200):  # warm: scripts loaded, pool filled
            q.enqueue("warm", 0)
        enqueue: list[float] = []
        for i in range(n):
            started = time.perf_counter()
            q.enqueue("a", i)
            enqueue.append(time.perf_counter() - started)
        cycle: list[float] = []
        for _ in range(n):
            started = time.perf_counter()
            q.ack(q.dequeue("a", worker_id="cost")[0])
            cycle.append(time.perf_counter() - started)
        for name, times in (("enqueue", enqueue), ("dequeue+ack", cycle)):
            times.sort()
            print(f"{name}: median {statistics.median(times) * 1e3:.3f} ms, "
                  f"p99 {times[int(len(times) * 0.99)] * 1e3:.3f} ms", end="   ")
        print()
    finally:
        bench.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0",
         int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
