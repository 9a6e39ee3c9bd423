"""Transactional enqueue and ack: leaseq's writes commit or roll back with the caller's own
DB-API connection (sqlite3, psycopg, PyMySQL) and the caller's own side effects.

Each test runs once per SQL backend on fresh tables (conftest's ``q`` fixture, with
``backend`` narrowed to the SQL backends here). The caller's side effects go to a table of
this module's own, created under the test's prefix and dropped at the end.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import (
    MYSQL_URL,
    PGBOUNCER_URL,
    POSTGRES_URL,
    REDIS_URL,
    SQL_BACKENDS,
    drop_tables,
    new_prefix,
    reachable,
    wait_for,
)


@pytest.fixture(params=SQL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's ``backend`` here: only SQL backends join a transaction."""
    name: str = request.param
    require(name)
    return name


def open_connection(backend: str, url: str) -> Any:
    """The application's own DB-API connection to the queue's database."""
    if backend == "sqlite":
        return sqlite3.connect(url[len("sqlite:///"):])
    if backend == "postgres":
        import psycopg

        return psycopg.connect(POSTGRES_URL)
    if backend == "postgres_pgbouncer":  # the caller's own connection, through PgBouncer
        import psycopg

        from leaseq.backends.postgres.url import parse

        return psycopg.connect(parse(PGBOUNCER_URL).dsn)
    if backend == "mysql":
        import pymysql

        parts = urlsplit(MYSQL_URL)
        return pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                               user=parts.username, password=parts.password or "",
                               database=parts.path.lstrip("/"), autocommit=False)
    raise ValueError(backend)


