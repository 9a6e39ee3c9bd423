"""``Queue.oldest_transaction_age`` and ``ServerStats.oldest_transaction_age`` (issue 23, S11):
the age of the oldest transaction open on the server, the gauge an operator alerts on before
a held snapshot bloats the tables. PostgreSQL and MariaDB/MySQL measure it; SQLite, Redis
and memory have no such thing and say None."""

from __future__ import annotations

import asyncio
import time

import leaseq
from tests.helpers import ENGINES, held_transaction, oldest_bound, wait_for


def test_oldest_transaction_age_grows_while_another_connection_holds_one(q, backend, url,
                                                                        prefix):
    engine = ENGINES.get(backend, backend)
    if engine not in ("postgres", "mysql"):
        assert q.oldest_transaction_age() is None
        assert q.server_stats().oldest_transaction_age is None
        return
    idle = q.oldest_transaction_age()
    assert isinstance(idle, float) and 0.0 <= idle <= oldest_bound()
    with held_transaction(engine, f"{prefix}jobs") as began:
        # The gauge is the oldest of every session's transactions, and other tests' sessions
        # come and go, so it is only bounded below by ours: at least the time since our
        # snapshot, less a second of slack for MariaDB's whole-second trx_started. Polled every
        # 0.25 s: InnoDB refreshes INNODB_TRX only after 0.1 s without a read of it, so
        # faster polling would read the table as it was before the transaction began.
        def at_least_ours(elapsed: float) -> float | None:
            held = time.monotonic() - began
            age = q.oldest_transaction_age()
            if held < elapsed or age is None:
                return None
            assert age >= held - 1.0, (age, held)
            assert age <= oldest_bound(), (age, held)
            return age

        wait_for(lambda: at_least_ours(0.5), timeout=10, interval=0.25,
                 message="the held transaction")
        grown = wait_for(lambda: at_least_ours(2.0), timeout=10, interval=0.25,
                         message="the age to grow")
        assert grown >= 1.0
        age = q.server_stats().oldest_transaction_age
        assert age is not None and age >= time.monotonic() - began - 1.0 - 0.5
        assert age <= oldest_bound()

        async def from_asyncio() -> float | None:
            async with leaseq.connect_async(url, table_prefix=prefix,
                                            reclaim_interval=None) as aq:
                return await aq.oldest_transaction_age()

        seen = asyncio.run(from_asyncio())
        assert seen is not None and 1.0 <= seen <= oldest_bound()
