"""Unique keys.

SPEC "Semantics / Unique keys": ``(queue, unique_key)`` is unique among live jobs
(scheduled, available, running, dead). A duplicate enqueue returns the existing job's id
with ``created=False`` — no error, no second job, even under racing producers. Once the
job reaches history (completed, cancelled, discarded) the key is free again. The same
key on two queues names two jobs; duplicates inside one ``enqueue_many`` are one job.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

import leaseq
from tests.conformance._util import live_total, make_dead, take


def _live_job(q, state):
    """A job with unique key "k" on queue "q", left in ``state``."""
    if state == "scheduled":
        return q.enqueue("q", unique_key="k", delay=60).id
    if state == "available":
        return q.enqueue("q", unique_key="k").id
    if state == "running":
        job_id = q.enqueue("q", unique_key="k").id
        take(q, expect=job_id)
        return job_id
    return make_dead(q, unique_key="k")


def _finished_job(q, ending):
    """A job with unique key "k" on queue "q" that has reached history as ``ending``."""
    job_id = q.enqueue("q", unique_key="k").id
    if ending == "completed":
        q.ack(take(q, expect=job_id))
    elif ending == "cancelled":
        assert q.cancel(job_id) == "cancelled"
    else:
        q.discard(job_id)
    return job_id


def test_duplicate_returns_the_existing_id_with_created_false(q):
    first = q.enqueue("q", {"n": 1}, unique_key="k")
    second = q.enqueue("q", {"n": 2}, unique_key="k")
    assert first.created is True
    assert second.created is False and second.id == first.id
    assert q.get(first.id).payload == {"n": 1}  # the duplicate wrote nothing
    assert live_total(q) == 1


@pytest.mark.parametrize("state", ["scheduled", "available", "running", "dead"])
def test_key_stays_taken_while_the_job_is_live(q, state):
    job_id = _live_job(q, state)
    before = q.get(job_id)
    assert before.state == state
    again = q.enqueue("q", {"other": True}, unique_key="k")
    assert (again.id, again.created) == (job_id, False)
    assert q.get(job_id) == before
    assert live_total(q) == 1


@pytest.mark.parametrize("ending", ["completed", "cancelled", "discarded"])
def test_key_is_free_again_once_the_job_is_in_history(q, ending):
    old = _finished_job(q, ending)
    assert q.get(old).state == ending
    new = q.enqueue("q", unique_key="k")
    assert new.created is True and new.id != old
    assert q.get(new.id).state == "available"
    assert q.get(old).state == ending


def test_same_key_on_two_queues_is_two_jobs(q):
    a = q.enqueue("a", unique_key="k")
    b = q.enqueue("b", unique_key="k")
    assert a.created and b.created and a.id != b.id


def test_jobs_without_a_key_never_collide(q):
    a = q.enqueue("q", {"same": 1})
    b = q.enqueue("q", {"same": 1})
    assert a.created and b.created and a.id != b.id


def test_duplicates_inside_one_enqueue_many_are_one_job(q):
    results = q.enqueue_many([
        {"queue": "q", "payload": 1, "unique_key": "k"},
        {"queue": "q", "payload": 2, "unique_key": "k"},
        {"queue": "other", "payload": 3, "unique_key": "k"},
        {"queue": "q", "payload": 4},
    ])
    assert [r.created for r in results] == [True, False, True, True]
    assert results[1].id == results[0].id
    assert len({results[0].id, results[2].id, results[3].id}) == 3
    assert q.get(results[0].id).payload == 1
    assert live_total(q) == 3


def test_enqueue_many_returns_the_live_job_that_holds_a_key(q):
    held = q.enqueue("q", unique_key="k").id
    results = q.enqueue_many([{"queue": "q", "unique_key": "k"}, {"queue": "q"}])
    assert (results[0].id, results[0].created) == (held, False)
    assert results[1].created and results[1].id != held


def test_racing_producers_create_exactly_one_job(q):
    producers = 8
    barrier = threading.Barrier(producers, timeout=10)

    def produce(n):
        barrier.wait()
        return q.enqueue("q", {"producer": n}, unique_key="race")

    with ThreadPoolExecutor(producers) as pool:
        results = list(pool.map(produce, range(producers)))
    assert len({r.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert live_total(q) == 1


def test_keys_are_compared_exactly(q):
    # Case, trailing spaces, accents and Unicode normalisation all make different keys
    # (a database collation that folds any of them would merge distinct jobs).
    keys = ["key", "KEY", "key ", "k\u00e9y", "ke\u0301y", "k\u00c9y"]
    results = [q.enqueue("q", unique_key=k) for k in keys]
    assert {k: r.created for k, r in zip(keys, results, strict=True)} == dict.fromkeys(keys, True)
    assert len({r.id for r in results}) == len(keys)
    assert [q.get(r.id).unique_key for r in results] == keys
    again = [q.enqueue("q", unique_key=k) for k in keys]
    assert [(r.id, r.created) for r in again] == [(r.id, False) for r in results]


# -- unique_for on tasks (issue 24, item 4) ---------------------------------------------------

def _completed(q, job_id, queue="tu"):
    """Runs job ``job_id`` to completion, as a worker would."""
    q.ack(take(q, queue, expect=job_id), None)


def test_a_tasks_unique_for_keeps_its_key_taken_after_the_job_finished(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="tu", unique_key=lambda n: f"n-{n}", unique_for=60)
    def windowed(n: int) -> None: ...

    try:
        first = windowed.enqueue(n=1).id
        _completed(q, first)
        again = windowed.enqueue(n=1)
        assert (again.id, again.created) == (first, False)  # finished, yet in its window
        # A key given per call is held for the task's window too.
        own = windowed.options(unique_key="own").enqueue(n=3).id
        _completed(q, own)
        assert windowed.options(unique_key="own").enqueue(n=3).id == own
        # enqueue_many and enqueue_async build their jobs the same way.
        [batch] = windowed.enqueue_many([{"n": 1}])
        assert (batch.id, batch.created) == (first, False)
        result = asyncio.run(_enqueue_async(windowed, n=1))
        assert (result.id, result.created) == (first, False)
        assert windowed.enqueue(n=2).created  # another key
    finally:
        app.close()


async def _enqueue_async(task, **kwargs):
    try:
        return await task.enqueue_async(**kwargs)
    finally:
        await task.app.async_queue.close()  # on the loop it was opened on


def test_options_unique_for_holds_a_key_that_is_otherwise_freed(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="tu", unique_key="k")
    def keyed() -> None: ...

    try:
        done = keyed.enqueue().id
        _completed(q, done)
        # The window is looked back over at enqueue: a job with the key finished less than
        # unique_for ago stands in for the new one.
        for unique_for in (60, timedelta(minutes=1)):
            again = keyed.options(unique_for=unique_for).enqueue()
            assert (again.id, again.created) == (done, False)
        fresh = keyed.enqueue()  # without unique_for a finished job's key is free
        assert fresh.created and fresh.id != done
    finally:
        app.close()


def test_unique_for_without_any_unique_key_is_refused_and_writes_nothing(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="tu", unique_for=60)
    def no_key(n: int) -> None: ...

    @app.task(queue="tu")
    def plain(n: int) -> None: ...

    try:
        for enqueue in (lambda: no_key.enqueue(n=1),
                        lambda: no_key.enqueue_many([{"n": 1}]),
                        lambda: plain.options(unique_for=60).enqueue(n=1)):
            with pytest.raises(leaseq.InvalidArgument, match="unique_for needs a unique_key"):
                enqueue()
        assert live_total(q) == 0
        assert no_key.options(unique_key="given").enqueue(n=1).created  # a key makes it fine
        with pytest.raises(leaseq.InvalidArgument, match="unique_for"):
            app.task(queue="tu", name="bad", unique_key="k", unique_for=0)(plain.fn)
        with pytest.raises(leaseq.InvalidArgument, match="unique_for"):
            plain.options(unique_key="k", unique_for=-1).enqueue(n=1)
        assert live_total(q) == 1
    finally:
        app.close()
