"""``conn=`` with SQLAlchemy objects: a ``Connection`` or ``Session`` (``Queue``), an
``AsyncConnection`` or ``AsyncSession`` (``AsyncQueue``). The job, or the ack, commits and
rolls back with the caller's business row written through the same object.

Each test runs once per SQL backend on fresh leaseq tables and a business table of its
own: SQLite (``sqlite://`` / ``sqlite+aiosqlite://``), PostgreSQL (``postgresql+psycopg://``)
and MySQL/MariaDB (``mysql+pymysql://`` / ``mysql+aiomysql://``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import leaseq
from leaseq.errors import ConfigurationError, JobNotFound
from tests.conftest import require
from tests.helpers import SQL_BACKENDS


@pytest.fixture(params=SQL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's ``backend``: only SQL backends join a transaction."""
    name: str = request.param
    require(name)
    return name


def sqlalchemy_url(url: str, is_async: bool) -> str:
    """The SQLAlchemy URL of the queue's own database, through the driver leaseq drives."""
    scheme, rest = url.split("://", 1)
    driver = {
        "sqlite": ("sqlite", "sqlite+aiosqlite"),
        "postgresql": ("postgresql+psycopg", "postgresql+psycopg"),
        "mysql": ("mysql+pymysql", "mysql+aiomysql"),
    }[scheme][is_async]
    return f"{driver}://{rest}"


class Orders:
    """The caller's business table, next to leaseq's tables in the same database."""

    def __init__(self, engine: Engine, prefix: str) -> None:
        self.engine, self.table = engine, f"{prefix}orders"

    def insert(self, n: int) -> Any:
        return text(f"INSERT INTO {self.table} (id, note) VALUES ({n}, 'order {n}')")

    def committed(self) -> list[int]:
        """What a fresh connection sees committed."""
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(text(f"SELECT id FROM {self.table} ORDER BY id"))]


@pytest.fixture
def engine(url: str, q: leaseq.Queue) -> Iterator[Engine]:
    """Depends on ``q`` so that it is disposed of (its locks released) before leaseq's
    tables are dropped."""
    eng = create_engine(sqlalchemy_url(url, is_async=False))
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def orders(engine: Engine, prefix: str) -> Iterator[Orders]:
    table = Orders(engine, prefix)
    with engine.begin() as c:
        c.execute(text(f"CREATE TABLE {table.table} (id INTEGER PRIMARY KEY, "
                       "note VARCHAR(100) NOT NULL)"))
    try:
        yield table
    finally:
        with engine.begin() as c:
            c.execute(text(f"DROP TABLE {table.table}"))


def absent(q: leaseq.Queue, job_id: int) -> bool:
    try:
        q.get(job_id)
    except JobNotFound:
        return True
    return False


# -- sync: Connection and Session ----------------------------------------------------------


