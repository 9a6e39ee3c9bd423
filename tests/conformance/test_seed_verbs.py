"""The seed operations that are verbs (issue 11, items 6-10, 13, 14): dead retention,
``nack_many``, ``peek``, priority on give-back, ``server_stats``, the ``unique_for``
idempotency window, ``ClientClosed`` after ``close`` and shared ``memory://NAME`` stores.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import leaseq
from tests.conformance._util import make_dead, take
from tests.helpers import ENGINES

# -- dead retention (item 6) ----------------------------------------------------------------

def test_reclaim_discards_dead_jobs_past_their_queue_retention(q):
    q.configure_queue("r", dead_retention=0.2)
    old = make_dead(q, "r", error="gave up")
    kept_elsewhere = make_dead(q, "forever")
    assert q.reclaim() == 0  # not old enough yet
    time.sleep(0.35)
    fresh = make_dead(q, "r")
    assert q.reclaim() == 1
    info = q.get(old)
    assert info.state == "discarded" and "gave up" in (info.error or "")
    assert q.get(fresh).state == "dead"
    assert q.get(kept_elsewhere).state == "dead"  # no retention: kept until someone acts


# -- nack_many (item 7) --------------------------------------------------------------------

def test_nack_many_fails_each_held_job_and_skips_stale_ones(q):
    a, b, c = (q.enqueue("n", max_attempts=m).id for m in (3, 1, 3))
    jobs = {j.id: j for j in q.dequeue("n", worker_id="w", limit=3)}
    q.ack(jobs[c])  # c's lease is now stale
    done = q.nack_many([(jobs[a], "boom"), jobs[b], (jobs[c], RuntimeError("late"))])
    assert done == [True, True, False]
    info_a = q.get(a)
    assert info_a.state in ("available", "scheduled") and info_a.error == "boom"
    assert q.get(b).state == "dead"
    assert q.get(c).state == "completed"
    assert q.nack_many([]) == []


def test_nack_many_refuses_bad_input_and_changes_nothing(q):
    job = take(q, "n", expect=q.enqueue("n").id)
    with pytest.raises(leaseq.InvalidArgument):
        q.nack_many([job, "not a job"])
    assert q.get(job.id).state == "running"


# -- peek (item 8) -------------------------------------------------------------------------

def test_peek_shows_available_jobs_in_claim_order_without_claiming(q):
    low = q.enqueue("p", priority=0).id
    high = q.enqueue("p", priority=5).id
    low2 = q.enqueue("p", priority=0).id
    q.enqueue("p", delay=60)
    q.enqueue("other")
    peeked = q.peek("p")
    assert [j.id for j in peeked] == [high, low, low2]
    assert all(j.state == "available" for j in peeked)
    assert [j.id for j in q.peek("p", limit=1)] == [high]
    assert [j.id for j in q.dequeue("p", worker_id="w", limit=3)] == [high, low, low2]
    assert q.peek("p") == []


def test_peek_scheduled_in_due_order_and_dead_in_kick_order(q):
    later = q.enqueue("p", delay=120).id
    sooner = q.enqueue("p", delay=60).id
    assert [j.id for j in q.peek("p", "scheduled")] == [sooner, later]
    first, second = make_dead(q, "p"), make_dead(q, "p")
    assert [j.id for j in q.peek("p", "dead")] == [first, second]  # oldest first
    with pytest.raises(leaseq.InvalidArgument):
        q.peek("p", "completed")


def test_peek_ignores_pause(q):
    job_id = q.enqueue("paused").id
    q.pause("paused")
    assert [j.id for j in q.peek("paused")] == [job_id]
    assert q.dequeue("paused", worker_id="w") == []


# -- priority on give-back (item 9) -------------------------------------------------------

def test_release_and_bury_may_set_a_new_priority(q):
    a = q.enqueue("g", priority=1).id
    b = q.enqueue("g", priority=2).id
    job_b = take(q, "g", expect=b)
    assert q.release(job_b, priority=-5) == "available"
    assert q.get(b).priority == -5
    assert [j.id for j in q.peek("g")] == [a, b]  # b now comes last
    job_a = take(q, "g", expect=a)
    q.bury(job_a, reason="later", priority=9)
    assert q.get(a).priority == 9 and q.get(a).state == "dead"
    q.kick("g")
    assert take(q, "g").id == a  # kicked with its new priority, ahead of b
    job_b = take(q, "g", expect=b)
    q.release(job_b)  # no priority given: unchanged
    assert q.get(b).priority == -5


# -- server_stats (item 10) ----------------------------------------------------------------

def test_server_stats_totals_every_queue(q, backend):
    make_dead(q, "a")
    q.ack(take(q, "a", expect=q.enqueue("a").id))
    q.enqueue("b")
    q.enqueue("b", delay=60)
    take(q, "c", expect=q.enqueue("c").id)
    q.cancel(q.enqueue("c").id)
    totals = q.server_stats()
    assert isinstance(totals, leaseq.ServerStats)
    assert totals.queues == 3
    assert (totals.available, totals.scheduled, totals.running, totals.dead) == (1, 1, 1, 1)
    assert (totals.completed, totals.cancelled, totals.discarded) == (1, 1, 0)
    assert totals.oldest_available_age is not None and 0 <= totals.oldest_available_age < 60
    assert totals.backend == ENGINES.get(backend, backend)
    assert isinstance(totals.server_version, str) and totals.server_version
    assert totals.as_dict()["queues"] == 3


# -- unique_for (item 13) ------------------------------------------------------------------

def test_unique_for_returns_the_recently_finished_twin(q):
    first = q.enqueue("u", unique_key="k", unique_for=60)
    q.ack(take(q, "u", expect=first.id))
    again = q.enqueue("u", unique_key="k", unique_for=60)
    assert (again.id, again.created) == (first.id, False)
    # Without unique_for the window does not apply: a new job.
    third = q.enqueue("u", unique_key="k")
    assert third.created and third.id != first.id
    # A live twin wins over the finished one.
    live = q.enqueue("u", unique_key="k", unique_for=60)
    assert (live.id, live.created) == (third.id, False)


def test_unique_for_covers_cancelled_and_discarded_and_ends(q):
    cancelled = q.enqueue("u", unique_key="c").id
    q.cancel(cancelled)
    assert q.enqueue("u", unique_key="c", unique_for=60).id == cancelled
    discarded = q.enqueue("u", unique_key="d").id
    q.discard(discarded)
    assert q.enqueue("u", unique_key="d", unique_for=60).id == discarded
    done = q.enqueue("u", unique_key="e").id
    q.cancel(done)
    time.sleep(0.3)
    fresh = q.enqueue("u", unique_key="e", unique_for=0.2)
    assert fresh.created and fresh.id != done
    other_queue = q.enqueue("v", unique_key="c", unique_for=60)
    assert other_queue.created


def test_unique_for_needs_a_key_and_a_positive_window(q):
    with pytest.raises(leaseq.InvalidArgument):
        q.enqueue("u", unique_for=10)
    with pytest.raises(leaseq.InvalidArgument):
        q.enqueue("u", unique_key="k", unique_for=-1)


# -- closed clients and shared memory stores (item 14) -------------------------------------

def test_every_call_after_close_raises_client_closed(q, url, prefix):
    other = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    job = take(other, "x", expect=other.enqueue("x").id)
    other.close()
    other.close()  # closing twice is fine
    calls = {
        "enqueue": lambda: other.enqueue("x"),
        "dequeue": lambda: other.dequeue("x"),
        "ack": lambda: other.ack(job),
        "heartbeat": lambda: other.heartbeat(job),
        "get": lambda: other.get(job.id),
        "stats": lambda: other.stats(),
        "peek": lambda: other.peek("x"),
        "configure": lambda: other.configure_queue("x", max_jobs=1),
    }
    for call in calls.values():
        with pytest.raises(leaseq.ClientClosed):
            call()
    assert issubclass(leaseq.ClientClosed, leaseq.BackendError)
    assert q.get(job.id).state == "running"  # the other client's close touched no data


def test_async_calls_after_close_raise_client_closed(url, prefix, q):
    async def main():
        aq = leaseq.connect_async(url, table_prefix=prefix)
        await aq.enqueue("x")
        await aq.close()
        with pytest.raises(leaseq.ClientClosed):
            await aq.enqueue("x")
        with pytest.raises(leaseq.ClientClosed):
            await aq.dequeue("x")

    asyncio.run(main())
    assert q.stats()["x"].available == 1


def test_memory_name_is_one_store_per_process_and_plain_memory_is_private():
    a, b = leaseq.connect("memory://shared-test-store"), leaseq.connect("memory://shared-test-store")
    job_id = a.enqueue("m").id
    assert b.get(job_id).queue == "m"
    a.close()
    assert b.get(job_id).state == "available"  # closing one client keeps the store
    p1, p2 = leaseq.connect("memory://"), leaseq.connect("memory://")
    p1.enqueue("m")
    assert p2.stats() == {}
    b.close()


# -- the asyncio client -------------------------------------------------------------------

def test_async_client_has_every_seed_operation(q, url, prefix, backend):
    async def main() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None) as aq:
            config = await aq.configure_queue("aq", max_attempts=1, max_jobs=3, max_lease=50)
            assert config == await aq.queue_config("aq")
            assert "aq" in await aq.queue_configs()
            a = (await aq.enqueue("aq", lease=200)).id
            b = (await aq.enqueue("aq", priority=5)).id
            c = (await aq.enqueue("aq", unique_key="k", unique_for=60)).id
            with pytest.raises(leaseq.QueueFull):
                await aq.enqueue("aq")
            assert [j.id for j in await aq.peek("aq")] == [b, a, c]
            jobs = {j.id: j for j in await aq.dequeue("aq", worker_id="w", limit=3)}
            assert jobs[a].lease == 50  # its own 200 s, capped by max_lease
            assert await aq.nack_many([(jobs[a], "boom")]) == [True]
            assert (await aq.get(a)).state == "dead"  # max_attempts=1 from the queue
            assert await aq.release(jobs[b], priority=-1) == "available"
            assert (await aq.get(b)).priority == -1
            await aq.bury(jobs[c], priority=7)
            assert [j.id for j in await aq.peek("aq", "dead")] == [c, a]
            await aq.discard(c)
            again = await aq.enqueue("aq", unique_key="k", unique_for=60)
            assert (again.id, again.created) == (c, False)
            totals = await aq.server_stats()
            assert (totals.available, totals.dead, totals.discarded) == (1, 1, 1)
            assert totals.backend == ENGINES.get(backend, backend)

    asyncio.run(main())
