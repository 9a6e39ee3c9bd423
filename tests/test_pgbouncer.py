"""PostgreSQL through a real transaction-mode PgBouncer (scripts/services starts it on
127.0.0.1:6432): ``pgbouncer=true`` and ``listen_url``. The conformance suite runs through
it as the ``postgres_pgbouncer`` backend, chaos S1/S2 too; here is what those do not
cover: the URL options, the pooler's errors without the flag, concurrent producers
(threads and processes), a caller's own connection, push against polling wake-ups, result
waits with a worker, schedules and the dashboard."""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

import leaseq
from leaseq.backends import capabilities_for
from leaseq.backends.postgres.url import parse
from tests.conftest import require
from tests.helpers import PGBOUNCER_URL, POSTGRES_URL, drop_tables, new_prefix, running, wait_for

DIRECT = parse(PGBOUNCER_URL).dsn  # PgBouncer, without leaseq's flag
WITH_LISTEN = f"{PGBOUNCER_URL}&listen_url={quote(POSTGRES_URL, safe='')}"


@pytest.fixture
def prefix() -> Iterator[str]:
    require("postgres_pgbouncer")
    name = new_prefix()
    try:
        yield name
    finally:
        drop_tables("postgres_pgbouncer", name)


@pytest.fixture
def pq(prefix: str) -> Iterator[leaseq.Queue]:
    """A Queue through PgBouncer with ``pgbouncer=true``, its tables migrated through it."""
    queue = leaseq.connect(PGBOUNCER_URL, table_prefix=prefix, reclaim_interval=None)
    queue.migrate()
    queue.migrate()  # again: one transaction each, its advisory lock transaction-scoped
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture
def direct(pq: leaseq.Queue, prefix: str) -> Iterator[leaseq.Queue]:
    """A client straight on the server, on ``pq``'s tables. Its URL differs from ``pq``'s,
    so its enqueues wake nothing of ``pq``'s in this process: only the database does."""
    queue = leaseq.connect(POSTGRES_URL, table_prefix=prefix, reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()


def listeners(prefix: str) -> int:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                           [f'LISTEN "{prefix}jobs"']).fetchone()
    assert row is not None
    return int(row[0])


# -- the URL ----------------------------------------------------------------------------


def test_leaseqs_parameters_are_taken_out_and_the_rest_kept_as_written() -> None:
    url = ("postgresql://u:p%40ss@h:6432/db?sslmode=require&pgbouncer=true"
           "&application_name=a%20b&listen_url=postgresql%3A%2F%2Fu%3Ap%2540ss%40h%3A5432%2Fdb")
    target = parse(url)
    assert target.dsn == "postgresql://u:p%40ss@h:6432/db?sslmode=require&application_name=a%20b"
    assert target.pgbouncer is True
    assert target.listen_url == "postgresql://u:p%40ss@h:5432/db"
    assert parse("postgresql://h/db?pgbouncer=false") == leaseq_url("postgresql://h/db")
    assert parse("postgresql://h/db") == leaseq_url("postgresql://h/db")
    assert push_url("postgresql://h/db?pgbouncer=1", None) is None
    assert push_url("postgresql://h/db?pgbouncer=true", "postgres://d/db") == \
        "postgres://d/db"
    assert push_url("postgresql://h/db?x=1", None) == "postgresql://h/db?x=1"
    assert push_url("redis://h:6379/0", None) == "redis://h:6379/0"


def push_url(url: str, listen_url: str | None) -> str | None:
    """Where a client of ``url`` listens, as its backend's capabilities say."""
    return capabilities_for(url).push_url(url, listen_url)


def leaseq_url(dsn: str) -> Any:
    from leaseq.backends.postgres.url import PostgresUrl

    return PostgresUrl(dsn)


@pytest.mark.parametrize(("url", "listen", "says"), [
    ("postgresql://h/db?pgbouncer=maybe", None, "pgbouncer must be true or false"),
    ("postgresql://h/db?pgbouncer=true&listen_url=redis%3A%2F%2Fh", None, "postgresql://"),
    ("postgresql://h/db?pgbouncer=true", "postgresql://h/db?pgbouncer=true", "session"),
    ("redis://h:6379/0", "postgresql://h/db", "PostgreSQL URLs only"),
])
def test_bad_pooler_options_are_configuration_errors(
    url: str, listen: str | None, says: str
) -> None:
    with pytest.raises(leaseq.ConfigurationError, match=says):
        push_url(url, listen)


