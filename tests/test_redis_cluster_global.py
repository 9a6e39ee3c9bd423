"""``unique_scope="global"`` on Redis Cluster, where a key lives in the ``{P}`` slot and
the jobs it guards in their queues' slots: the enqueue reads the key's holder, reserves
the key with the ids (``allocate.lua``), then writes the jobs (docs/design.md §47).

What only the cluster has to prove: racing producers in separate processes still make one
job per key; a reservation whose job is being written is waited for, not duplicated; one
left behind by a crashed producer blocks its key until ``GLOBAL_PENDING`` and is then
taken over, and a producer that was only slow finds its id voided and becomes a twin; a
job that was not created gives its key back at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

import leaseq
from leaseq.backends.base import NewJob
from leaseq.backends.redis import ops as redis_ops
from leaseq.backends.redis.ops import Call
from tests import _proc_workers as workers
from tests.conftest import require
from tests.helpers import redis_cluster, wait_for
from tests.test_concurrency import race

RACERS = 6
ROUNDS = 60


@pytest.fixture
def backend() -> str:
    """Overrides conftest's ``backend``: every test here runs on the cluster only."""
    require("redis_cluster")
    return "redis_cluster"


@pytest.fixture
def cluster() -> Iterator[Any]:
    client = redis_cluster()
    try:
        yield client
    finally:
        client.close()


def internals(q: leaseq.Queue) -> tuple[Any, Any]:
    """The queue's ``RedisOps`` and its sync runner."""
    backend = q._backend  # type: ignore[attr-defined]
    return backend.ops, backend.runner


def stalled_enqueue(q: leaseq.Queue, queue: str, key: str) -> tuple[Any, Call, Any]:
    """Runs an enqueue of a global job of ``key`` on ``q`` up to and including its
    reservation (``allocate.lua``) and stops there, as a producer that stalls or dies
    between the ``{P}`` slot and its queue's slot. Returns the plan, the call it stopped
    after and that call's reply (the first id), to resume with ``resume``."""
    ops, runner = internals(q)
    plan = ops.enqueue([NewJob(queue, "{}", unique_key=key, unique_global=True)])
    call = next(plan)
    while True:
        reply = runner.execute(call)
        if call.name == "allocate":
            return plan, call, reply
        call = plan.send(reply)


