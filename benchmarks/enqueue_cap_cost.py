"""What ``max_queues`` costs an enqueue into a queue that already counts (design
§44): none, the feature off, and a cap set, each as µs per ``Queue.enqueue``.

    .venv/bin/python benchmarks/enqueue_cap_cost.py URL [--main]

Tight loop from one process, best of 5 rounds of 1,000 calls, fresh tables each round.
``--main`` skips the cap (for a run against code without the feature: put its src first
on PYTHONPATH) and prints the same line.
"""

from __future__ import annotations

import secrets
import sys
import time

import leaseq

URL = sys.argv[1] if len(sys.argv) > 1 else "sqlite:////tmp/leaseq-capcost.db"
MAIN = "--main" in sys.argv
ROUNDS, CALLS = 5, 1000


def per_call(cap: int | None) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        prefix = f"capcost_{secrets.token_hex(3)}_"
        q = leaseq.connect(URL, table_prefix=prefix, reclaim_interval=None)
        try:
            q.migrate()
            if cap is not None:
                q.configure_server(max_queues=cap)
            q.enqueue("bench")  # the queue counts from here on
            start = time.perf_counter()
            for _ in range(CALLS):
                q.enqueue("bench", {"n": 1})
            best = min(best, (time.perf_counter() - start) / CALLS)
        finally:
            q._backend.drop()
            q.close()
    return best * 1e6


if __name__ == "__main__":
    if MAIN:
        print(f"{URL.split('://')[0]}: main {per_call(None):.1f} µs/enqueue")
    else:
        print(f"{URL.split('://')[0]}: no cap {per_call(None):.1f} µs/enqueue, "
              f"max_queues=100 {per_call(100):.1f} µs/enqueue")