class App:
    """The caller's side of the test: its connections and its own ``side`` table."""

    def __init__(self, backend: str, url: str, prefix: str) -> None:
        self.backend, self.url = backend, url
        self.table = f"{prefix}side"
        self.mark = "?" if backend == "sqlite" else "%s"
        self.conns: list[Any] = []

    def connect(self) -> Any:
        conn = open_connection(self.backend, self.url)
        self.conns.append(conn)
        return conn

    def execute(self, conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        cur = conn.cursor()
        try:
            cur.execute(sql.replace("?", self.mark), params)
            return list(cur.fetchall()) if cur.description else []
        finally:
            cur.close()

    def write_side_effect(self, conn: Any, job_id: int, note: str) -> None:
        self.execute(conn, f"INSERT INTO {self.table} (job_id, note) VALUES (?, ?)",
                     (job_id, note))

    def side_effects(self) -> list[tuple[int, str]]:
        """What a fresh connection sees committed in the side table."""
        conn = open_connection(self.backend, self.url)
        try:
            rows = self.execute(conn, f"SELECT job_id, note FROM {self.table} ORDER BY job_id")
            conn.rollback()
            return [(int(a), b) for a, b in rows]
        finally:
            conn.close()

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.rollback()
            finally:
                conn.close()


@pytest.fixture
def app(backend: str, url: str, prefix: str, q: leaseq.Queue) -> Iterator[App]:
    """Depends on ``q`` so that it is torn down first: the caller's connections close
    (releasing their locks) before any table is dropped."""
    caller = App(backend, url, prefix)
    conn = caller.connect()
    caller.execute(conn, f"CREATE TABLE {caller.table} (job_id BIGINT PRIMARY KEY, "
                         "note VARCHAR(100) NOT NULL)")
    conn.commit()
    try:
        yield caller
    finally:
        caller.close()
        conn = open_connection(backend, url)
        try:
            caller.execute(conn, f"DROP TABLE IF EXISTS {caller.table}")
            conn.commit()
        finally:
            conn.close()


def empty(q: leaseq.Queue) -> bool:
    return all(not any(s.as_dict()[k] for k in s.as_dict() if k != "queue")
               for s in q.stats().values())


# -- transactional enqueue -----------------------------------------------------------------


def test_enqueue_in_callers_transaction_exists_after_commit(q: leaseq.Queue, app: App) -> None:
    conn = app.connect()
    app.write_side_effect(conn, 1, "order placed")
    r = q.enqueue("emails", {"order": 1}, conn=conn)
    assert r.created
    with pytest.raises(leaseq.JobNotFound):
        q.get(r.id)  # not committed yet: invisible to every other connection
    conn.commit()

    assert q.get(r.id).state == "available"
    assert app.side_effects() == [(1, "order placed")]
    [job] = q.dequeue("emails", worker_id="w")
    assert (job.id, job.payload) == (r.id, {"order": 1})
    q.ack(job)
    assert q.get(r.id).state == "completed"


def test_enqueue_in_callers_transaction_vanishes_on_rollback(
    q: leaseq.Queue, app: App
) -> None:
    conn = app.connect()
    app.write_side_effect(conn, 1, "order placed")
    r = q.enqueue("emails", {"order": 1}, unique_key="order-1", conn=conn)
    conn.rollback()

    with pytest.raises(leaseq.JobNotFound):
        q.get(r.id)
    assert empty(q), q.stats()
    assert q.dequeue("emails", worker_id="w") == []
    assert app.side_effects() == []
    # The rolled-back job holds no unique key: enqueueing it again creates it.
    again = q.enqueue("emails", {"order": 1}, unique_key="order-1")
    assert again.created


def test_enqueue_many_in_callers_transaction_commit(q: leaseq.Queue, app: App) -> None:
    conn = app.connect()
    items = [
        {"queue": "emails", "payload": {"n": 1}},
        {"queue": "emails", "payload": {"n": 2}, "priority": 5},
        {"queue": "sms", "payload": {"n": 3}, "unique_key": "u-3"},
        {"queue": "sms", "payload": {"n": 4}, "delay": 3600},
    ]
    results = q.enqueue_many(items, conn=conn)
    assert [r.created for r in results] == [True] * 4
    # A duplicate of a key written earlier in the same open transaction.
    twin = q.enqueue("sms", {"n": 5}, unique_key="u-3", conn=conn)
    assert (twin.id, twin.created) == (results[2].id, False)
    assert empty(q)
    conn.commit()

    states = [q.get(r.id).state for r in results]
    assert states == ["available", "available", "available", "scheduled"]
    stats = q.stats()
    assert (stats["emails"].available, stats["sms"].available, stats["sms"].scheduled) == (
        2, 1, 1)
    jobs = q.dequeue(["emails", "sms"], worker_id="w", limit=10)
    assert sorted(j.payload["n"] for j in jobs) == [1, 2, 3]
    assert jobs[0].payload == {"n": 2}  # priority first


def test_enqueue_many_in_callers_transaction_rollback(q: leaseq.Queue, app: App) -> None:
    conn = app.connect()
    app.write_side_effect(conn, 7, "batch")
    results = q.enqueue_many(
        [{"queue": "emails", "payload": {"n": n}, "unique_key": f"k{n % 2}" if n < 2 else None}
         for n in range(5)],
        conn=conn,
    )
    assert len(results) == 5
    conn.rollback()

    for r in results:
        with pytest.raises(leaseq.JobNotFound):
            q.get(r.id)
    assert empty(q), q.stats()
    assert app.side_effects() == []


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_unique_twin_in_an_open_transaction(q: leaseq.Queue, app: App, end: str) -> None:
    """A producer outside the transaction that races an uncommitted twin gets the twin if
    it commits, and a job of its own if it rolls back; never an error, never two jobs."""
    conn = app.connect()
    mine = q.enqueue("emails", {"by": "tx"}, unique_key="order-9", conn=conn)
    assert mine.created
    outcome: dict[str, Any] = {}

    def produce() -> None:
        try:
            outcome["result"] = q.enqueue("emails", {"by": "other"}, unique_key="order-9")
        except BaseException as exc:
            outcome["error"] = exc

    other = threading.Thread(target=produce)
    other.start()
    other.join(timeout=1)  # it waits for the transaction (or sees nothing yet)
    conn.commit() if end == "commit" else conn.rollback()
    other.join(timeout=30)
    assert not other.is_alive()
    assert "error" not in outcome, outcome
    result = outcome["result"]
    if end == "commit":
        assert (result.id, result.created) == (mine.id, False)
    else:
        # (SQLite may hand the rolled-back id out again: it never named a job.)
        assert result.created
    info = q.get(result.id)
    assert (info.state, info.unique_key) == ("available", "order-9")
    assert info.payload == {"by": "tx" if end == "commit" else "other"}
    assert q.stats()["emails"].available == 1


def test_enqueue_commits_with_callers_later_work_on_the_same_connection(
    q: leaseq.Queue, app: App
) -> None:
    """leaseq's savepoint/statement does not end the caller's transaction: what the caller
    writes after the enqueue is in the same transaction."""
    conn = app.connect()
    r = q.enqueue("emails", {"n": 1}, conn=conn)
    app.write_side_effect(conn, r.id, "after the enqueue")
    conn.rollback()
    with pytest.raises(leaseq.JobNotFound):
        q.get(r.id)
    assert app.side_effects() == []

    r = q.enqueue("emails", {"n": 2}, conn=conn)
    app.write_side_effect(conn, r.id, "after the enqueue")
    conn.commit()
    assert q.get(r.id).state == "available"
    assert app.side_effects() == [(r.id, "after the enqueue")]


# -- transactional ack ---------------------------------------------------------------------


def test_ack_in_callers_transaction_commit(q: leaseq.Queue, app: App) -> None:
    job_id = q.enqueue("emails", {"to": "a@b.c"}).id
    [job] = q.dequeue("emails", worker_id="w", lease=60)
    conn = app.connect()
    app.write_side_effect(conn, job_id, "email sent")
    q.ack(job, result={"sent": True}, conn=conn)
    assert q.get(job_id).state == "running"  # not committed yet
    conn.commit()

    info = q.get(job_id)
    assert (info.state, info.result, info.attempts) == ("completed", {"sent": True}, 1)
    assert app.side_effects() == [(job_id, "email sent")]
    stats = q.stats()["emails"]
    assert (stats.running, stats.completed) == (0, 1)
    # A repeated transactional ack must refuse, or a retried transaction would commit its
    # side effects twice; a plain repeated ack by the same lease is a harmless no-op.
    again = app.connect()
    with pytest.raises(leaseq.LeaseLost):
        q.ack(job, conn=again)
    again.rollback()
    q.ack(job)
    assert q.get(job_id).result == {"sent": True}


def test_ack_in_callers_transaction_rollback_keeps_the_job_running(
    q: leaseq.Queue, app: App
) -> None:
    job_id = q.enqueue("emails", {"to": "a@b.c"}).id
    [job] = q.dequeue("emails", worker_id="w", lease=60)
    before = q.get(job_id)
    conn = app.connect()
    app.write_side_effect(conn, job_id, "email sent")
    q.ack(job, result={"sent": True}, conn=conn)
    conn.rollback()

    after = q.get(job_id)
    assert after == before
    assert (after.state, after.worker_id, after.attempts) == ("running", "w", 1)
    assert app.side_effects() == []
    assert q.stats()["emails"].completed == 0

    q.ack(job, result={"sent": "later"})  # the lease is still ours
    info = q.get(job_id)
    assert (info.state, info.result) == ("completed", {"sent": "later"})
    assert q.stats()["emails"].completed == 1


def test_stale_ack_in_callers_transaction_raises_and_rolls_back(
    q: leaseq.Queue, app: App
) -> None:
    job_id = q.enqueue("emails", {"to": "a@b.c"}).id
    [stale] = q.dequeue("emails", worker_id="zombie", lease=0.3)
    wait_for(lambda: q.reclaim() == 1, timeout=10, message="the lease to be reclaimed")
    [fresh] = q.dequeue("emails", worker_id="w", lease=60)
    assert fresh.id == job_id and fresh.lease_token != stale.lease_token
    before = q.get(job_id)

    conn = app.connect()
    app.write_side_effect(conn, job_id, "email sent twice?")
    with pytest.raises(leaseq.LeaseLost):
        q.ack(stale, result={"by": "zombie"}, conn=conn)
    conn.rollback()

    assert app.side_effects() == []
    after = q.get(job_id)
    assert after == before
    assert (after.state, after.worker_id, after.attempts) == ("running", "w", 2)
    stats = q.stats()["emails"]
    assert (stats.running, stats.completed) == (1, 0)

    # The connection is still usable, and the rightful holder completes the job once.
    conn2 = app.connect()
    app.write_side_effect(conn2, job_id, "email sent")
    q.ack(fresh, result={"by": "w"}, conn=conn2)
    conn2.commit()
    info = q.get(job_id)
    assert (info.state, info.result) == ("completed", {"by": "w"})
    assert app.side_effects() == [(job_id, "email sent")]
    assert q.stats()["emails"].completed == 1


def test_stale_ack_leaves_callers_earlier_work_to_the_caller(
    q: leaseq.Queue, app: App
) -> None:
    """LeaseLost undoes leaseq's own writes only; the caller decides about the rest (here
    it commits its side effect anyway, and the job is untouched)."""
    q.enqueue("emails", {"to": "a@b.c"})
    [stale] = q.dequeue("emails", worker_id="zombie", lease=0.3)
    wait_for(lambda: q.reclaim() == 1, timeout=10, message="the lease to be reclaimed")
    conn = app.connect()
    app.write_side_effect(conn, stale.id, "logged")
    with pytest.raises(leaseq.LeaseLost):
        q.ack(stale, conn=conn)
    conn.commit()
    assert app.side_effects() == [(stale.id, "logged")]
    assert q.get(stale.id).state == "available"
    assert q.stats()["emails"].completed == 0


def test_ack_in_open_transaction_wins_over_a_reclaim_before_the_commit(
    q: leaseq.Queue, app: App
) -> None:
    """The caller's ack holds the job while its transaction is open: a reclaim (and a
    dequeue) after the lease ran out must neither re-deliver the job nor undo the ack."""
    job_id = q.enqueue("emails", {"to": "a@b.c"}).id
    [job] = q.dequeue("emails", worker_id="w", lease=0.3)
    conn = app.connect()
    app.write_side_effect(conn, job_id, "email sent")
    q.ack(job, result={"sent": True}, conn=conn)
    time.sleep(0.5)  # past the lease, with the completion not yet committed

    # SQLite serialises writers, so there the reclaim waits for the commit; PostgreSQL and
    # MySQL skip (or wait for) the locked row. Either way the outcome is the same.
    outcome: dict[str, Any] = {}

    def reclaim_and_dequeue() -> None:
        outcome["reclaimed"] = q.reclaim()
        outcome["dequeued"] = q.dequeue("emails", worker_id="other", lease=60)

    other = threading.Thread(target=reclaim_and_dequeue)
    other.start()
    if app.backend != "sqlite":
        other.join(timeout=5)  # returns as soon as the row was skipped
    conn.commit()
    other.join(timeout=30)
    assert not other.is_alive()
    assert outcome == {"reclaimed": 0, "dequeued": []}, outcome
    info = q.get(job_id)
    assert (info.state, info.result, info.attempts) == ("completed", {"sent": True}, 1)
    assert app.side_effects() == [(job_id, "email sent")]
    stats = q.stats()["emails"]
    assert (stats.available, stats.running, stats.completed) == (0, 0, 1)


def test_broken_caller_connection_raises_a_leaseq_error(
    q: leaseq.Queue, app: App
) -> None:
    """Never a raw driver error: a closed connection is a BackendError, nothing written."""
    conn = app.connect()
    conn.close()
    with pytest.raises(leaseq.BackendError):
        q.enqueue("emails", {"n": 1}, conn=conn)
    with pytest.raises(leaseq.BackendError):
        q.enqueue_many([{"queue": "emails", "payload": {"n": 2}}], conn=conn)
    q.enqueue("emails", {"n": 3})
    [job] = q.dequeue("emails", worker_id="w", lease=60)
    with pytest.raises(leaseq.BackendError):
        q.ack(job, conn=conn)
    assert q.get(job.id).state == "running"
    stats = q.stats()["emails"]
    assert (stats.available, stats.running, stats.completed) == (0, 1, 0)
    app.conns.remove(conn)


# -- refused connections -------------------------------------------------------------------


@pytest.fixture
def memory_q() -> Iterator[leaseq.Queue]:
    queue = leaseq.connect("memory://", reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture
def redis_q() -> Iterator[leaseq.Queue]:
    """A Redis queue under a fresh key prefix: Redis has no transaction to join."""
    require("redis")
    prefix = new_prefix()
    queue = leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()
        drop_tables("redis", prefix)


def refuses_a_connection(queue: leaseq.Queue) -> None:
    """``conn=`` raises ConfigurationError and writes nothing; without it, all is well."""
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(leaseq.ConfigurationError):
            queue.enqueue("emails", {"n": 1}, conn=conn)
        with pytest.raises(leaseq.ConfigurationError):
            queue.enqueue_many([{"queue": "emails", "payload": {"n": 2}}], conn=conn)
        assert queue.stats() == {}

        job_id = queue.enqueue("emails", {"n": 3}).id
        [job] = queue.dequeue("emails", worker_id="w")
        with pytest.raises(leaseq.ConfigurationError):
            queue.ack(job, result={"ok": True}, conn=conn)
        assert queue.get(job_id).state == "running"
        queue.ack(job)
        assert queue.get(job_id).state == "completed"
    finally:
        conn.close()


def test_memory_backend_refuses_a_connection(memory_q: leaseq.Queue) -> None:
    refuses_a_connection(memory_q)


def test_redis_backend_refuses_a_connection(redis_q: leaseq.Queue) -> None:
    assert not redis_q._backend.supports_transactions
    refuses_a_connection(redis_q)


def wrong_connection(backend: str) -> Any:
    """A live DB-API connection of another driver than the queue's."""
    if backend != "sqlite":
        return sqlite3.connect(":memory:")
    for other in ("postgres", "mysql"):
        if reachable(other) is None:
            return open_connection(other, "")
    pytest.skip("needs a PostgreSQL or MySQL server for a non-sqlite3 connection")
    return None


@pytest.mark.parametrize("kind", ["other driver", "not a connection"])
def test_connection_of_the_wrong_type_is_refused(
    q: leaseq.Queue, backend: str, kind: str
) -> None:
    conn = wrong_connection(backend) if kind == "other driver" else object()
    try:
        with pytest.raises(leaseq.ConfigurationError):
            q.enqueue("emails", {"n": 1}, conn=conn)
        with pytest.raises(leaseq.ConfigurationError):
            q.enqueue_many([{"queue": "emails", "payload": {"n": 2}}], conn=conn)
        assert empty(q), q.stats()

        job_id = q.enqueue("emails", {"n": 3}).id
        [job] = q.dequeue("emails", worker_id="w", lease=60)
        with pytest.raises(leaseq.ConfigurationError):
            q.ack(job, conn=conn)
        assert q.get(job_id).state == "running"
        q.ack(job)
        assert q.get(job_id).state == "completed"
    finally:
        if hasattr(conn, "close"):
            conn.close()
