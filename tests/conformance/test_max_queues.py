"""A cap on the number of queues (seed 004 ``MaxTopics`` / ``ErrMaxTopicsReached``).

``configure_server(max_queues=N)`` is stored in the database and shared by every client;
an enqueue that would create queue N + 1 raises ``TooManyQueues`` with nothing written;
queues that already count take jobs as before; None lifts the cap. Chains and groups
count every queue they will use (later steps and callbacks too) when they start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import leaseq
from tests.conformance._util import live_total


def test_the_cap_refuses_queue_n_plus_one_and_writes_nothing(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    assert q.server_config() == leaseq.ServerConfig()
    q.enqueue("a")
    config = q.configure_server(max_queues=2)
    assert config == leaseq.ServerConfig(max_queues=2, queues=1)
    q.enqueue("b")
    with pytest.raises(leaseq.TooManyQueues, match=r"'c'.*max_queues=2") as caught:
        q.enqueue("c", unique_key="k")
    assert isinstance(caught.value, leaseq.LeaseqError)
    with pytest.raises(leaseq.TooManyQueues):
        q.enqueue_many([{"queue": "a"}, {"queue": "d"}])  # the whole batch is refused
    assert live_total(q) == 2
    assert "c" not in q.stats() and "d" not in q.stats()
    # Queues that count keep taking jobs, one at a time or in batches.
    q.enqueue("a")
    q.enqueue_many([{"queue": "a"}, {"queue": "b"}])
    assert q.server_config() == leaseq.ServerConfig(max_queues=2, queues=2)

    # Stored, so another client (sync or async) is held to it from its first call.
    with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as other:
        assert other.server_config().max_queues == 2
        with pytest.raises(leaseq.TooManyQueues):
            other.enqueue("e")

    async def run() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix) as aq:
            assert (await aq.server_config()).max_queues == 2
            with pytest.raises(leaseq.TooManyQueues):
                await aq.enqueue("e")
            await aq.enqueue("b")

    asyncio.run(run())
    assert live_total(q) == 6

    # None lifts the cap; a larger one admits more.
    assert q.configure_server(max_queues=None) == leaseq.ServerConfig()
    q.enqueue("c")
    q.configure_server(max_queues=4)
    q.enqueue("d")
    with pytest.raises(leaseq.TooManyQueues):
        q.enqueue("e")
    assert q.configure_server() == leaseq.ServerConfig(max_queues=4, queues=4)  # no change


def test_a_bad_max_queues_is_refused(q: leaseq.Queue) -> None:
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(leaseq.InvalidArgument, match="max_queues"):
            q.configure_server(max_queues=bad)  # type: ignore[arg-type]
    assert q.server_config() == leaseq.ServerConfig()


@pytest.fixture
def app(url: str, prefix: str) -> Iterator[leaseq.App]:
    """An app on the test's tables with one task per queue "a", "b", "c" and "d"."""
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)
    for name in "abcd":
        app.task(queue=name, name=name)(lambda x=0: x + 1)
    try:
        yield app
    finally:
        app.close()


def test_a_flow_counts_every_queue_it_will_use_and_is_refused_whole(
    app: leaseq.App, q: leaseq.Queue, backend: str
) -> None:
    a, b, c, d = (app.tasks[name] for name in "abcd")
    leaseq.group(a.s(1), b.s(1)).enqueue()
    app.queue.configure_server(max_queues=2)
    before = (live_total(q), set(q.stats()))
    refused = {
        "a chain's first step": lambda: leaseq.chain(c.s(1), a.s()).enqueue(),
        "a chain's later step": lambda: leaseq.chain(a.s(1), b.s(), c.s()).enqueue(),
        "a group member": lambda: leaseq.group(a.s(1), c.s(1)).enqueue(),
        "a group's callback": lambda: leaseq.group(a.s(1), b.s(1)).then(c.s()).enqueue(),
    }
    for what, start in refused.items():
        with pytest.raises(leaseq.TooManyQueues, match=r"'c'.*max_queues=2"):
            start()
        assert (live_total(q), set(q.stats())) == before, what
    assert q.server_config() == leaseq.ServerConfig(max_queues=2, queues=2)
    # Flows within the counted queues go in as before.
    leaseq.chain(a.s(1), b.s()).enqueue()
    leaseq.group(a.s(1), b.s(1)).enqueue()

    # A flow admitted has its later queues counted from the start, so its steps never
    # meet the cap halfway, and the queue it holds in reserve keeps others out.
    app.queue.configure_server(max_queues=3)
    flow = leaseq.chain(a.s(5), c.s()).enqueue()
    assert q.server_config() == leaseq.ServerConfig(max_queues=3, queues=3)
    with pytest.raises(leaseq.TooManyQueues):
        q.enqueue("d")
    first = q.dequeue("a", worker_id="w", limit=100)
    mine = next(job for job in first if job.id == flow.job_ids[0])
    q.ack(mine, 6)
    assert [j.payload for j in q.jobs(queue="c")] == [{"x": 6}]

    async def run() -> None:
        try:
            with pytest.raises(leaseq.TooManyQueues):
                await leaseq.group(a.s(1), d.s(1)).enqueue_async()
            with pytest.raises(leaseq.TooManyQueues):
                await leaseq.chain(a.s(1), d.s()).enqueue_async()
        finally:
            await app.async_queue.close()

    total = live_total(q)
    asyncio.run(run())
    assert live_total(q) == total and "d" not in q.stats()
