"""Blocking dequeue (issue 11, item 1; seed 004 reserve-with-timeout).

``dequeue(..., wait=seconds)`` with nothing due blocks until a job is due or the time runs
out (then ``[]``). A job enqueued by another client, or a scheduled job coming due, while it
waits is returned. ``close()`` ends a wait; an asyncio wait is cancel-safe. How fast the
job is picked up is measured by ``benchmarks/``, not here.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import leaseq


def _other(url, prefix):
    return leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)


def test_wait_zero_returns_at_once_and_a_wait_runs_out_empty(q):
    assert q.dequeue("b", wait=0) == []
    started = time.monotonic()
    assert q.dequeue("b", wait=0.3) == []
    assert time.monotonic() - started >= 0.29


def test_a_due_job_is_returned_without_waiting(q):
    job_id = q.enqueue("b").id
    assert [j.id for j in q.dequeue("b", wait=30)] == [job_id]


def test_a_job_enqueued_by_another_client_ends_the_wait(q, url, prefix):
    other = _other(url, prefix)
    got: list[list[leaseq.Job]] = []
    waiter = threading.Thread(target=lambda: got.append(q.dequeue("b", wait=30, limit=5)))
    try:
        waiter.start()
        time.sleep(0.2)  # let it start waiting; the job must arrive mid-wait
        job_id = other.enqueue("b").id
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        assert [j.id for j in got[0]] == [job_id]
    finally:
        other.close()


def test_a_scheduled_job_coming_due_ends_the_wait(q):
    job_id = q.enqueue("b", delay=0.4).id
    started = time.monotonic()
    jobs = q.dequeue("b", wait=30)
    assert [j.id for j in jobs] == [job_id]
    assert time.monotonic() - started < 29


def test_close_ends_a_wait_in_another_thread(q, url, prefix):
    waiting = _other(url, prefix)
    outcome: list[BaseException | object] = []

    def wait() -> None:
        try:
            outcome.append(waiting.dequeue("b", wait=60))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    waiting.close()
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert isinstance(outcome[0], leaseq.ClientClosed), outcome


def test_async_wait_returns_a_job_enqueued_meanwhile(q, url, prefix):
    async def main() -> list[leaseq.Job]:
        async with leaseq.connect_async(url, table_prefix=prefix) as aq:
            waiting = asyncio.ensure_future(aq.dequeue("b", wait=30))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await asyncio.to_thread(q.enqueue, "b", {"n": 1})
            return await asyncio.wait_for(waiting, 30)

    [job] = asyncio.run(main())
    assert job.payload == {"n": 1}


def test_async_wait_cancelled_claims_nothing(q, url, prefix):
    async def main() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix) as aq:
            waiting = asyncio.ensure_future(aq.dequeue("b", wait=30))
            # Cancel between two polls, not mid-claim (see _waiting_for_wake_up): on a
            # busy machine 0.2 s can still find a cluster client in its first claim.
            deadline = time.monotonic() + 10
            await asyncio.sleep(0.2)
            while not _waiting_for_wake_up(waiting):
                assert time.monotonic() < deadline, "the wait never waited for a wake-up"
                await asyncio.sleep(0.001)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await aq.dequeue("b", wait=0.1) == []

    asyncio.run(main())
    job_id = q.enqueue("b").id
    assert q.get(job_id).state == "available"
    assert q.stats()["b"].running == 0


def _waiting_for_wake_up(task: asyncio.Future) -> bool:
    """True while ``task`` (a dequeue) is suspended in its wait for a wake-up between two
    polls, not in a claim (a driver's call: redis-py's own ``asyncio.wait_for`` on Python
    3.11 can drop a cancel that lands in it, which is none of leaseq's doing)."""
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    while coro is not None:
        awaiting = getattr(coro, "cr_await", None)
        if getattr(coro, "__name__", "") == "_wait_for_jobs":
            return getattr(awaiting, "__name__", "") in ("wait_event", "wait_for")
        coro = awaiting
    return False


def test_async_wait_cancelled_as_a_wake_up_arrives_still_raises(q, url, prefix):
    """The cancel lands in the loop step that sets the wait's wake-up (a push, or the
    listener's first connect): the wait must still end with CancelledError, not go on to
    its full time (asyncio.wait_for on Python 3.11 dropped such a cancel)."""
    async def main() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix) as aq:
            waiting = asyncio.ensure_future(aq.dequeue("b", wait=30))
            deadline = time.monotonic() + 10  # a cluster client's first claim is slower
            while not _waiting_for_wake_up(waiting):  # not mid-claim: between two polls
                assert time.monotonic() < deadline, "the wait never waited for a wake-up"
                await asyncio.sleep(0.001)
            for woken in list(aq._wakers):
                woken.set()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(waiting, 10)

    asyncio.run(main())


def test_wait_is_validated(q):
    with pytest.raises(leaseq.InvalidArgument):
        q.dequeue("b", wait=-1)
    with pytest.raises(leaseq.InvalidArgument):
        q.dequeue("b", wait=float("inf"))


def test_a_wait_leaves_no_listener_behind(q, url, prefix):
    # Push wake-ups (LISTEN, SUBSCRIBE, SQLite's watch) live only as long as the wait.
    other = _other(url, prefix)
    try:
        assert q.dequeue("b", wait=0.3) == []
        waiter = threading.Thread(target=lambda: q.dequeue("b", wait=30))
        waiter.start()
        time.sleep(0.2)
        other.enqueue("b")
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        assert not [t for t in threading.enumerate() if t.name == "leaseq-listen"]
    finally:
        other.close()
