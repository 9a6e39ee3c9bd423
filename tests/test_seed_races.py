"""Racing producers in separate OS processes against ``max_jobs`` and ``unique_for``
(issue 11): however the enqueues interleave, a capped queue never holds more than
``max_jobs`` live jobs and is filled exactly to it, and a key whose job finished within the
window is never enqueued again.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import leaseq
from tests import _proc_workers as workers
from tests.test_concurrency import backend, race  # noqa: F401  (fixture)

RACERS = 6


def test_racing_producers_never_exceed_max_jobs(q: leaseq.Queue, url: str, prefix: str) -> None:
    queue, cap, rounds = "capped", 25, 8
    q.configure_queue(queue, max_jobs=cap)

    def never_over(_: tuple[object, ...]) -> None:
        stats = q.stats()[queue]
        assert stats.available <= cap, stats

    replies = race(workers.race_capped, "capped", lambda i: (url, prefix, i, queue, rounds),
                   racers=RACERS, replies=RACERS * rounds, each=never_over)
    created = [job_id for ids, _ in replies for job_id in ids]
    refused = sum(full for _, full in replies)
    stats = q.stats()[queue]
    assert stats.available == len(created) <= cap, (stats, len(created))
    # 6 racers x 8 rounds asked for 72 jobs: the queue filled up (a last batch of two may
    # not fit a last free slot) and the rest were refused.
    assert cap - 1 <= len(created) <= cap
    assert refused > 0


def test_racing_producers_respect_the_unique_for_window(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    queue = "windowed"
    finished: dict[str, int] = {}
    for key in ("completed", "cancelled", "completing"):
        finished[key] = q.enqueue(queue, unique_key=key).id
    [job] = q.dequeue(queue, worker_id="parent", lease=300)
    assert job.id == finished["completed"]
    q.ack(job)
    q.cancel(finished["cancelled"])
    [completing] = q.dequeue(queue, worker_id="parent", lease=300)
    keys = ["completed", "cancelled", "completing", *(f"fresh-{n}" for n in range(10))]

    def release_each_key(barrier: Any) -> None:
        for key in keys:
            barrier.wait(timeout=60)
            if key == "completing":
                q.ack(completing)  # finishes while the racers enqueue its key

    seen: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for key, job_id, created in race(
            workers.race_unique_for, "windowed", lambda i: (url, prefix, i, queue, keys),
            racers=RACERS, replies=RACERS * len(keys), parties=RACERS + 1,
            meanwhile=release_each_key):
        seen[key].append((job_id, created))
    for key in keys:
        outcomes = seen[key]
        assert len(outcomes) == RACERS
        ids = {job_id for job_id, _ in outcomes}
        created = [job_id for job_id, c in outcomes if c]
        if key.startswith("fresh"):
            assert len(created) == 1 and ids == set(created), (key, outcomes)
        else:
            # Live or just finished, the twin is the answer: nothing new is ever created.
            assert created == [] and ids == {finished[key]}, (key, outcomes)