def resume(q: leaseq.Queue, plan: Any, reply: Any) -> list[leaseq.EnqueueResult]:
    """Drives a plan ``stalled_enqueue`` stopped to its end."""
    _, runner = internals(q)
    try:
        call = plan.send(reply)
        while True:
            if call.pause:
                time.sleep(call.pause)
                call = plan.send(None)
            else:
                call = plan.send(runner.execute(call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def counting(q: leaseq.Queue, name: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one each time ``q`` runs the script ``name``."""
    _, runner = internals(q)
    execute = runner.execute
    seen: list[int] = []

    def counted(call: Call) -> Any:
        if call.name == name:
            seen.append(1)
        return execute(call)

    monkeypatch.setattr(runner, "execute", counted)
    return seen


def test_racing_producers_in_processes_make_one_job_per_global_key(
    q: leaseq.Queue, url: str, prefix: str, cluster: Any
) -> None:
    """Six processes, each in a queue of its own (odd ones in a batch with a plain job),
    enqueue the same key at once, for 60 keys in turn: each key makes one job, every
    racer is told its id, and the key names it."""
    keys = [f"key-{n}" for n in range(ROUNDS)]
    seen: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for key, job_id, created in race(workers.race_global_key, "global",
                                     lambda i: (url, prefix, i, keys), racers=RACERS,
                                     replies=RACERS * ROUNDS, timeout=120):
        seen[key].append((job_id, created))
    ops, _ = internals(q)
    holders = cluster.hgetall(ops.k.global_keys)
    for key in keys:
        ids = {job_id for job_id, _ in seen[key]}
        made = [job_id for job_id, created in seen[key] if created]
        assert len(ids) == 1 and made == list(ids), (key, seen[key])
        assert holders[key] == str(made[0])
    keyed = [j for j in q.jobs(limit=10_000) if j.unique_key is not None]
    assert sorted(j.unique_key or "" for j in keyed) == sorted(keys)
    # Every id handed out is a job or was taken out of the index again.
    indexed = {int(i) for i in cluster.hgetall(ops.k.index)}
    assert indexed == {j.id for j in q.jobs(limit=10_000)}


def test_a_reservation_being_written_is_waited_for_not_duplicated(
    q: leaseq.Queue, url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer has reserved the key and not yet written its job; another producer
    of the key reads the holder again and again, and once the job is written it is that
    job's twin."""
    plan, _, reply = stalled_enqueue(q, "first", "k")
    with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as other:
        reads = counting(other, "holders", monkeypatch)
        out: list[leaseq.EnqueueResult] = []
        racer = threading.Thread(target=lambda: out.append(
            other.enqueue("second", unique_key="k", unique_scope="global")))
        racer.start()
        wait_for(lambda: len(reads) >= 3, message="the racer reading the holder again")
        assert not out
        [mine] = resume(q, plan, reply)
        racer.join(30)
    assert mine.created and out == [leaseq.EnqueueResult(mine.id, False)]
    assert [j.id for j in q.jobs()] == [mine.id]


def test_an_abandoned_reservation_blocks_its_key_until_the_pending_timeout(
    q: leaseq.Queue, monkeypatch: pytest.MonkeyPatch, cluster: Any
) -> None:
    """A producer that died between its reservation and its write: the key stays held
    until the reservation is GLOBAL_PENDING old, then the next producer voids the dead
    one's id and takes the key. The id never becomes a job."""
    monkeypatch.setattr(redis_ops, "GLOBAL_PENDING", 1.5)
    ops, runner = internals(q)
    began = time.monotonic()
    dead = int(runner.execute(Call(
        "allocate", (ops.k.ids, ops.k.index, ops.k.queues, ops.k.server,
                     ops.k.global_keys, ops.k.global_at), [1, "gone", 1, "k", ""])))
    taken = q.enqueue("next", unique_key="k", unique_scope="global")
    waited = time.monotonic() - began
    assert taken.created and taken.id != dead
    assert waited >= 1.5 - 0.05, waited  # the server's clock, read after ours: a margin
    assert cluster.hget(ops.k.global_keys, "k") == str(taken.id)
    assert cluster.hexists(ops.k.void("gone"), str(dead))
    with pytest.raises(leaseq.JobNotFound):
        q.get(dead)
    # Held by a live job now: another producer gets it at once.
    again = q.enqueue("third", unique_key="k", unique_scope="global")
    assert again == leaseq.EnqueueResult(taken.id, False)


def test_a_slow_producer_whose_reservation_was_taken_over_becomes_a_twin(
    q: leaseq.Queue, url: str, prefix: str, monkeypatch: pytest.MonkeyPatch, cluster: Any
) -> None:
    """The reserving producer was paused past GLOBAL_PENDING, not dead: when it resumes,
    its queue's slot refuses the voided id, and it enqueues afresh and finds the job of
    the producer that took over. One job; no id left in the index or the void hash."""
    monkeypatch.setattr(redis_ops, "GLOBAL_PENDING", 0.5)
    plan, _, reply = stalled_enqueue(q, "slow", "k")
    with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as other:
        taken = other.enqueue("quick", unique_key="k", unique_scope="global")
    assert taken.created
    [late] = resume(q, plan, reply)
    assert late == leaseq.EnqueueResult(taken.id, False)
    assert [(j.id, j.queue) for j in q.jobs()] == [(taken.id, "quick")]
    ops, _ = internals(q)
    assert {int(i) for i in cluster.hgetall(ops.k.index)} == {taken.id}
    assert cluster.hlen(ops.k.void("slow")) == 0  # consumed by the refused write


def test_a_global_job_not_created_gives_its_key_back_at_once(
    q: leaseq.Queue, cluster: Any
) -> None:
    """Refused by max_jobs, or a twin of a live job of its own queue: the key is not left
    reserved for an id that is no job, so the next producer of the key creates at once
    (within a GLOBAL_PENDING of 30 s)."""
    q.configure_queue("capped", max_jobs=1)
    q.enqueue("capped")
    with pytest.raises(leaseq.QueueFull):
        q.enqueue("capped", unique_key="k", unique_scope="global")
    plain = q.enqueue("local", unique_key="j")
    twin = q.enqueue("local", unique_key="j", unique_scope="global")
    assert twin == leaseq.EnqueueResult(plain.id, False)
    ops, _ = internals(q)
    assert cluster.hgetall(ops.k.global_keys) == {}
    began = time.monotonic()
    made = [q.enqueue("free", unique_key=key, unique_scope="global") for key in ("k", "j")]
    assert all(r.created for r in made)
    assert time.monotonic() - began < 5
    indexed = {int(i) for i in cluster.hgetall(ops.k.index)}
    assert indexed == {j.id for j in q.jobs()}


def test_an_async_producer_waits_for_a_reservation_being_written(
    q: leaseq.Queue, url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same wait on ``AsyncQueue`` (its runner sleeps with asyncio between reads)."""
    plan, _, reply = stalled_enqueue(q, "first", "k")
    reads: list[int] = []
    out: list[leaseq.EnqueueResult] = []

    async def race() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix,
                                        reclaim_interval=None) as aq:
            runner = aq._backend.runner  # type: ignore[attr-defined]
            execute = runner.execute

            async def counted(call: Call) -> Any:
                if call.name == "holders":
                    reads.append(1)
                return await execute(call)

            monkeypatch.setattr(runner, "execute", counted)
            out.append(await aq.enqueue("second", unique_key="k", unique_scope="global"))

    racer = threading.Thread(target=lambda: asyncio.run(race()))
    racer.start()
    wait_for(lambda: len(reads) >= 3, message="the async racer reading the holder again")
    assert not out
    [mine] = resume(q, plan, reply)
    racer.join(30)
    assert mine.created and out == [leaseq.EnqueueResult(mine.id, False)]
    assert [j.id for j in q.jobs()] == [mine.id]