def test_connection_enqueue_commits_and_rolls_back_with_the_business_row(
    q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    with engine.connect() as c:
        c.execute(orders.insert(1))
        kept = q.enqueue("emails", {"order": 1}, conn=c)
        assert absent(q, kept.id)  # not committed yet: invisible to leaseq's own pool
        c.commit()
        c.execute(orders.insert(2))
        gone = q.enqueue("emails", {"order": 2}, unique_key="order-2", conn=c)
        c.rollback()
    assert q.get(kept.id).state == "available"
    assert absent(q, gone.id)
    assert orders.committed() == [1]
    assert q.enqueue("emails", {"order": 2}, unique_key="order-2").created


def test_enqueue_first_begins_the_transaction(
    q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    """Nothing run on the Connection yet: the enqueue begins its transaction (as a first
    statement would), so SQLAlchemy's commit commits the job, and its rollback takes it
    back. Without that begin, ``commit()`` would be a no-op and the job lost."""
    with engine.connect() as c:
        assert not c.in_transaction()
        kept = q.enqueue("emails", {"order": 3}, conn=c)
        assert c.in_transaction()
        c.commit()
        gone = q.enqueue("emails", {"order": 4}, conn=c)
        c.execute(orders.insert(4))
        c.rollback()
    assert q.get(kept.id).state == "available"
    assert absent(q, gone.id)
    assert orders.committed() == []


def test_session_enqueue_and_enqueue_many_commit_and_roll_back(
    q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    with Session(engine) as session:
        session.execute(orders.insert(1))
        one = q.enqueue("emails", {"order": 1}, conn=session)
        many = q.enqueue_many([{"queue": "emails", "payload": {"n": n}} for n in range(3)],
                              conn=session)
        session.commit()
        two = q.enqueue("emails", {"order": 2}, conn=session)  # a new transaction begins
        session.execute(orders.insert(2))
        session.rollback()
    assert [q.get(r.id).state for r in [one, *many]] == ["available"] * 4
    assert absent(q, two.id)
    assert orders.committed() == [1]


def test_scoped_session_joins_the_transaction(
    q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    session = scoped_session(sessionmaker(engine))
    try:
        session.execute(orders.insert(1))
        kept = q.enqueue("emails", {"order": 1}, conn=session)
        session.commit()
        gone = q.enqueue("emails", {"order": 2}, conn=session)
        session.rollback()
    finally:
        session.remove()
    assert q.get(kept.id).state == "available"
    assert absent(q, gone.id)
    assert orders.committed() == [1]


def test_raw_pool_connection_is_the_driver_connection(
    q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    """``engine.raw_connection()``: the DB-API connection the caller drives itself."""
    raw = engine.raw_connection()
    try:
        kept = q.enqueue("emails", {"order": 1}, conn=raw)
        raw.commit()
        gone = q.enqueue("emails", {"order": 2}, conn=raw)
        raw.rollback()
    finally:
        raw.close()
    assert q.get(kept.id).state == "available"
    assert absent(q, gone.id)


def test_session_ack_joins_the_transaction(
    q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    q.enqueue("emails", {"order": 5})
    [job] = q.dequeue("emails", worker_id="w")
    with Session(engine) as session:
        session.execute(orders.insert(5))
        q.ack(job, {"sent": True}, conn=session)
        session.rollback()
    assert q.get(job.id).state == "running"  # the ack rolled back: still leased
    assert q.stats()["emails"].completed == 0
    with Session(engine) as session, session.begin():
        session.execute(orders.insert(5))
        q.ack(job, {"sent": True}, conn=session)
    info = q.get(job.id)
    assert (info.state, info.result) == ("completed", {"sent": True})
    assert orders.committed() == [5]


# -- async: AsyncConnection and AsyncSession -----------------------------------------------


def test_async_connection_and_session_join_the_transaction(
    url: str, prefix: str, q: leaseq.Queue, orders: Orders
) -> None:
    """Jobs are told apart by payload: SQLite hands a rolled-back id out again."""

    async def main() -> str:
        aq = leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None)
        eng: AsyncEngine = create_async_engine(sqlalchemy_url(url, is_async=True))
        try:
            async with eng.connect() as c:
                await c.execute(orders.insert(1))
                await aq.enqueue("emails", {"order": 1}, conn=c)
                await c.commit()
                await aq.enqueue("emails", {"order": 2}, conn=c)  # begins the transaction
                await c.execute(orders.insert(2))
                await c.rollback()
            async with AsyncSession(eng) as session:
                await session.execute(orders.insert(3))
                await aq.enqueue("emails", {"order": 3}, conn=session)
                await session.commit()
                await aq.enqueue_many([{"queue": "emails", "payload": {"order": 4}}],
                                      conn=session)
                await session.rollback()
                await aq.enqueue("emails", {"order": 6}, conn=session)  # begins, commits
                await session.commit()

            [job] = await aq.dequeue("emails", worker_id="w")
            assert job.payload == {"order": 1}
            async with AsyncSession(eng) as session:
                await aq.ack(job, conn=session)
                await session.execute(orders.insert(5))
                await session.rollback()
            state_after_rollback = (await aq.get(job.id)).state
            async with AsyncSession(eng) as session, session.begin():
                await aq.ack(job, conn=session)
                await session.execute(orders.insert(5))
            return state_after_rollback
        finally:
            await eng.dispose()
            await aq.close()

    assert asyncio.run(main()) == "running"  # the first ack rolled back with its session
    assert {j.payload["order"]: j.state for j in q.jobs("emails")} == {
        1: "completed", 3: "available", 6: "available"}
    assert orders.committed() == [1, 3, 5]


# -- wrong pairings: a clear ConfigurationError, nothing written ---------------------------


def test_wrong_objects_are_refused(
    backend: str, url: str, prefix: str, q: leaseq.Queue, engine: Engine, orders: Orders
) -> None:
    with pytest.raises(ConfigurationError, match="Engine, which has no transaction"):
        q.enqueue("emails", {}, conn=engine)
    async_engine = create_async_engine(sqlalchemy_url(url, is_async=True))

    async def async_to_sync_queue() -> None:
        try:
            async with AsyncSession(async_engine) as session:
                with pytest.raises(ConfigurationError, match="AsyncSession, an asyncio"):
                    q.enqueue("emails", {}, conn=session)
        finally:
            await async_engine.dispose()

    async def sync_to_async_queue() -> None:
        aq = leaseq.connect_async(url, table_prefix=prefix)
        try:
            with Session(engine) as session:
                with pytest.raises(ConfigurationError, match="sync SQLAlchemy Session"):
                    await aq.enqueue("emails", {}, conn=session)
                with pytest.raises(ConfigurationError, match="AsyncEngine"):
                    await aq.enqueue("emails", {}, conn=async_engine)
        finally:
            await aq.close()

    asyncio.run(async_to_sync_queue())
    asyncio.run(sync_to_async_queue())
    assert q.stats() == {} or q.stats()["emails"].available == 0


def test_connection_to_another_database_kind_is_refused(
    backend: str, q: leaseq.Queue, tmp_path: Any
) -> None:
    """A SQLAlchemy engine on SQLite handed to a queue on a server database (or one on
    PostgreSQL to a queue on SQLite): refused before anything runs."""
    if backend == "sqlite":
        require("postgres")
        from tests.helpers import POSTGRES_URL

        other = create_engine(sqlalchemy_url(POSTGRES_URL, is_async=False))
    else:
        other = create_engine(f"sqlite:///{tmp_path}/other.db")
    try:
        with other.connect() as c, pytest.raises(ConfigurationError, match="this queue is on"):
            q.enqueue("emails", {}, conn=c)
    finally:
        other.dispose()
    assert q.stats() == {} or q.stats()["emails"].available == 0


def test_aiosqlite_bound_to_its_thread_is_refused(tmp_path: Any) -> None:
    """A plain ``aiosqlite.connect`` keeps ``check_same_thread``: an AsyncQueue on SQLite
    runs its statements in a worker thread, so it says how to open the connection;
    with ``check_same_thread=False`` the job joins the transaction."""
    import aiosqlite

    url = f"sqlite:///{tmp_path}/jobs.db"

    async def main() -> tuple[int, bool]:
        aq = leaseq.connect_async(url)
        await aq.migrate()
        try:
            async with aiosqlite.connect(f"{tmp_path}/jobs.db") as bound:
                with pytest.raises(ConfigurationError, match="check_same_thread=False"):
                    await aq.enqueue("emails", {}, conn=bound)
            async with aiosqlite.connect(f"{tmp_path}/jobs.db",
                                         check_same_thread=False) as free:
                kept = await aq.enqueue("emails", {"n": 1}, conn=free)
                await free.commit()
                gone = await aq.enqueue("emails", {"n": 2}, conn=free)
                await free.rollback()
            try:
                await aq.get(gone.id)
                gone_absent = False
            except JobNotFound:
                gone_absent = True
            return (await aq.get(kept.id)).id, gone_absent
        finally:
            await aq.close()

    kept_id, gone_absent = asyncio.run(main())
    assert kept_id > 0 and gone_absent


def test_leaseq_never_imports_sqlalchemy(tmp_path: Any) -> None:
    """A plain sqlite3 ``conn=`` in a process that never imported SQLAlchemy leaves it
    unimported: leaseq works without it installed."""
    import subprocess
    import sys

    code = (
        "import sqlite3, sys, asyncio, leaseq\n"
        f"url = 'sqlite:///{tmp_path}/jobs.db'\n"
        "q = leaseq.connect(url); q.migrate()\n"
        f"conn = sqlite3.connect('{tmp_path}/jobs.db', check_same_thread=False)\n"
        "q.enqueue('emails', {}, conn=conn); conn.commit()\n"
        "async def main():\n"
        "    aq = leaseq.connect_async(url)\n"
        "    await aq.enqueue('emails', {}, conn=conn); conn.commit(); await aq.close()\n"
        "asyncio.run(main())\n"
        "assert q.stats()['emails'].available == 2\n"
        "print('sqlalchemy' in sys.modules, 'aiosqlite' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
