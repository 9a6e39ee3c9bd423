"""Test plumbing shared by every test module: backend URLs, isolation, waiting."""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import leaseq

T = TypeVar("T")

POSTGRES_URL = os.environ.get("LEASEQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("LEASEQ_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("LEASEQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
# For redis-py clients of the tests' own: without leaseq's options (wait_replicas=...).
REDIS_PLAIN_URL = REDIS_URL.split("?")[0]
REDIS_CLUSTER_URL = os.environ.get("LEASEQ_TEST_REDIS_CLUSTER", "redis+cluster://127.0.0.1:7001")
# The same PostgreSQL through a transaction-mode PgBouncer (scripts/services starts it).
PGBOUNCER_URL = os.environ.get("LEASEQ_TEST_PGBOUNCER",
                               "postgresql://postgres@127.0.0.1:6432/test?pgbouncer=true")
SQL_BACKENDS = ["sqlite", "postgres", "mysql"]
BACKENDS = ["memory", *SQL_BACKENDS, "redis"]
# The conformance suite also runs on a 3-master Redis Cluster and on PostgreSQL through a
# transaction-mode PgBouncer (scripts/services starts both); the other tests that take
# ``q`` do not, to keep the suite's time.
CONFORMANCE_BACKENDS = [*BACKENDS, "redis_cluster", "postgres_pgbouncer"]
ENGINES = {"postgres_pgbouncer": "postgres", "redis_cluster": "redis"}
"""A test backend's ``Queue.backend`` name, where the two differ."""


SUITE_STARTED = time.time()
"""When this test process imported the helpers: every transaction the suite holds began
after it, which bounds the oldest-transaction gauge from above."""
OUTSIDE_SLACK = 300.0
"""Seconds a transaction from outside the suite (a developer's psql, a second run) may
be older than the suite before the upper bound counts it as a wrong reading."""


def oldest_bound() -> float:
    """The most the server's oldest-transaction age may read now: the suite's own age plus
    ``OUTSIDE_SLACK``. A gauge in the wrong unit (milliseconds) or of the wrong clock
    (an epoch instead of an age) is far past it."""
    return time.time() - SUITE_STARTED + OUTSIDE_SLACK


def new_prefix() -> str:
    """A table prefix (or key prefix) no other test run uses."""
    return f"t{secrets.token_hex(4)}_"


def backend_url(backend: str, tmp_dir: str) -> str:
    if backend == "memory":
        return f"memory://{secrets.token_hex(4)}"
    if backend == "sqlite":
        return f"sqlite:///{tmp_dir}/leaseq.db"
    if backend == "postgres":
        return POSTGRES_URL
    if backend == "mysql":
        return MYSQL_URL
    if backend == "redis":
        return REDIS_URL
    if backend == "redis_cluster":
        return REDIS_CLUSTER_URL
    if backend == "postgres_pgbouncer":
        return PGBOUNCER_URL
    raise ValueError(backend)


def reachable(backend: str) -> str | None:
    """None when the backend's server answers, else why not."""
    try:
        if backend == "postgres":
            import psycopg

            psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
        elif backend == "postgres_pgbouncer":
            import psycopg

            from leaseq.backends.postgres.url import parse

            with psycopg.connect(parse(PGBOUNCER_URL).dsn, connect_timeout=3,
                                 prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
        elif backend == "mysql":
            import pymysql

            parts = urlsplit(MYSQL_URL)
            pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                            password=parts.password or "", database=parts.path.lstrip("/"),
                            connect_timeout=3).close()
        elif backend == "redis":
            import redis

            with redis.Redis.from_url(REDIS_PLAIN_URL, socket_connect_timeout=3) as client:
                client.ping()
        elif backend == "redis_cluster":
            cluster = redis_cluster()
            try:
                state = cluster.cluster_info()["cluster_state"]
                assert state == "ok", f"cluster_state is {state}"
            finally:
                cluster.close()
    except Exception as exc:
        return f"{backend} unreachable: {exc}"
    return None


# The tables ``migrate`` creates under a prefix (SQL backends).
TABLES = ("history", "jobs", "migrations", "queues", "flows", "flow_parts", "server",
          "queue_names", "epoch")


def empty_tables(backend: str, prefix: str) -> None:
    """Delete every row a test left in ``prefix``'s tables on PostgreSQL (either fixture
    name) or MariaDB, and put back the one row migration 0010 seeds: the tables are then
    as ``migrate`` leaves them, but for the id counters, which go on counting."""
    statements = [*(f"DELETE FROM {prefix}{t}" for t in TABLES if t != "migrations"),
                  f"INSERT INTO {prefix}server (id) VALUES (1)"]
    if backend in ("postgres", "postgres_pgbouncer"):
        import psycopg

        with psycopg.connect(POSTGRES_URL) as conn:  # one transaction
            for statement in statements:
                conn.execute(statement)
        return
    if backend != "mysql":
        raise ValueError(f"no tables to empty on {backend}")
    import pymysql

    parts = urlsplit(MYSQL_URL)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                           password=parts.password or "", database=parts.path.lstrip("/"))
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


def drop_tables(backend: str, prefix: str, database: str | None = None) -> None:
    """Remove the tables a test created under ``prefix`` (MariaDB: in ``database``, by
    default the test URL's)."""
    tables = [f"{prefix}{t}" for t in TABLES]
    if backend in ("postgres", "postgres_pgbouncer"):  # the same server
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            for t in tables:
                conn.execute(f"DROP TABLE IF EXISTS {t}")
            conn.execute(f"DROP FUNCTION IF EXISTS {prefix}enqueue(text, jsonb, text, integer, "
                         "interval, text, integer)")
    elif backend == "mysql":
        import pymysql

        parts = urlsplit(MYSQL_URL)
        conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                               user=parts.username, password=parts.password or "",
                               database=database or parts.path.lstrip("/"), autocommit=True)
        with conn.cursor() as cur:
            for t in tables:
                cur.execute(f"DROP TABLE IF EXISTS {t}")
            cur.execute(f"DROP PROCEDURE IF EXISTS {prefix}enqueue")
        conn.close()
    elif backend == "redis":
        import redis

        from leaseq.backends.redis.keys import Keys

        with redis.Redis.from_url(REDIS_PLAIN_URL) as client:
            # The pattern escapes the prefix and matches only its keys (keys.py).
            for key in client.scan_iter(match=Keys(prefix).pattern(), count=1000):
                client.delete(key)
    elif backend == "redis_cluster":
        from leaseq.backends.redis.keys import Keys

        cluster = redis_cluster()
        try:
            for key in cluster.scan_iter(match=Keys(prefix).pattern(), count=1000):
                cluster.delete(key)
        finally:
            cluster.close()


