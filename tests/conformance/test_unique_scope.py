"""``enqueue(..., unique_scope="global")``: a key unique across every queue.

The default scope ("queue") keeps a key unique in its own queue. A job enqueued with
``unique_scope="global"`` holds its key against every other global enqueue of that key,
in any queue, while it is live; its key is free again once it reaches history, and with
``unique_for`` a recently finished holder counts as a twin. On Redis Cluster the key and
the jobs live in different slots, and the enqueue reads, reserves and writes in turn
(docs/design.md §47); the same tests hold there.
"""

from __future__ import annotations

import asyncio

import pytest

import leaseq
from tests.conformance._util import live_total, take


@pytest.fixture
def gq(q: leaseq.Queue) -> leaseq.Queue:
    return q


def test_a_global_key_is_unique_across_queues(gq: leaseq.Queue) -> None:
    first = gq.enqueue("a", {"n": 1}, unique_key="k", unique_scope="global")
    second = gq.enqueue("b", {"n": 2}, unique_key="k", unique_scope="global")
    assert first.created and not second.created and second.id == first.id
    assert gq.get(first.id).queue == "a"
    assert live_total(gq) == 1
    # The default scope, "queue": the same key in two queues is two jobs.
    a = gq.enqueue("a", unique_key="j")
    b = gq.enqueue("b", unique_key="j", unique_scope="queue")
    assert a.created and b.created and a.id != b.id


def test_a_global_job_also_holds_its_key_in_its_own_queue(gq: leaseq.Queue) -> None:
    first = gq.enqueue("a", unique_key="k", unique_scope="global")
    again = gq.enqueue("a", unique_key="k")
    assert not again.created and again.id == first.id
    # A queue-scoped job of the key in its queue stops a global one there too.
    plain = gq.enqueue("b", unique_key="j")
    dup = gq.enqueue("b", unique_key="j", unique_scope="global")
    assert not dup.created and dup.id == plain.id


def test_the_global_key_is_free_once_the_job_finished(gq: leaseq.Queue) -> None:
    for n, ending in enumerate(["completed", "cancelled", "discarded"]):
        key = f"k{n}"
        first = gq.enqueue("a", unique_key=key, unique_scope="global").id
        if ending == "completed":
            gq.ack(take(gq, "a", expect=first))
        elif ending == "cancelled":
            gq.cancel(first)
        else:
            gq.discard(first)
        again = gq.enqueue("b", unique_key=key, unique_scope="global")
        assert again.created and again.id != first
    # A dead job is live: it keeps its key.
    first = gq.enqueue("a", unique_key="k", unique_scope="global", max_attempts=1).id
    gq.nack(take(gq, "a", expect=first), error="boom")
    assert gq.get(first).state == "dead"
    dup = gq.enqueue("b", unique_key="k", unique_scope="global")
    assert not dup.created and dup.id == first


def test_unique_for_with_a_global_key_looks_in_every_queue(gq: leaseq.Queue) -> None:
    first = gq.enqueue("a", unique_key="k", unique_scope="global").id
    gq.ack(take(gq, "a", expect=first))
    twin = gq.enqueue("b", unique_key="k", unique_scope="global", unique_for=60)
    assert not twin.created and twin.id == first
    fresh = gq.enqueue("b", unique_key="k", unique_scope="global")
    assert fresh.created


def test_enqueue_many_takes_unique_scope(gq: leaseq.Queue) -> None:
    results = gq.enqueue_many([
        {"queue": "a", "unique_key": "k", "unique_scope": "global"},
        {"queue": "b", "unique_key": "k", "unique_scope": "global"},
        {"queue": "c", "unique_key": "k"},
    ])
    assert results[0].created and not results[1].created and results[1].id == results[0].id
    assert results[2].created


def test_async_enqueue_takes_unique_scope(gq: leaseq.Queue, url: str, prefix: str) -> None:
    async def run() -> tuple[leaseq.EnqueueResult, leaseq.EnqueueResult]:
        async with leaseq.connect_async(url, table_prefix=prefix) as aq:
            one = await aq.enqueue("a", unique_key="k", unique_scope="global")
            two = await aq.enqueue("b", unique_key="k", unique_scope="global")
            return one, two

    one, two = asyncio.run(run())
    assert one.created and not two.created and two.id == one.id


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"unique_scope": "everywhere", "unique_key": "k"}, "unique_scope must be"),
    ({"unique_scope": "global"}, "needs a unique_key"),
])
def test_a_bad_unique_scope_is_refused_and_writes_nothing(
    q: leaseq.Queue, kwargs: dict[str, str], says: str
) -> None:
    with pytest.raises(leaseq.InvalidArgument, match=says):
        q.enqueue("a", **kwargs)  # type: ignore[arg-type]
    assert live_total(q) == 0


def test_tasks_take_unique_scope(gq: leaseq.Queue, url: str, prefix: str) -> None:
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="ta", unique_key=lambda n: f"n-{n}", unique_scope="global")
    def one(n: int) -> None: ...

    @app.task(queue="tb", unique_key=lambda n: f"n-{n}")
    def two(n: int) -> None: ...

    try:
        first = one.enqueue(n=1)
        assert first.created
        again = two.options(unique_scope="global").enqueue(n=1)
        assert (again.id, again.created) == (first.id, False)
        [batch] = two.options(unique_scope="global").enqueue_many([{"n": 1}])
        assert (batch.id, batch.created) == (first.id, False)
        assert two.enqueue(n=1).created  # its own queue's scope: another job
    finally:
        app.close()