def test_the_listen_url_setting_keeps_its_password_out_of_reprs() -> None:
    settings = leaseq.Settings(listen_url="postgresql://u:secret@h/db")
    assert "secret" not in repr(settings)
    with pytest.raises(leaseq.ConfigurationError, match="listen_url"):
        leaseq.Settings(listen_url="nonsense")


# -- without the flag -------------------------------------------------------------------


def test_without_the_flag_the_poolers_prepared_statement_errors_name_it(prefix: str) -> None:
    leaseq.connect(PGBOUNCER_URL, table_prefix=prefix).migrate()
    errors: list[BaseException] = []
    # psycopg prepares a statement on its 5th run, under a name counted per connection
    # (_pg3_0, ...). Whether two clients' names meet on one server connection in the first
    # round depends on which server connection PgBouncer lends each transaction; a second
    # client's connections start their count again, on server connections that have those
    # names already.
    for _ in range(3):
        with leaseq.connect(DIRECT, table_prefix=prefix, group_commit=False) as q:

            def produce(client: leaseq.Queue = q) -> None:
                try:
                    for i in range(50):
                        client.enqueue("a", {"i": i})
                except Exception as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=produce) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        if errors:
            break
    assert errors, "4 threads through a transaction-mode PgBouncer met no prepared-statement error"
    for exc in errors:
        assert isinstance(exc, leaseq.ConfigurationError), repr(exc)
        assert "pgbouncer=true" in str(exc)


# -- with it ----------------------------------------------------------------------------


def test_concurrent_threads_single_and_batch_enqueues(pq: leaseq.Queue, prefix: str) -> None:
    ids: list[int] = []
    errors: list[BaseException] = []
    with leaseq.connect(PGBOUNCER_URL, table_prefix=prefix, group_commit=False) as solo:

        def produce(client: leaseq.Queue) -> None:
            try:
                for i in range(40):
                    ids.append(client.enqueue("a", {"i": i}).id)
                ids.extend(r.id for r in client.enqueue_many(
                    [{"queue": "a", "payload": i, "unique_key": f"{id(client)}-{i}"}
                     for i in range(3)] + [{"queue": "a"} for _ in range(5)]))
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(client,))
                   for client in (pq, pq, solo, solo)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    assert len(ids) == 4 * 48
    assert len(set(ids)) == 4 * 48 - 2 * 3  # two threads share each client's unique keys
    taken = pq.dequeue("a", limit=1000)
    assert sorted(job.id for job in taken) == sorted(set(ids))
    assert pq.ack_many(taken) == [True] * len(taken)


def _produce_in_process(prefix: str, n: int) -> list[int]:
    with leaseq.connect(PGBOUNCER_URL, table_prefix=prefix) as q:
        return [q.enqueue("p", {"i": i}).id for i in range(n)]


def test_concurrent_processes_enqueue(pq: leaseq.Queue, prefix: str) -> None:
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        batches = pool.starmap(_produce_in_process, [(prefix, 30)] * 3)
    ids = [i for batch in batches for i in batch]
    assert len(set(ids)) == 90
    assert pq.stats()["p"].available == 90


def test_a_callers_own_pgbouncer_connection_is_never_made_to_prepare(
    pq: leaseq.Queue, prefix: str
) -> None:
    import psycopg

    # The caller's connection keeps psycopg's default prepare_threshold (5 runs).
    with psycopg.connect(DIRECT) as conn:
        for i in range(12):
            pq.enqueue("t", {"i": i}, conn=conn)
        pq.enqueue_many([{"queue": "t"}] * 2, conn=conn)
        # Same transaction, so the same server connection: what it has prepared.
        row = conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                           [f"%{prefix}%"]).fetchone()
        assert row == (0,)
        conn.rollback()
    assert "t" not in pq.stats()
    with psycopg.connect(DIRECT) as conn:
        for i in range(7):
            pq.enqueue("t", {"i": i}, conn=conn)
        conn.commit()
    assert pq.stats()["t"].available == 7


