"""The asyncio client.

SPEC "Public API": ``leaseq.connect_async(url)`` gives an ``AsyncQueue`` with the same
method names, awaited, and the same semantics as ``Queue``. Each test drives one
``AsyncQueue`` with ``asyncio.run`` on the tables of the ``q`` fixture, and checks what
it did through the synchronous client as well. Covered: enqueue, enqueue_many, dequeue,
heartbeat, ack, nack (retry and dead), release, bury, get, stats, the operator verbs,
reclaim, prune, ``LeaseLost`` on a stale token, bad input; and that ``Queue`` and
``AsyncQueue`` expose the same public names with equal signatures.
"""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta

import pytest

import leaseq
from tests.conformance._util import assert_between, assert_utc, utcnow


def run(url, prefix, body):
    """``await body(aq)`` on a fresh AsyncQueue over the test's tables."""

    async def main():
        async with leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None) as aq:
            return await body(aq)

    return asyncio.run(main())


async def take(aq, queue="q", **kwargs):
    jobs = await aq.dequeue(queue, worker_id="aw", **kwargs)
    assert len(jobs) == 1, jobs
    return jobs[0]


def test_async_enqueue_dequeue_heartbeat_ack(q, url, prefix):
    async def body(aq):
        r = await aq.enqueue("q", {"n": 1}, kind="k", priority=2)
        job = await take(aq, lease=10)
        before = utcnow()
        until = await aq.heartbeat(job, extend=30)
        after = utcnow()
        running = await aq.get(r.id)
        await aq.ack(job, result={"ok": True})
        return r, job, until, (before, after), running, await aq.get(r.id)

    r, job, until, (before, after), running, done = run(url, prefix, body)
    assert r.created and job.id == r.id
    assert (job.payload, job.kind, job.priority, job.attempts) == ({"n": 1}, "k", 2, 1)
    assert_utc(until)
    assert_between(until, before + timedelta(seconds=30), after + timedelta(seconds=30))
    assert (running.state, running.lease_until) == ("running", until)
    assert (done.state, done.result) == ("completed", {"ok": True})
    assert q.get(r.id) == done


def test_async_enqueue_many_and_unique_keys(q, url, prefix):
    async def body(aq):
        results = await aq.enqueue_many([
            {"queue": "a", "payload": 0, "unique_key": "k"},
            {"queue": "a", "payload": 1, "unique_key": "k"},
            {"queue": "b", "payload": 2, "delay": 60},
        ])
        return results, await aq.enqueue("a", unique_key="k"), await aq.enqueue_many([])

    results, again, empty = run(url, prefix, body)
    assert [r.created for r in results] == [True, False, True]
    assert results[1].id == results[0].id == again.id and not again.created
    assert empty == []
    assert [q.get(r.id).state for r in results] == ["available", "available", "scheduled"]


def test_async_dequeue_order_and_batch(q, url, prefix):
    low = q.enqueue("a").id
    high = q.enqueue("b", priority=5).id
    mid = q.enqueue("a", priority=1).id

    async def body(aq):
        return [j.id for j in await aq.dequeue(["a", "b"], limit=10)]

    assert run(url, prefix, body) == [high, mid, low]


def test_async_nack_retries_then_dead(q, url, prefix):
    async def body(aq):
        job_id = (await aq.enqueue("q", max_attempts=2)).id
        first = await aq.nack(await take(aq), "one", delay=60)
        await aq.retry(job_id)
        second = await aq.nack(await take(aq), ValueError("two"))
        return job_id, first, second, await aq.get(job_id)

    job_id, first, second, info = run(url, prefix, body)
    assert (first, second) == ("scheduled", "dead")
    assert (info.state, info.attempts, info.error) == ("dead", 2, "ValueError: two")
    assert q.get(job_id) == info


def test_async_release_gives_the_attempt_back(q, url, prefix):
    async def body(aq):
        job_id = (await aq.enqueue("q")).id
        state = await aq.release(await take(aq))
        delayed = await aq.release(await take(aq), delay=60)
        return state, delayed, await aq.get(job_id)

    state, delayed, info = run(url, prefix, body)
    assert (state, delayed) == ("available", "scheduled")
    assert (info.state, info.attempts) == ("scheduled", 0)


