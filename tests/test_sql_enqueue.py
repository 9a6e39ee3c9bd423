"""``<prefix>enqueue``, the SQL entry to enqueue (PostgreSQL function, MySQL procedure):
the same jobs and refusals as the client's ``enqueue`` on the same inputs, triggers whose
jobs run in a worker process, rollbacks that leave nothing, the wake-up, and ``migrate``
installing and upgrading it. Real servers; PostgreSQL also through PgBouncer in
transaction mode."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

import leaseq
from leaseq._core.validate import MAX_DEPTH
from leaseq.errors import QueueFull, ValidationError
from tests._processes import ROOT
from tests.helpers import MYSQL_URL, PGBOUNCER_URL, POSTGRES_URL, wait_for

SQL = ["postgres", "mysql", "postgres_pgbouncer"]
pytestmark = pytest.mark.parametrize("backend", SQL, indirect=True)


class SqlCaller:
    """A plain driver connection (psycopg or PyMySQL, as another language's would be)
    that calls the routine and runs the statements of a test."""

    def __init__(self, backend: str, prefix: str) -> None:
        self.backend, self.prefix = backend, prefix
        self.pg = backend != "mysql"
        if backend == "mysql":
            import pymysql

            parts = urlsplit(MYSQL_URL)
            self.conn: Any = pymysql.connect(
                host=parts.hostname, port=parts.port or 3306, user=parts.username,
                password=parts.password or "", database=parts.path.lstrip("/"),
                autocommit=False)
        else:
            import psycopg

            from leaseq.backends.postgres.url import parse

            dsn = parse(PGBOUNCER_URL if backend == "postgres_pgbouncer" else POSTGRES_URL).dsn
            # No prepared statements: a transaction pooler may not have them.
            self.conn = psycopg.connect(dsn, prepare_threshold=None)

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.execute(sql.replace("{prefix}", self.prefix), params)
        rows = list(cur.fetchall()) if cur.description else []
        cur.close()
        return rows

    def enqueue(self, queue: Any, payload: Any, kind: Any = None, priority: Any = 0,
                delay: Any = 0, unique_key: Any = None, max_attempts: Any = None,
                commit: bool = True, text: str | None = None) -> int:
        """``text``, when given, is the payload's JSON as sent (one json.dumps could
        not write)."""
        if text is None:
            text = None if payload is None else json.dumps(payload)
        try:
            if self.pg:
                ((job_id,),) = self.execute(
                    "SELECT {prefix}enqueue(%s, %s::jsonb, %s, %s, "
                    "make_interval(secs => %s), %s, %s)",
                    (queue, text, kind, priority, delay, unique_key, max_attempts))
            else:
                self.execute("CALL {prefix}enqueue(%s, %s, %s, %s, %s, %s, %s, @leaseq_id)",
                             (queue, text, kind, priority, delay, unique_key, max_attempts))
                ((job_id,),) = self.execute("SELECT @leaseq_id")
        except Exception:
            self.conn.rollback()
            raise
        if commit:
            self.conn.commit()
        return int(job_id)

    def enqueue_with(self, queue: Any, payload: Any, options: dict[str, Any],
                     raw: str | None = None) -> int:
        """The entry that takes every option (issue 31): PostgreSQL's function with named
        arguments, MySQL's ``<prefix>enqueue_with`` with ``options`` as a JSON object
        (``raw``: that object's text as sent)."""
        text = None if payload is None else json.dumps(payload)
        try:
            if self.pg:
                names = {"kind": "%s", "priority": "%s", "unique_key": "%s",
                         "max_attempts": "%s", "delay": "make_interval(secs => %s)",
                         "tags": "%s::text[]"}
                given = "".join(f", {name} => {names[name]}" for name in options)
                ((job_id,),) = self.execute(
                    f"SELECT {{prefix}}enqueue(%s, %s::jsonb{given})",
                    (queue, text, *options.values()))
            else:
                self.execute("CALL {prefix}enqueue_with(%s, %s, %s, @leaseq_id)",
                             (queue, text, json.dumps(options) if raw is None else raw))
                ((job_id,),) = self.execute("SELECT @leaseq_id")
        except Exception:
            self.conn.rollback()
            raise
        self.conn.commit()
        return int(job_id)

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def sql(q: leaseq.Queue, backend: str, prefix: str) -> Iterator[SqlCaller]:
    caller = SqlCaller(backend, prefix)
    try:
        yield caller
    finally:
        caller.close()


def same_job(a: leaseq.JobInfo, b: leaseq.JobInfo) -> None:
    for name in ("queue", "kind", "state", "payload", "priority", "max_attempts",
                 "attempts", "headers", "lease"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.available_at and b.available_at
    wait_a, wait_b = a.available_at - a.created_at, b.available_at - b.created_at
    assert abs((wait_a - wait_b).total_seconds()) < 0.01


GOOD = [
    {"queue": "emails", "payload": {"to": "a@example.com", "n": [1, 2.5, None, True]}},
    {"queue": "q.with-all_chars", "payload": "text é ☃", "kind": "send", "priority": 7},
    {"queue": "e", "payload": None, "priority": -(2**31), "max_attempts": 1},
    {"queue": "e", "payload": [], "priority": 2**31 - 1, "max_attempts": 1_000_000},
    {"queue": "later", "payload": 3, "delay": 30.5, "kind": "k" * 200},
    {"queue": "x" * 200, "payload": {}, "unique_key": "u" * 255},
]


def test_same_job_as_the_client(q: leaseq.Queue, sql: SqlCaller) -> None:
    for args in GOOD:
        mine = q.enqueue(**args)
        key = args.get("unique_key")
        other = None if key is None else key[:-1] + "2"  # as long, not the client's key
        theirs = sql.enqueue(**{**args, "unique_key": other})
        assert theirs != mine.id
        a, b = q.get(mine.id), q.get(theirs)
        assert (a.unique_key, b.unique_key) == (key, other)
        same_job(a, b)


BAD = [
    ({"queue": "bad name"}, "queue name"),
    ({"queue": ""}, "queue name"),
    ({"queue": "x" * 201}, "queue name"),
    ({"queue": "caf\u00e9"}, "queue name"),
    ({"queue": "\u212a"}, "queue name"),  # Kelvin sign: k under case folding
    ({"queue": "\u017f"}, "queue name"),  # long s: s under case folding
    ({"queue": "line\n"}, "queue name"),
    ({"queue": None}, "queue name"),
    ({"kind": ""}, "kind"),
    ({"kind": "k" * 201}, "kind"),
    ({"unique_key": ""}, "unique_key"),
    ({"unique_key": "u" * 256}, "unique_key"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 1_000_001}, "max_attempts"),
    ({"delay": -1}, "delay"),
    ({"delay": 10 * 365 * 86400 + 1}, "delay"),
    ({"priority": None}, "priority"),
    ({"payload": "x" * (1024 * 1024)}, "payload"),
    ({"payload": json.loads("[" * 65 + "]" * 65)}, "nests"),
]


def test_refuses_what_the_client_refuses(q: leaseq.Queue, sql: SqlCaller) -> None:
    """Each bad argument: the client raises a ValidationError, the routine an SQL error
    (SQLSTATE 22023) that names the function and the argument; nothing is written."""
    for args, word in BAD:
        call = {"queue": "emails", "payload": {"n": 1}, **args}
        with pytest.raises(ValidationError):
            q.enqueue(**call)
        with pytest.raises(Exception) as raised:
            sql.enqueue(**call)
        message = str(raised.value)
        assert f"{q.settings.table_prefix}enqueue: " in message and word in message, message
        assert getattr(raised.value, "sqlstate", "22023") == "22023"
    assert q.stats() == {}


def nested(depth: int, leaf: str, kind: str) -> str:
    """JSON text of ``depth`` arrays (or objects) around the JSON text ``leaf``."""
    if kind == "list":
        return "[" * depth + leaf + "]" * depth
    return '{"k": ' * depth + leaf + "}" * depth


def test_nesting_limit_at_its_boundary(q: leaseq.Queue, sql: SqlCaller) -> None:
    """A payload at the limit goes in and comes back equal; one level more is refused
    (SQLSTATE 22023, naming the limit) with nothing written, as deep as it goes. The
    limit is the client's MAX_DEPTH (64) on PostgreSQL and MySQL, and 31 on MariaDB,
    whose JSON functions read no deeper (docs/design.md §52)."""
    (version,) = sql.execute("SELECT version()")[0]
    mariadb = "MariaDB" in version
    limit, word = (31, "MariaDB reads (31)") if mariadb else (MAX_DEPTH, "MAX_DEPTH=64")
    for kind in ("list", "dict"):
        # The leaf's own depth, and the empties that JSON_DEPTH counts differently.
        for leaf, inner in (("1", 0), ("[]", 1), ("{}", 1), ('"[] {}"', 0), ("[1, {}]", 2)):
            fits = nested(limit - inner, leaf, kind)
            assert q.get(sql.enqueue("deep", None, text=fits)).payload == json.loads(fits)
            for depth in (limit + 1, MAX_DEPTH + 1, 2000):
                with pytest.raises(Exception) as raised:
                    sql.enqueue("deep", None, text=nested(depth - inner, leaf, kind))
                assert word in str(raised.value) and "nests" in str(raised.value)
                assert getattr(raised.value, "sqlstate", "22023") == "22023"
    assert q.stats()["deep"].available == 10


def test_unique_key_returns_the_live_twin(q: leaseq.Queue, sql: SqlCaller) -> None:
    first = q.enqueue("emails", {"n": 1}, unique_key="order-1")
    assert sql.enqueue("emails", {"n": 2}, unique_key="order-1") == first.id
    job_id = sql.enqueue("emails", {"n": 3}, unique_key="order-2")
    assert q.enqueue("emails", {"n": 4}, unique_key="order-2").id == job_id
    assert q.enqueue("emails", {"n": 4}, unique_key="order-2").created is False
    (job,) = q.dequeue("emails", limit=1)
    q.ack(job)
    (job,) = q.dequeue("emails", limit=1)
    q.ack(job)
    again = sql.enqueue("emails", {"n": 5}, unique_key="order-1")  # the twin finished
    assert again not in (first.id, job_id)
    assert q.get(again).payload == {"n": 5}


def test_queue_settings_and_max_jobs(q: leaseq.Queue, sql: SqlCaller) -> None:
    q.configure_queue("capped", max_attempts=9, max_jobs=2)
    one = sql.enqueue("capped", {"n": 1})
    assert q.get(one).max_attempts == 9
    assert q.get(sql.enqueue("capped", {"n": 2}, max_attempts=3)).max_attempts == 3
    with pytest.raises(Exception) as raised:
        sql.enqueue("capped", {"n": 3})
    assert "max_jobs=2" in str(raised.value)
    assert getattr(raised.value, "sqlstate", "53400") == "53400"
    with pytest.raises(QueueFull):
        q.enqueue("capped", {"n": 3})
    assert q.stats()["capped"].available == 2
    # A duplicate of a live key writes nothing, so a full queue does not refuse it.
    q.configure_queue("capped", max_jobs=3)
    keyed = sql.enqueue("capped", {"n": 3}, unique_key="k")
    assert sql.enqueue("capped", {"n": 4}, unique_key="k") == keyed
    # A queue without settings gets leaseq's default max_attempts.
    assert q.get(sql.enqueue("plain", 1)).max_attempts == leaseq.Settings().max_attempts


def test_rolled_back_transaction_leaves_nothing(q: leaseq.Queue, sql: SqlCaller) -> None:
    sql.enqueue("emails", {"n": 1}, commit=False)
    sql.conn.rollback()
    assert q.stats() == {}


def trigger_sql(backend: str) -> list[str]:
    """The docs' trigger example, on a table of this test's prefix."""
    if backend == "mysql":
        return [
            "CREATE TABLE {prefix}orders (id INT AUTO_INCREMENT PRIMARY KEY, email TEXT)",
            """CREATE TRIGGER {prefix}orders_receipt AFTER INSERT ON {prefix}orders
               FOR EACH ROW
               BEGIN
                   DECLARE job_id BIGINT;
                   CALL {prefix}enqueue('emails', JSON_OBJECT('order_id', NEW.id),
                                        'send_receipt', 0, 0, NULL, NULL, job_id);
               END""",
        ]
    return [
        "CREATE TABLE {prefix}orders (id serial PRIMARY KEY, email text)",
        """CREATE FUNCTION {prefix}orders_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               PERFORM {prefix}enqueue('emails', jsonb_build_object('order_id', NEW.id),
                                       kind => 'send_receipt');
               RETURN NEW;
           END $$""",
        """CREATE TRIGGER {prefix}orders_receipt AFTER INSERT ON {prefix}orders
           FOR EACH ROW EXECUTE FUNCTION {prefix}orders_receipt()""",
    ]


@pytest.fixture
def orders(sql: SqlCaller, backend: str, prefix: str) -> Iterator[None]:
    for statement in trigger_sql(backend):
        sql.execute(statement)
    sql.conn.commit()
    yield
    sql.conn.rollback()
    sql.execute("DROP TABLE IF EXISTS {prefix}orders")
    if backend != "mysql":
        sql.execute("DROP FUNCTION IF EXISTS {prefix}orders_receipt()")
    sql.conn.commit()


def worker(url: str, prefix: str, log: Path, poll: float) -> subprocess.Popen[str]:
    env = {**os.environ, "LEASEQ_TEST_URL": url, "LEASEQ_TEST_PREFIX": prefix,
           "LEASEQ_TEST_LOG": str(log), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "leaseq.cli", "worker", "tests._sql_enqueue_app:app",
         "--poll-interval", str(poll), "--grace", "5"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_trigger_job_runs_in_a_worker_process(
    q: leaseq.Queue, sql: SqlCaller, orders: None, backend: str, url: str, prefix: str,
    tmp_path: Path,
) -> None:
    """An order inserted in a committed transaction gets its receipt job, which a worker
    process runs; an order whose transaction rolled back gets none. On PostgreSQL the
    worker polls only every 60 s: the function's NOTIFY is what starts the job."""
    log = tmp_path / "events.jsonl"
    push = backend == "postgres"
    proc = worker(url, prefix, log, poll=60 if push else 0.2)
    try:
        # The first job shows the worker is up (its first poll may find it).
        sql.execute("INSERT INTO {prefix}orders (email) VALUES ('first@example.com')")
        sql.conn.commit()
        wait_for(lambda: events(log), timeout=30, message="the worker to run the first job")
        if push:
            # Idle for 4 s, its back-off has grown to seconds between polls.
            time.sleep(4)  # the state wanted is "idle for a while", not an event
        sql.execute("INSERT INTO {prefix}orders (email) VALUES ('gone@example.com')")
        sql.conn.rollback()
        sql.execute("INSERT INTO {prefix}orders (email) VALUES ('kept@example.com')")
        committed = time.monotonic()
        sql.conn.commit()
        done = wait_for(lambda: [e for e in events(log) if e["order_id"] == 3] or None,
                        timeout=30, message="the trigger's job to run")
        if push:
            assert done[0]["t"] - committed < 1.5, "not woken by the NOTIFY"
    finally:
        proc.terminate()
        proc.wait(20)
    ran = sorted(e["order_id"] for e in events(log))
    assert ran == [1, 3]  # order 2 was rolled back, and so was its job
    assert {j.state for j in q.jobs(queue="emails")} == {"completed"}
    assert len(q.jobs(queue="emails")) == 2


def test_notify_on_commit_only(q: leaseq.Queue, sql: SqlCaller, backend: str,
                               prefix: str) -> None:
    """The wake-up idle workers LISTEN for: sent at commit, never for a rollback."""
    if backend == "mysql":
        pytest.skip("MySQL has no NOTIFY: workers find the job at their next poll")
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as listener:
        listener.execute(f'LISTEN "{prefix}jobs"')
        sql.enqueue("rolled", 1, commit=False)
        sql.conn.rollback()
        sql.enqueue("emails", 1)
        deadline = time.monotonic() + 10
        got: list[str] = []
        while not got and time.monotonic() < deadline:
            select.select([listener.fileno()], [], [], 0.5)
            got = [n.payload for n in listener.notifies(timeout=0, stop_after=1)]
        assert got == ["emails"]


def test_migrate_installs_once_and_upgrades(q: leaseq.Queue, sql: SqlCaller, url: str,
                                            backend: str, prefix: str) -> None:
    if backend == "mysql":
        stamp = ("SELECT CREATED, ROUTINE_COMMENT FROM information_schema.ROUTINES "
                 "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = '{prefix}enqueue'")
    else:
        stamp = ("SELECT p.oid::bigint, p.xmin::text, obj_description(p.oid, 'pg_proc') "
                 "FROM pg_proc AS p WHERE p.proname = '{prefix}enqueue'")
    before = sql.execute(stamp)
    sql.conn.commit()
    assert len(before) == 1 and "leaseq enqueue " in str(before[0])
    q.migrate()
    assert sql.execute(stamp) == before  # untouched: the same version is installed
    sql.conn.commit()
    # An existing database from before this routine (or with an older one) gets it.
    if backend == "mysql":
        sql.execute("DROP PROCEDURE {prefix}enqueue")
        sql.execute("DROP PROCEDURE {prefix}enqueue_with")
    else:
        sql.execute("COMMENT ON FUNCTION {prefix}enqueue(text, jsonb, text, integer, "
                    "interval, text, integer, text[]) IS 'leaseq enqueue older'")
        # A later version's overload, as if a downgrade, and the 7-argument function of
        # before tags: migrate leaves one function.
        sql.execute("CREATE FUNCTION {prefix}enqueue(a text, b jsonb, c text, d integer, "
                    "e interval, f text, g integer, h text) RETURNS bigint "
                    "LANGUAGE sql AS 'SELECT 0::bigint'")
        sql.execute("CREATE FUNCTION {prefix}enqueue(a text, b jsonb, c text, d integer, "
                    "e interval, f text, g integer) RETURNS bigint "
                    "LANGUAGE sql AS 'SELECT 0::bigint'")
    sql.conn.commit()
    if backend == "mysql":
        with pytest.raises(Exception, match="does not exist"):
            sql.enqueue("emails", 1)
    other = leaseq.connect(url, table_prefix=prefix)
    try:
        other.migrate()
    finally:
        other.close()
    after = sql.execute(stamp)
    sql.conn.commit()
    assert len(after) == 1 and after[0][-1] == before[0][-1]
    assert q.get(sql.enqueue("emails", {"ok": 1})).payload == {"ok": 1}


def _hammer(backend: str, prefix: str, queue: str, calls: int, key: str | None) -> list[Any]:
    """One producer process: ``calls`` enqueues, each its own transaction; the ids, or
    "full" for each refusal by max_jobs."""
    caller = SqlCaller(backend, prefix)
    out: list[Any] = []
    try:
        for n in range(calls):
            try:
                out.append(caller.enqueue(queue, {"n": n}, unique_key=key))
            except Exception as exc:
                if "max_jobs" not in str(exc):
                    raise
                out.append("full")
    finally:
        caller.close()
    return out


def test_concurrent_producers_keep_the_cap_and_the_key(q: leaseq.Queue, backend: str,
                                                      prefix: str) -> None:
    """Four processes calling the routine at once: a capped queue ends with exactly
    max_jobs jobs, and one unique key with one job whose id every call returned."""
    import multiprocessing

    q.configure_queue("capped", max_jobs=10)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        capped = pool.starmap(_hammer, [(backend, prefix, "capped", 6, None)] * 4)
        keyed = pool.starmap(_hammer, [(backend, prefix, "keyed", 6, "same")] * 4)
    made = [r for rs in capped for r in rs if r != "full"]
    assert len(made) == len(set(made)) == 10
    assert sum(r == "full" for rs in capped for r in rs) == 14
    assert q.stats()["capped"].available == 10
    ids = {r for rs in keyed for r in rs}
    assert len(ids) == 1 and q.stats()["keyed"].available == 1


def test_max_queues(q: leaseq.Queue, sql: SqlCaller, backend: str, prefix: str) -> None:
    """The server's max_queues holds for the routine as for the client: a new queue past
    it is refused with nothing written; counted and existing queues take jobs, without
    waiting for the server row's lock."""
    q.enqueue("a")
    q.configure_server(max_queues=3)
    holder = SqlCaller(backend, prefix)
    try:
        holder.execute("SELECT max_queues FROM {prefix}server WHERE id = 1 FOR UPDATE")
        short = ("SET LOCAL lock_timeout = '300ms'" if sql.pg
                 else "SET SESSION innodb_lock_wait_timeout = 1")
        sql.execute(short)
        sql.enqueue("a", {"n": 0})  # counted: no lock wanted, so no wait
        sql.execute(short)
        with pytest.raises(Exception, match=r"(?i)lock"):
            sql.enqueue("new", {"n": 0})  # not counted: waits for the row, times out
    finally:
        holder.conn.rollback()
        holder.close()
    q.configure_server(max_queues=2)
    sql.enqueue("b", {"n": 1})  # a new queue within the cap: counted
    assert q.server_config() == leaseq.ServerConfig(max_queues=2, queues=2)
    with pytest.raises(Exception) as raised:
        sql.enqueue("c", {"n": 1}, unique_key="k")
    assert "max_queues=2" in str(raised.value) and "nothing was enqueued" in str(raised.value)
    assert getattr(raised.value, "sqlstate", "53400") == "53400"
    assert "c" not in q.stats()
    assert q.server_config().queues == 2
    # The client agrees, and counted queues keep taking jobs from either side.
    with pytest.raises(leaseq.TooManyQueues):
        q.enqueue("c")
    sql.enqueue("a", {"n": 2})
    sql.enqueue("b", {"n": 2})
    assert q.stats()["a"].available == 3 and q.stats()["b"].available == 2
    # A queue that exists but was not counted (settings made with no cap) is admitted.
    q.configure_server(max_queues=None)
    q.configure_queue("e", max_attempts=3)
    q.configure_server(max_queues=3)
    sql.execute("DELETE FROM {prefix}queue_names WHERE name = 'e'")
    sql.conn.commit()
    sql.enqueue("e", {"n": 1})
    assert q.server_config() == leaseq.ServerConfig(max_queues=3, queues=3)
    # Lifted: anything goes, and the routine keeps no listing.
    q.configure_server(max_queues=None)
    sql.enqueue("f", {"n": 1})
    assert q.stats()["f"].available == 1


def _new_queues(backend: str, prefix: str, names: list[str]) -> list[str]:
    """One producer process: one enqueue into each of ``names``, each its own
    transaction; the names admitted."""
    caller = SqlCaller(backend, prefix)
    admitted: list[str] = []
    try:
        for name in names:
            try:
                caller.enqueue(name, {"q": name})
                admitted.append(name)
            except Exception as exc:
                if "max_queues" not in str(exc):
                    raise
    finally:
        caller.close()
    return admitted


def test_concurrent_producers_keep_max_queues(q: leaseq.Queue, backend: str,
                                             prefix: str) -> None:
    """Four processes creating queues through the routine at once, overlapping names:
    exactly max_queues queues exist in the end, each holding jobs only if admitted."""
    import multiprocessing

    q.configure_server(max_queues=5)
    names = [f"n{i}" for i in range(12)]
    work = [names[i::2] + names[: i + 1] for i in range(4)]  # each process, its own order
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        admitted = pool.starmap(_new_queues, [(backend, prefix, w) for w in work])
    made = {name for names_ in admitted for name in names_}
    assert len(made) == 5
    assert set(q.stats()) == made
    assert q.server_config() == leaseq.ServerConfig(max_queues=5, queues=5)


# -- tags, the first option added through the one declaration (issue 31 item 2) -----------


def test_tags_are_stored_as_the_client_stores_them(q: leaseq.Queue, sql: SqlCaller) -> None:
    """Tags through PostgreSQL's ``tags => ARRAY[...]`` and MySQL's ``enqueue_with``:
    order kept, duplicates dropped, the same stored text as the client's (so
    ``jobs(tag=)`` finds both), with or without a unique key."""
    tags = ["billing", "eu", "billing", "A:1.b-c_d"]
    mine = q.enqueue("t", {"n": 1}, tags=tags).id
    theirs = sql.enqueue_with("t", {"n": 1}, {"tags": tags})
    keyed = sql.enqueue_with("t", 2, {"unique_key": "k", "tags": ["k"]})
    assert sql.enqueue_with("t", 3, {"unique_key": "k", "tags": ["other"]}) == keyed
    untagged = [sql.enqueue_with("t", 4, {"tags": []}), sql.enqueue_with("t", 5, {}),
                sql.enqueue("t", 6)]
    assert q.get(theirs).tags == q.get(mine).tags == ("billing", "eu", "A:1.b-c_d")
    assert q.get(keyed).tags == ("k",)
    assert [q.get(i).tags for i in untagged] == [(), (), ()]
    stored = dict(sql.execute("SELECT id, tags FROM {prefix}jobs"))
    assert stored[theirs] == stored[mine] == '["billing","eu","A:1.b-c_d"]'
    assert [j.id for j in q.jobs("t", tag="eu")] == [mine, theirs]
    [job] = [j for j in q.dequeue("t", limit=10) if j.id == theirs]
    assert job.tags == ("billing", "eu", "A:1.b-c_d")


def test_every_option_through_the_entry_that_takes_them_all(
    q: leaseq.Queue, sql: SqlCaller
) -> None:
    """The cases the 7- and 8-argument calls pass (GOOD), through named arguments on
    PostgreSQL and ``enqueue_with``'s options object on MySQL: the same jobs."""
    for args in GOOD:
        mine = q.enqueue(**args, tags=["x"])
        options = {k: v for k, v in args.items() if k not in ("queue", "payload")}
        if "unique_key" in options:
            options["unique_key"] = options["unique_key"][:-1] + "2"
        theirs = sql.enqueue_with(args["queue"], args.get("payload"),
                                  {**options, "tags": ["x"]})
        a, b = q.get(mine.id), q.get(theirs)
        same_job(a, b)
        assert a.tags == b.tags == ("x",)


BAD_TAGS: list[list[Any]] = [
    ["a b"], [""], ["t" * 65], ["caf\u00e9"], ['a"b'], [f"t{i}" for i in range(17)],
    [None],
]


def test_bad_tags_are_refused_and_nothing_is_written(q: leaseq.Queue, sql: SqlCaller) -> None:
    for tags in BAD_TAGS:
        with pytest.raises(ValidationError):
            q.enqueue("t", tags=tags)
        with pytest.raises(Exception) as raised:
            sql.enqueue_with("t", 1, {"tags": tags})
        assert "tag" in str(raised.value), raised.value
        assert getattr(raised.value, "sqlstate", "22023") == "22023"
    assert q.stats() == {}


def test_mysql_enqueue_with_refuses_options_it_cannot_read(
    q: leaseq.Queue, sql: SqlCaller, backend: str
) -> None:
    """A key it does not know and a value of the wrong JSON type are refused, not
    ignored: a typo must not drop an option silently."""
    if backend != "mysql":
        pytest.skip("enqueue_with is MySQL's; PostgreSQL types its named arguments")
    cases = {
        '{"tagz": ["a"]}': "unknown options", '{"tags": "billing"}': "tags",
        '{"tags": [1]}': "tag", '{"priority": "5"}': "priority", '{"priority": 1.5}':
        "priority", '{"kind": 5}': "kind", '{"delay": "5"}': "delay",
        '{"max_attempts": true}': "max_attempts", '{"unique_key": []}': "unique_key",
        '[1]': "JSON object", 'not json': "JSON object",
    }
    for raw, word in cases.items():
        with pytest.raises(Exception) as raised:
            sql.enqueue_with("t", 1, {}, raw=raw)
        assert word in str(raised.value), (raw, raised.value)
    sql.execute("CALL {prefix}enqueue_with('t', '1', NULL, @leaseq_id)")  # every default
    ((job_id,),) = sql.execute("SELECT @leaseq_id")
    sql.conn.commit()
    assert (q.get(job_id).priority, q.get(job_id).tags) == (0, ())
    assert q.stats()["t"].available == 1