def test_without_listen_url_a_blocking_dequeue_polls_and_says_so_once(
    pq: leaseq.Queue, direct: leaseq.Queue, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="leaseq")
    assert pq.listen_url is None
    got: list[tuple[float, list[leaseq.Job]]] = []
    waiter = threading.Thread(
        target=lambda: got.append((time.monotonic(), pq.dequeue("w", wait=20))))
    waiter.start()
    time.sleep(0.3)  # it is waiting, on a 20 ms poll
    sent = time.monotonic()
    job_id = direct.enqueue("w").id
    waiter.join(20)
    (woken, jobs), = got
    assert [job.id for job in jobs] == [job_id]
    assert woken - sent < 1.0
    assert listeners(prefix) == 0
    assert pq.dequeue("w", wait=0.05) == []
    with pytest.raises(TimeoutError):  # a result wait polls too, and says nothing more
        pq.wait(job_id, timeout=0.3)
    said = [r for r in caplog.records if "listen_url" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "pgbouncer=true" in said[0].getMessage()


@pytest.mark.parametrize("how", ["url", "keyword"])
def test_with_listen_url_a_blocking_dequeue_is_pushed(
    pq: leaseq.Queue, direct: leaseq.Queue, prefix: str, how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Polls 30 s apart: only the NOTIFY heard on the listen_url can wake it in time.
    monkeypatch.setattr("leaseq._client.POLL_FIRST", 30.0)
    monkeypatch.setattr("leaseq._client.POLL_CAP", 30.0)
    client = (leaseq.connect(WITH_LISTEN, table_prefix=prefix) if how == "url"
              else leaseq.connect(PGBOUNCER_URL, table_prefix=prefix, listen_url=POSTGRES_URL))
    with client:
        assert client.listen_url == POSTGRES_URL
        got: list[tuple[float, list[leaseq.Job]]] = []
        waiter = threading.Thread(
            target=lambda: got.append((time.monotonic(), client.dequeue("w", wait=25))))
        waiter.start()
        wait_for(lambda: listeners(prefix) == 1, message="the LISTEN on the listen_url")
        time.sleep(0.2)  # past the wake-up the listener gives when it connects
        sent = time.monotonic()
        job_id = direct.enqueue("w").id
        waiter.join(25)
    (woken, jobs), = got
    assert [job.id for job in jobs] == [job_id]
    assert woken - sent < 1.0


def test_the_worker_and_result_waits_through_it(prefix: str, pq: leaseq.Queue) -> None:
    for url in (PGBOUNCER_URL, WITH_LISTEN):
        app = leaseq.App(url, table_prefix=prefix)

        @app.task(queue="r")
        def double(x: int) -> int:
            return 2 * x

        @app.task(queue="r")
        async def add(a: int, b: int) -> int:
            return a + b

        try:
            with running(app):
                assert double.enqueue(21).wait(timeout=10) == 42
                chain = leaseq.chain(double.s(1), add.s(10)).enqueue()
                assert chain.wait(timeout=10) == 12
        finally:
            app.close()


def test_app_passes_listen_url_to_its_clients_and_worker(prefix: str, pq: leaseq.Queue) -> None:
    app = leaseq.App(PGBOUNCER_URL, table_prefix=prefix, listen_url=POSTGRES_URL)

    @app.task(queue="l", name="ping")
    def ping() -> None: ...

    try:
        assert app.queue.listen_url == POSTGRES_URL
        with running(app, poll_interval=60):  # a minute's poll: only push is in time
            wait_for(lambda: listeners(prefix) >= 1, message="the worker's LISTEN")
            with leaseq.connect(POSTGRES_URL, table_prefix=prefix) as other:
                job_id = other.enqueue("l", {}, kind="ping").id
                wait_for(lambda: other.get(job_id).state == "completed", timeout=5)
    finally:
        app.close()


def test_schedules_and_limits_through_it(prefix: str, pq: leaseq.Queue) -> None:
    app = leaseq.App(PGBOUNCER_URL, table_prefix=prefix)
    ticks: list[str | None] = []
    held = threading.Semaphore(0)
    inside: list[int] = []
    most = [0]

    @app.periodic(every=0.5)
    @app.task(queue="sched", name="tick")
    def tick() -> None:
        ctx = leaseq.current_job()
        ticks.append(ctx.job.unique_key if ctx else None)

    @app.task(queue="lim", name="limited")
    def limited() -> None:
        inside.append(1)
        most[0] = max(most[0], len(inside))
        held.acquire(timeout=0.05)
        inside.pop()

    pq.configure_queue("lim", concurrency_limit=2)
    for _ in range(12):
        limited.enqueue()
    try:
        with running(app, concurrency=8):
            wait_for(lambda: len(ticks) >= 2, timeout=15, message="two ticks")
            wait_for(lambda: pq.stats()["lim"].completed == 12, timeout=15)
    finally:
        app.close()
    assert len(set(ticks)) == len(ticks)
    assert 1 <= most[0] <= 2


def test_the_dashboard_through_it(prefix: str, pq: leaseq.Queue) -> None:
    from leaseq.dashboard import create_app
    from leaseq.dashboard import running as serving

    pq.enqueue_many([{"queue": "mail"}] * 3)
    with serving(create_app(PGBOUNCER_URL, table_prefix=prefix)) as base, \
            httpx.Client(base_url=base, timeout=30) as http:
        for _ in range(6):  # past psycopg's 5 runs, were it preparing
            body = http.get("/api/queues").json()
        assert {row["queue"]: row["available"] for row in body["queues"]} == {"mail": 3}


def test_supervised_worker_processes_listen_on_the_listen_url(
    prefix: str, pq: leaseq.Queue, direct: leaseq.Queue, tmp_path: Any
) -> None:
    import os
    import signal
    import subprocess
    import sys

    from tests._processes import ROOT

    env = {**os.environ, "LEASEQ_TEST_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "worker.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "worker", "tests._worker_app:app",
             "--processes", "2", "--poll-interval", "60", "--url", WITH_LISTEN,
             "--log-level", "WARNING"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Each child process its own LISTEN, on the direct URL; a minute's poll, so only
        # push picks the jobs up in time.
        wait_for(lambda: listeners(prefix) == 2, timeout=30, message="two LISTENs")
        ids = [direct.enqueue("work", {"seconds": 0, "n": i}, kind="sleepy").id for i in range(4)]
        wait_for(lambda: all(direct.get(i).state == "completed" for i in ids), timeout=5,
                 message="the jobs run")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert b"listen_url" not in (tmp_path / "worker.log").read_bytes()  # pushed: no warning


def test_with_listen_url_an_async_blocking_dequeue_is_pushed(
    pq: leaseq.Queue, direct: leaseq.Queue, prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    monkeypatch.setattr("leaseq._aclient.POLL_FIRST", 30.0)
    monkeypatch.setattr("leaseq._aclient.POLL_CAP", 30.0)

    async def main() -> float:
        async with leaseq.connect_async(PGBOUNCER_URL, table_prefix=prefix,
                                        listen_url=POSTGRES_URL) as aq:
            assert aq.listen_url == POSTGRES_URL
            waiting = asyncio.ensure_future(aq.dequeue("w", wait=25))
            deadline = time.monotonic() + 15
            while listeners(prefix) != 1:
                assert time.monotonic() < deadline, "no LISTEN on the listen_url"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            sent = time.monotonic()
            job_id = await asyncio.to_thread(lambda: direct.enqueue("w").id)
            jobs = await waiting
            assert [job.id for job in jobs] == [job_id]
            return time.monotonic() - sent

    assert asyncio.run(main()) < 1.0


def test_a_listen_urls_password_stays_out_of_reprs_and_the_dashboard() -> None:
    from leaseq.dashboard.app import redact_url

    url = ("postgresql://app:pooled@pooler:6432/db?pgbouncer=true"
           "&listen_url=postgresql%3A%2F%2Fapp%3Asecret%40db%3A5432%2Fdb")
    app = leaseq.App(url)
    assert "secret" not in repr(app) and "listen_url=***" in repr(app)
    shown = redact_url(url)
    assert "secret" not in shown and "pooled" not in shown and "listen_url=***" in shown


@pytest.fixture
def session_pooler() -> Iterator[str]:
    """A PgBouncer of this test's own in session mode on 127.0.0.1:6434, stopped (by its
    pid) at the end; yields its URL, without the flag."""
    import os
    import shutil
    import signal
    import subprocess

    require("postgres_pgbouncer")
    binary = shutil.which("pgbouncer")
    assert binary, "pgbouncer is not installed (scripts/services installs it)"
    import tempfile
    from pathlib import Path

    # Not under pytest's tmp_path: the postgres user cannot enter that (mode 700).
    home = Path(tempfile.mkdtemp(prefix="leaseq-pgbouncer-"))
    (home / "pgbouncer.ini").write_text(
        "[databases]\n* = host=127.0.0.1 port=5432 user=postgres\n\n[pgbouncer]\n"
        "listen_addr = 127.0.0.1\nlisten_port = 6434\nunix_socket_dir =\nauth_type = any\n"
        "pool_mode = session\nmax_client_conn = 100\ndefault_pool_size = 20\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {home}/pgbouncer.log\npidfile = {home}/pgbouncer.pid\n")
    as_root = os.geteuid() == 0
    if as_root:  # PgBouncer refuses to run as root
        home.chmod(0o755)
        shutil.chown(home, "postgres")
    try:
        subprocess.run([binary, "-d", *(["-u", "postgres"] if as_root else []),
                        str(home / "pgbouncer.ini")], check=True, timeout=30)
        pid = int(wait_for(lambda: (home / "pgbouncer.pid").exists()
                           and (home / "pgbouncer.pid").read_text().strip(),
                           message="PgBouncer's pid file"))
        try:
            url = "postgresql://postgres@127.0.0.1:6434/test"
            wait_for(lambda: reachable_at(url), message="the session-mode PgBouncer")
            yield url
        finally:
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not os.path.exists(f"/proc/{pid}"), message="PgBouncer to stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def reachable_at(url: str) -> bool:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def test_session_pooling_works_as_before_with_push(
    session_pooler: str, pq: leaseq.Queue, direct: leaseq.Queue, prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("leaseq._client.POLL_FIRST", 30.0)
    monkeypatch.setattr("leaseq._client.POLL_CAP", 30.0)
    with leaseq.connect(session_pooler, table_prefix=prefix, group_commit=False) as q:
        assert q.listen_url == session_pooler  # LISTEN through a session pooler is heard
        for i in range(20):  # psycopg prepares on the 5th run: fine on a session
            q.enqueue("s", {"i": i})
        assert len(q.dequeue("s", limit=100)) == 20
        got: list[list[leaseq.Job]] = []
        waiter = threading.Thread(target=lambda: got.append(q.dequeue("w", wait=25)))
        waiter.start()
        wait_for(lambda: listeners(prefix) == 1, message="the LISTEN through the pooler")
        time.sleep(0.2)
        sent = time.monotonic()
        job_id = direct.enqueue("w").id
        waiter.join(25)
        assert time.monotonic() - sent < 1.0
    assert [job.id for job in got[0]] == [job_id]


def test_pgbouncer_true_leaves_no_prepared_statement_on_its_sessions(prefix: str) -> None:
    """Deterministic: ``pgbouncer=true`` straight on the server, one pooled connection, so
    every statement leaseq ran lives in one session whose ``pg_prepared_statements`` the
    test reads afterwards. psycopg prepares a statement on its fifth run (its
    ``prepare_threshold``): twelve rounds of every hot operation pass that many times over.
    A direct client without the flag, same work, same session count, does prepare: the
    check can fail."""
    def prepared_after_work(url: str) -> int:
        queue = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        try:
            queue.migrate()
            for i in range(12):
                queue.enqueue("prep", {"i": i}, unique_key=f"k{i}")
                queue.enqueue_many([{"queue": "prep", "payload": i}])
                for job in queue.dequeue("prep", worker_id="w", limit=2):
                    queue.heartbeat(job)
                    queue.ack(job, {"ok": i})
                queue.stats()
            runner = queue._backend.runner  # type: ignore[attr-defined]
            with runner.pool.connection() as conn:  # the one session that ran all of it
                (count,) = conn.execute("SELECT count(*) FROM pg_prepared_statements"
                                        ).fetchone()
            return int(count)
        finally:
            queue.close()

    flagged = f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}pgbouncer=true"
    assert prepared_after_work(flagged) == 0
    assert prepared_after_work(POSTGRES_URL) > 0
