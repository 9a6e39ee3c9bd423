"""Job ids never repeat (design §59), without a real failover: a promotion presents the
client with a server whose identity differs from the stored one, which these tests fake by
editing the stored identity. The next connection must bump the epoch by exactly one and
move the ids past ``epoch << 40``, once, however many processes connect at that moment;
a database without the row records its server and renumbers nothing.

The real failovers are in tests/chaos/test_pg_failover.py and test_redis_failover.py.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

import leaseq
from leaseq.backends._sql.epoch import MAX_EPOCH, SHIFT, next_epoch
from tests.conftest import require
from tests.helpers import (
    MYSQL_URL,
    POSTGRES_URL,
    REDIS_CLUSTER_URL,
    REDIS_PLAIN_URL,
    REDIS_URL,
    drop_tables,
    new_prefix,
)

URLS = {"postgres": POSTGRES_URL, "mysql": MYSQL_URL, "redis": REDIS_URL,
        "redis_cluster": REDIS_CLUSTER_URL}
RACERS = 4


def stored(backend: str, prefix: str, identity: str | None = None) -> tuple[str, int] | None:
    """The stored ``(identity, epoch)``; with ``identity``, first overwrite the stored
    identity with it (what a promoted server looks like to the next connection)."""
    if backend.startswith("redis"):
        r = redis_client(backend)
        try:
            if identity is not None:
                r.hset(f"{{{prefix}}}:epoch", "identity", identity)
            found = r.hgetall(f"{{{prefix}}}:epoch")
        finally:
            r.close()
        return (found["identity"], int(found["epoch"])) if found else None
    if backend == "postgres":
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            if identity is not None:
                conn.execute(f"UPDATE {prefix}epoch SET identity = %s", (identity,))
            row = conn.execute(f"SELECT identity, epoch FROM {prefix}epoch").fetchone()
    else:
        import pymysql

        parts = urlsplit(MYSQL_URL)
        my = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                             user=parts.username, password=parts.password or "",
                             database=parts.path.lstrip("/"), autocommit=True)
        try:
            with my.cursor() as cur:
                if identity is not None:
                    cur.execute(f"UPDATE {prefix}epoch SET identity = %s", (identity,))
                cur.execute(f"SELECT identity, epoch FROM {prefix}epoch")
                row = cur.fetchone()
        finally:
            my.close()
    return None if row is None else (str(row[0]), int(row[1]))


def redis_client(backend: str) -> Any:
    import redis

    if backend == "redis_cluster":
        seed = urlsplit(REDIS_CLUSTER_URL)
        return redis.RedisCluster(host=seed.hostname, port=seed.port or 6379,
                                  decode_responses=True)
    return redis.Redis.from_url(REDIS_PLAIN_URL, decode_responses=True)


def stale(backend: str, identity: str) -> str:
    """An identity the server had before: the previous timeline on PostgreSQL (one step
    back, so the bump is one epoch), another server id on MariaDB, another replication id
    on Redis."""
    if backend == "postgres":
        return f"{int(identity, 16) - 1:08X}"
    return "0" * 40 if backend.startswith("redis") else f"{identity}0"


def _enqueue(url: str, prefix: str, start: Any, out: Any) -> None:
    start.wait(30)
    with leaseq.connect(url, table_prefix=prefix) as q:
        out.put(q.enqueue("ids", {"from": "racer"}).id)


@pytest.fixture(params=list(URLS))
def server(request: pytest.FixtureRequest) -> Any:
    """``(backend, url, prefix)`` of a server that hands out ids through a sequence a
    promotion can set back."""
    backend = request.param
    require(backend)
    prefix = new_prefix()
    yield backend, URLS[backend], prefix
    drop_tables(backend, prefix)  # SCANs 1,000 keys a call: the shared Redis holds many


def test_a_new_database_records_its_server_and_renumbers_nothing(server: Any) -> None:
    backend, url, prefix = server
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()  # (a no-op on Redis)
        first = q.enqueue("ids", {"n": 1}).id
    assert first < 1 << SHIFT
    identity, epoch = stored(backend, prefix) or ("", -1)
    assert epoch == 0 and identity


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_changed_server_moves_ids_past_the_next_epoch_once(server: Any, use_async: bool) -> None:
    backend, url, prefix = server
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()  # (a no-op on Redis)
        before = [q.enqueue("ids", {"n": n}).id for n in range(3)]
    identity, _ = stored(backend, prefix) or ("", 0)
    stored(backend, prefix, stale(backend, identity))  # as a promoted server presents it

    if use_async:
        import asyncio

        async def two() -> list[int]:
            async with leaseq.connect_async(url, table_prefix=prefix) as aq:
                return [(await aq.enqueue("ids", {"n": n})).id for n in range(2)]

        after = asyncio.run(two())
    else:
        with leaseq.connect(url, table_prefix=prefix) as q:
            after = [q.enqueue("ids", {"n": n}).id for n in range(2)]
    assert stored(backend, prefix) == (identity, 1)
    assert all(1 << SHIFT <= job_id < 2 << SHIFT for job_id in after), after
    assert after[1] == after[0] + 1  # moved once, not per insert
    with leaseq.connect(url, table_prefix=prefix) as q:  # the old ids still name their jobs
        assert [q.get(job_id).payload for job_id in before] == [{"n": n} for n in range(3)]
        assert q.enqueue("ids", {}).id == after[1] + 1  # a later client: no bump


def test_processes_connecting_at_once_bump_the_epoch_once(server: Any) -> None:
    backend, url, prefix = server
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()  # (a no-op on Redis)
        q.enqueue("ids", {})
    identity, _ = stored(backend, prefix) or ("", 0)
    stored(backend, prefix, stale(backend, identity))
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_enqueue, args=(url, prefix, start, out))
             for _ in range(RACERS)]
    for p in procs:
        p.start()
    start.set()
    ids = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * RACERS
    assert stored(backend, prefix) == (identity, 1)
    # One move: the racers' ids are consecutive from the epoch's first id.
    assert ids == list(range(1 << SHIFT, (1 << SHIFT) + RACERS)), ids


def test_the_epoch_arithmetic() -> None:
    assert MAX_EPOCH == 8191 and (MAX_EPOCH << SHIFT) + (1 << SHIFT) - 1 == 2**53 - 1
    assert next_epoch(0, "00000001", "00000002", ordered=True) == 1
    # A timeline two ahead: the promotion in between lost its own bump with its tail.
    assert next_epoch(1, "00000001", "00000003", ordered=True) == 3
    assert next_epoch(4, "00000003", "00000002", ordered=True) == 5  # never backwards
    assert next_epoch(2, "7", "9", ordered=False) == 3
    with pytest.raises(leaseq.LeaseqError, match="2\\^53"):
        next_epoch(MAX_EPOCH, "a", "b", ordered=False)


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_a_callers_connection_is_compared_too(backend: str) -> None:
    """``enqueue(..., conn=)`` on a caller's connection to a promoted server: the
    comparison reads in the caller's transaction, the move runs on a pooled connection,
    and the job inserted in the caller's transaction gets an id of the new epoch."""
    require(backend)
    url, prefix = URLS[backend], new_prefix()
    try:
        with leaseq.connect(url, table_prefix=prefix) as q:
            q.migrate()
            q.enqueue("ids", {})
            identity, _ = stored(backend, prefix) or ("", 0)
        stored(backend, prefix, stale(backend, identity))
        with leaseq.connect(url, table_prefix=prefix) as q:
            if backend == "postgres":
                import psycopg

                with psycopg.connect(POSTGRES_URL) as conn:  # a transaction of the caller's
                    job = q.enqueue("ids", {"in": "caller"}, conn=conn)
            else:
                import pymysql

                parts = urlsplit(MYSQL_URL)
                my = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                                     user=parts.username, password=parts.password or "",
                                     database=parts.path.lstrip("/"))
                try:
                    job = q.enqueue("ids", {"in": "caller"}, conn=my)
                    my.commit()
                finally:
                    my.close()
            assert 1 << SHIFT <= job.id < 2 << SHIFT, job.id
            assert q.get(job.id).payload == {"in": "caller"}
        assert stored(backend, prefix) == (identity, 1)
    finally:
        drop_tables(backend, prefix)


