"""Racing producers in separate OS processes, each enqueueing the same keys with
``unique_scope="global"`` into a queue of its own: exactly one job per key is created,
and every racer is told that job's id."""

from __future__ import annotations

from collections import defaultdict

import leaseq
from tests import _proc_workers as workers
from tests.test_concurrency import backend, race  # noqa: F401  (fixture)

RACERS = 6
KEYS = 12


def test_racing_producers_create_one_job_per_global_key(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    keys = [f"key-{n}" for n in range(KEYS)]
    # A key already held by a finished job is free; one held by a live job is not.
    done = q.enqueue("seed", unique_key="key-0", unique_scope="global").id
    q.ack(q.dequeue("seed", worker_id="parent")[0])
    held = q.enqueue("seed", unique_key="key-1", unique_scope="global").id
    seen: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for key, job_id, created in race(workers.race_global_key, "global",
                                     lambda i: (url, prefix, i, keys), racers=RACERS,
                                     replies=RACERS * KEYS):
        seen[key].append((job_id, created))
    for key in keys:
        ids = {job_id for job_id, _ in seen[key]}
        made = [job_id for job_id, created in seen[key] if created]
        assert len(ids) == 1, (key, seen[key])
        if key == "key-1":
            assert made == [] and ids == {held}
        else:
            assert len(made) == 1 and made[0] != done, (key, seen[key])
    keyed = [j for j in q.jobs(limit=1000) if j.unique_key is not None and j.state != "completed"]
    assert sorted(j.unique_key or "" for j in keyed) == sorted(keys)  # key-0 again, once
