"""Times a client's hot operations directly, for before/after comparisons of a change.

    python benchmarks/ops_timing.py postgresql://postgres@127.0.0.1:5432/test

Best of 25 ``enqueue_many`` of 1,000 jobs; best of 40 rounds of ``dequeue`` (500) plus
``ack_many``; and best of 15 rounds of ``dequeue`` (100) followed by one ``ack`` per job,
and by one ``nack`` per job (delay 0, so the same jobs come back): the per-call holder
writes, one round trip (or transaction) each. Fresh tables, dropped after. Run it
alternately on two checkouts (``PYTHONPATH=<checkout>/src``): best-of timings move far
less than ``leaseq bench``'s whole drains, which spread ±15 % run to run on a shared
machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from leaseq.bench import Bench


def best(fn: Callable[[], object], rounds: int) -> float:
    """The fastest of ``rounds`` calls, in milliseconds."""
    fastest = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest * 1e3


def main(url: str) -> None:
    bench = Bench(url)  # fresh tables, dropped by close()
    q = bench.q
    try:
        items = [{"queue": "a", "payload": {"n": i}} for i in range(1000)]
        enqueue = best(lambda: q.enqueue_many(items), 25)

        def claim_and_ack() -> None:
            q.ack_many(q.dequeue(["a"], worker_id="ops", limit=500))

        cycle = best(claim_and_ack, 40)

        def claim_and_ack_each() -> None:
            for job in q.dequeue(["a"], worker_id="ops", limit=100):
                q.ack(job)

        acks = best(claim_and_ack_each, 15)
        # Attempts enough for every round: a nacked job never goes dead here.
        q.enqueue_many([{"queue": "b", "payload": {"n": i}, "max_attempts": 1000}
                        for i in range(100)])

        def claim_and_nack_each() -> None:
            for job in q.dequeue(["b"], worker_id="ops", limit=100):
                q.nack(job, "again", delay=0)

        nacks = best(claim_and_nack_each, 15)
        print(f"enqueue_many 1000: {enqueue:.2f} ms   claim 500 + ack_many: {cycle:.2f} ms   "
              f"claim 100 + 100 ack: {acks:.2f} ms   claim 100 + 100 nack: {nacks:.2f} ms")
    finally:
        bench.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sqlite:///ops-timing.db")
