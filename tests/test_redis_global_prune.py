"""Prune forgets a global unique key with the job that held it (``unique_scope="global"``
on Redis and Redis Cluster): ``{P}:global`` kept one entry per key ever used. A key whose
holder is still live, or that a newer job holds, stays."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

import leaseq
from leaseq.backends.redis.keys import Keys
from tests.conftest import require
from tests.helpers import REDIS_PLAIN_URL, redis_cluster, wait_for


@pytest.fixture(params=["redis", "redis_cluster"])
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's ``backend``: the Redis servers only."""
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def raw(backend: str) -> Iterator[Any]:
    client: Any = (redis_cluster() if backend == "redis_cluster"
                   else redis.Redis.from_url(REDIS_PLAIN_URL, decode_responses=True))
    try:
        yield client
    finally:
        client.close()


def test_prune_forgets_the_global_keys_of_the_jobs_it_deletes(
    q: leaseq.Queue, prefix: str, raw: Any
) -> None:
    keys = Keys(prefix)
    done = q.enqueue("a", unique_key="done", unique_scope="global")
    live = q.enqueue("b", unique_key="live", unique_scope="global")
    first = q.enqueue("a", unique_key="again", unique_scope="global")
    [job] = q.dequeue("a", worker_id="w", limit=1)
    assert job.id == done.id
    q.ack(job)
    [job] = q.dequeue("a", worker_id="w", limit=1)
    assert job.id == first.id
    q.ack(job)
    newer = q.enqueue("c", unique_key="again", unique_scope="global")  # holds it now
    assert newer.created
    plain = q.enqueue("a", unique_key="done")  # a queue-scoped key of the same name
    [job] = q.dequeue("a", worker_id="w", limit=1)
    assert job.id == plain.id
    q.ack(job)
    assert set(raw.hgetall(keys.global_keys)) == {"done", "live", "again"}

    def pruned() -> bool:
        # Finished a moment ago: older_than=0 prunes them once the server's clock moved on.
        q.prune(older_than=0)
        try:
            q.get(done.id)
        except leaseq.JobNotFound:
            return True
        return False

    wait_for(pruned, message="the finished jobs pruned")
    holders = raw.hgetall(keys.global_keys)
    assert holders == {"live": str(live.id), "again": str(newer.id)}, holders
    assert not raw.hexists(keys.global_at, "done")  # the cluster's reservation times
    # The freed key is free: a new job takes it; the held ones still refuse.
    assert q.enqueue("d", unique_key="done", unique_scope="global").created
    assert q.enqueue("d", unique_key="live", unique_scope="global") == leaseq.EnqueueResult(
        live.id, False)
