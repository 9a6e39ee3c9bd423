"""A cap on the number of queues (seed 004 ``MaxTopics`` / ``ErrMaxTopicsReached``).

``configure_server(max_queues=N)`` is stored in the database and shared by every client;
an enqueue that would create queue N + 1 raises ``TooManyQueues`` with nothing written;
queues that already count take jobs as before; None lifts the cap.
"""

from __future__ import annotations

import asyncio

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
