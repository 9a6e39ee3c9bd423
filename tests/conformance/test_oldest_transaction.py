"""``Queue.oldest_transaction_age`` and ``ServerStats.oldest_transaction_age`` (issue 23, S11):
the age of the oldest transaction open on the server, the gauge an operator alerts on before
a held snapshot bloats the tables. PostgreSQL and MariaDB/MySQL measure it; SQLite, Redis
and memory have no such thing and say None."""

from __future__ import annotations

import asyncio
import time

import leaseq
from tests.helpers import ENGINES, held_transaction, wait_for


def test_oldest_transaction_age_grows_while_another_connection_holds_one(q, backend, url,
                                                                        prefix):
    engine = ENGINES.get(backend, backend)
    if engine not in ("postgres", "mysql"):
        assert q.oldest_transaction_age() is None
        assert q.server_stats().oldest_transaction_age is None
        return
    idle = q.oldest_transaction_age()
    assert isinstance(idle, float) and idle >= 0.0
    with held_transaction(engine, f"{prefix}jobs") as began:
        # Other sessions may hold older ones, so the age is only bounded below by ours;
        # MariaDB's trx_started has whole seconds, hence the second of slack. Polled every
        # 0.25 s: InnoDB refreshes INNODB_TRX only after 0.1 s without a read of it, so
        # faster polling would read the table as it was before the transaction began.
        first = wait_for(lambda: (age := q.oldest_transaction_age()) is not None
                         and age >= 0.5 and age, timeout=10, interval=0.25,
                         message="the held transaction")
        wait_for(lambda: q.oldest_transaction_age() >= first + 1.0, timeout=10,
                 interval=0.25, message="the age to grow")
        age = q.server_stats().oldest_transaction_age
        assert age is not None and age >= time.monotonic() - began - 1.0 - 0.5

        async def from_asyncio() -> float | None:
            async with leaseq.connect_async(url, table_prefix=prefix,
                                            reclaim_interval=None) as aq:
                return await aq.oldest_transaction_age()

        seen = asyncio.run(from_asyncio())
        assert seen is not None and seen >= first + 1.0