def test_async_stale_token_raises_lease_lost_and_changes_nothing(q, url, prefix):
    async def body(aq):
        job_id = (await aq.enqueue("q")).id
        old = await take(aq)
        await aq.release(old)
        new = await take(aq)
        before = await aq.get(job_id)
        for call in (aq.ack, lambda old: aq.nack(old, "x"), aq.heartbeat, aq.bury):
            with pytest.raises(leaseq.LeaseLost):
                await call(old)
        assert await aq.release(old) == "available"  # the old lease's release, repeated
        after = await aq.get(job_id)
        await aq.ack(new)
        return before, after

    before, after = run(url, prefix, body)
    assert after == before and after.state == "running"


def test_async_bury_kick_discard_and_cancel(q, url, prefix):
    async def body(aq):
        buried = (await aq.enqueue("q")).id
        await aq.bury(await take(aq), reason="look")
        dead_state = (await aq.get(buried)).state
        kicked = await aq.kick("q")
        discarded = (await aq.enqueue("q", delay=60)).id
        await aq.discard(discarded, reason="no")
        cancelled = await aq.cancel((await aq.enqueue("q", delay=60)).id)
        running = await take(aq)
        flagged = await aq.cancel(running.id)
        with pytest.raises(leaseq.JobCancelled):
            await aq.heartbeat(running)
        gave_up = await aq.nack(running, "stopping")
        return dead_state, kicked, discarded, cancelled, flagged, gave_up, await aq.stats()

    dead_state, kicked, discarded, cancelled, flagged, gave_up, stats = run(url, prefix, body)
    assert (dead_state, kicked) == ("dead", 1)
    assert q.get(discarded).state == "discarded"
    assert (cancelled, flagged, gave_up) == ("cancelled", "running", "cancelled")
    assert (stats["q"].discarded, stats["q"].cancelled) == (1, 2)
    assert stats == q.stats()


def test_async_reclaim_and_prune(q, url, prefix):
    async def body(aq):
        job_id = (await aq.enqueue("q")).id
        await take(aq, lease=0.2)
        await asyncio.sleep(0.3)
        reclaimed = await aq.reclaim()
        await aq.ack(await take(aq))
        await asyncio.sleep(0.01)
        return job_id, reclaimed, await aq.prune(older_than=0)

    job_id, reclaimed, pruned = run(url, prefix, body)
    assert (reclaimed, pruned) == (1, 1)
    with pytest.raises(leaseq.JobNotFound):
        q.get(job_id)


def test_async_get_and_stats(q, url, prefix):
    async def body(aq):
        await aq.enqueue("a")
        await aq.enqueue("a", delay=60)
        with pytest.raises(leaseq.JobNotFound):
            await aq.get(10**9)
        return await aq.stats()

    stats = run(url, prefix, body)
    assert (stats["a"].available, stats["a"].scheduled) == (1, 1)


def test_async_bad_input_raises_before_writing(q, url, prefix):
    async def body(aq):
        with pytest.raises(leaseq.InvalidQueueName):
            await aq.enqueue("a b")
        with pytest.raises(leaseq.PayloadNotSerializable):
            await aq.enqueue("q", b"raw")
        with pytest.raises(leaseq.InvalidArgument):
            await aq.enqueue_many([{"queue": "q"}, {"queue": "q", "max_attempts": 0}])
        with pytest.raises(leaseq.InvalidArgument):
            await aq.ack(1)
        return await aq.stats()

    assert run(url, prefix, body) == {}
    assert q.stats() == {}


def _public(cls):
    return sorted(name for name in dir(cls) if not name.startswith("_"))


def test_queue_and_async_queue_expose_the_same_public_names():
    assert _public(leaseq.Queue) == _public(leaseq.AsyncQueue)


@pytest.mark.parametrize("name", _public(leaseq.Queue))
def test_queue_and_async_queue_methods_have_equal_signatures(name):
    sync = inspect.getattr_static(leaseq.Queue, name)
    wrapped = inspect.getattr_static(leaseq.AsyncQueue, name)
    if isinstance(sync, property):
        assert isinstance(wrapped, property)
        return
    assert inspect.signature(sync) == inspect.signature(wrapped)
    assert not inspect.iscoroutinefunction(sync)
    assert inspect.iscoroutinefunction(wrapped)


def test_async_client_names_the_same_backend(q, url, prefix):
    async def body(aq):
        return aq.backend

    assert run(url, prefix, body) == q.backend