@contextmanager
def held_transaction(engine: str, table: str) -> Iterator[float]:
    """A snapshot transaction on a PostgreSQL (``engine`` "postgres") or MariaDB ("mysql")
    connection of its own, its snapshot taken by one SELECT of ``table``, held until the
    block ends (reliability research S11); yields the monotonic time just after the snapshot
    was taken, so the transaction is at least ``time.monotonic() - yielded`` seconds old."""
    if engine == "postgres":
        import psycopg

        with psycopg.connect(POSTGRES_URL) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            try:
                yield time.monotonic()
            finally:
                conn.rollback()
        return
    import pymysql

    parts = urlsplit(MYSQL_URL)
    my = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                         password=parts.password or "", database=parts.path.lstrip("/"))
    try:
        with my.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute(f"SELECT count(*) FROM {table}")
            cur.fetchall()
        yield time.monotonic()
    finally:
        my.rollback()
        my.close()


STORED = ("payload", "headers", "result", "error_detail")
"""The JSON values a job stores as text (``plant`` writes them)."""


def plant(backend: str, url: str, prefix: str, job_id: int, field: str, text: str,
          queue: str = "q") -> None:
    """Store ``text`` as job ``job_id``'s ``field`` (one of ``STORED``) behind leaseq's
    back, as a SQL statement, a hand edit or an older version could: the live row and
    the history row on the SQL servers (whichever holds the job), the job's hash on Redis
    (``queue`` names its slot), the record of the memory backend's store named by
    ``url``."""
    assert field in STORED, field
    if backend == "memory":
        from leaseq.backends import _memory_stores

        store = _memory_stores[url.split("://", 1)[1]]
        with store.lock:
            row = store.live.get(job_id) or store.history[job_id]
            setattr(row, field, text)
        return
    if backend in ("redis", "redis_cluster"):
        import redis

        from leaseq.backends.redis.keys import Keys

        key = Keys(prefix).job(queue, job_id)
        client = (redis_cluster() if backend == "redis_cluster"
                  else redis.Redis.from_url(REDIS_PLAIN_URL))
        try:
            assert client.exists(key), f"no hash {key}"
            client.hset(key, field, text)
        finally:
            client.close()
        return
    # The column's name is one of STORED, checked above: never caller text. Live jobs have
    # no result.
    tables = ("history",) if field == "result" else ("jobs", "history")
    statements = [f"UPDATE {prefix}{table} SET {field} = %s WHERE id = %s" for table in tables]
    if backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///"):], timeout=10)
        with conn:
            for statement in statements:
                conn.execute(statement.replace("%s", "?"), (text, job_id))
        conn.close()
    elif backend in ("postgres", "postgres_pgbouncer"):
        import psycopg

        with psycopg.connect(POSTGRES_URL) as pg:  # one transaction
            for statement in statements:
                pg.execute(statement, (text, job_id))
    elif backend == "mysql":
        import pymysql

        parts = urlsplit(MYSQL_URL)
        my = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                             user=parts.username, password=parts.password or "",
                             database=parts.path.lstrip("/"))
        try:
            with my.cursor() as cur:
                for statement in statements:
                    cur.execute(statement, (text, job_id))
            my.commit()
        finally:
            my.close()
    else:
        raise ValueError(backend)


def redis_cluster() -> Any:
    """A redis-py ``RedisCluster`` client on the test cluster (``REDIS_CLUSTER_URL``)."""
    from redis.cluster import RedisCluster

    from leaseq.backends.redis.driver import cluster_urls

    seeds = cluster_urls(REDIS_CLUSTER_URL)
    assert seeds, f"not a redis+cluster:// URL: {REDIS_CLUSTER_URL}"
    return RedisCluster.from_url(seeds[0], socket_connect_timeout=3, decode_responses=True)


def wait_for(
    condition: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.02,
    message: str = "condition",
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


@contextmanager
def running(app: leaseq.App, **options: Any) -> Iterator[leaseq.Worker]:
    """A ``Worker`` on ``app`` in a thread of this process (fast polling, a 5 s grace),
    stopped and joined on exit."""
    import leaseq

    options.setdefault("poll_interval", 0.05)
    options.setdefault("grace", 5)
    worker = leaseq.Worker(app, **options)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run_async()), daemon=True)
    thread.start()
    assert worker.started.wait(15), "worker did not start"
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


def require_tool(name: str) -> str:
    """The path of the program ``name``; skips the test when it is missing, and fails it
    in CI (``CI=true``), where scripts/test installs what the suite needs: a missing tool
    there must not pass as a skip."""
    import shutil

    import pytest

    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (CI=true: a missing tool fails the run)")
        pytest.skip(f"{name} is not installed")
    return path