def test_behind_a_transaction_pooler_an_idle_connection_compares_again() -> None:
    """``pgbouncer=true``: the client's connection to the pooler outlives a failover of
    the server behind it, so a connection unused for more than a second compares again
    before its next write; one in steady use does not (no cost per insert)."""
    from leaseq.backends._sql.epoch import POOLED_IDLE
    from tests.helpers import PGBOUNCER_URL

    require("postgres_pgbouncer")
    prefix = new_prefix()
    try:
        with leaseq.connect(PGBOUNCER_URL, table_prefix=prefix, pool_size=1) as q:
            q.migrate()
            q.enqueue("ids", {})
            used = time.monotonic()
            identity, _ = stored("postgres", prefix) or ("", 0)
            stored("postgres", prefix, stale("postgres", identity))
            busy = q.enqueue("ids", {}).id
            if time.monotonic() - used < POOLED_IDLE:  # (a loaded machine may take longer)
                # In steady use: not asked again (the stale identity stays as it was).
                assert busy < 1 << SHIFT and stored("postgres", prefix) == (
                    stale("postgres", identity), 0)
            time.sleep(POOLED_IDLE + 0.2)
            moved = q.enqueue("ids", {}).id
        assert 1 << SHIFT <= moved < 2 << SHIFT, moved
        assert stored("postgres", prefix) == (identity, 1)
    finally:
        drop_tables("postgres", prefix)
