"""migrate() is idempotent and safe when several processes run it at once; the DDL that
``leaseq schema`` prints is what migrate() applies."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL, drop_tables, new_prefix


def _migrate(url: str, prefix: str, start: object) -> None:
    start.wait(10)  # type: ignore[attr-defined]
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_racing_migrations_all_succeed_and_apply_once(backend: str, tmp_path: Path) -> None:
    require(backend)
    url = {"sqlite": f"sqlite:///{tmp_path}/m.db", "postgres": POSTGRES_URL,
           "mysql": MYSQL_URL}[backend]
    prefix = new_prefix()
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_migrate, args=(url, prefix, start)) for _ in range(4)]
    try:
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
        with leaseq.connect(url, table_prefix=prefix) as q:
            q.migrate()  # and once more, idempotent
            job = q.enqueue("emails", {"n": 1})
            assert q.get(job.id).state == "available"
    finally:
        drop_tables(backend, prefix)


def test_schema_command_prints_each_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    from click.testing import CliRunner

    from leaseq.cli import cli

    for dialect, marker in [("postgres", "timestamptz"), ("mysql", "InnoDB"),
                            ("sqlite", "AUTOINCREMENT")]:
        out = CliRunner().invoke(cli, ["schema", "--dialect", dialect, "--table-prefix", "app_"])
        assert out.exit_code == 0, out.output
        assert "CREATE TABLE app_jobs" in out.output and marker in out.output
        assert "{prefix}" not in out.output


def test_schema_command_rejects_unknown_dialect() -> None:
    from click.testing import CliRunner

    from leaseq.cli import cli

    out = CliRunner().invoke(cli, ["schema", "--dialect", "oracle"])
    assert out.exit_code == 2 and "oracle" in out.output


# Jobs written by a schema of before migration 0004: one row per live state, one finished.
OLD_ROWS = {
    "postgres": "INSERT INTO {p}jobs (queue, payload, max_attempts, state, available_at) "
                "VALUES ('old', %s, 5, %s, now() - interval '1 second')",
    "mysql": "INSERT INTO {p}jobs (queue, payload, max_attempts, state, available_at, "
             "created_at) VALUES ('old', %s, 5, %s, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, "
             "UTC_TIMESTAMP(6))",
    "sqlite": "INSERT INTO {p}jobs (queue, payload, max_attempts, state, available_at, "
              "created_at) VALUES ('old', ?, 5, ?, "
              "(julianday('now') - 2440587.5) * 86400.0 - 1, "
              "(julianday('now') - 2440587.5) * 86400.0)",
}


def _old_schema(
    backend: str, url: str, prefix: str, upto: int = 3, also: tuple[int, ...] = ()
) -> None:
    """Tables as migrations 1-``upto`` left them, and the later ones in ``also`` (as when
    branches land their migrations in either order), recorded as applied; from before
    migration 0004 (``upto`` 3), with an available and a dead job in them."""
    from leaseq.backends._sql.plan import load_migrations

    package, dialect = {
        "postgres": ("leaseq.backends.postgres", "PostgresDialect"),
        "mysql": ("leaseq.backends.mysql", "MysqlDialect"),
        "sqlite": ("leaseq.backends.sqlite", "SqliteDialect"),
    }[backend]
    import importlib

    d = getattr(importlib.import_module(f"{package}.driver"), dialect)(prefix)
    conn = _raw(backend, url)
    cur = conn.cursor()
    cur.execute(d.q["migrations_table"])
    for version, name, statements in load_migrations(package, prefix):
        if version > upto and version not in also:
            continue
        for statement in statements:
            cur.execute(statement)
        cur.execute(d.q["record_version"], {"version": version, "name": name})
    if upto == 3:
        for n, state in ((1, "available"), (2, "dead")):
            cur.execute(OLD_ROWS[backend].format(p=prefix), (f'{{"n": {n}}}', state))
    conn.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_migrate_upgrades_a_schema_from_before_queue_settings(
    backend: str, tmp_path: Path
) -> None:
    require(backend)
    url = {"sqlite": f"sqlite:///{tmp_path}/m.db", "postgres": POSTGRES_URL,
           "mysql": MYSQL_URL}[backend]
    prefix = new_prefix()
    try:
        _old_schema(backend, url, prefix)
        with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as q:
            q.migrate()
            assert q.stats()["old"].available == 1 and q.stats()["old"].dead == 1
            old = q.get(1)
            assert (old.reserves, old.kicks, old.lease, old.failed_at) == (0, 0, None, None)
            assert old.updated_at == old.created_at
            assert old.tags == ()  # migration 0012: rows from before have no tags
            q.configure_queue("old", max_touches=1, default_lease=40)
            [job] = q.dequeue("old", worker_id="w")
            assert (job.id, job.lease) == (1, 40)
            q.heartbeat(job)
            with pytest.raises(leaseq.TouchLimitExceeded):
                q.heartbeat(job)
            q.ack(job, result="done")
            assert q.get(1).reserves == 1 and q.get(1).result == "done"
            assert q.kick("old") == 1 and q.get(2).kicks == 1
            # Migration 0008: errors as JSON on rows that predate it.
            assert (q.get(2).error, q.get(2).error_detail) == (None, None)
            [job] = q.dequeue("old", worker_id="w")
            state = q.nack(job, {"code": 3, "message": "after migrate"})
            assert q.get(2).error_detail == {"code": 3, "message": "after migrate"}
            assert q.nack(job, "repeated") == state  # migration 0013: a repeat is known
    finally:
        drop_tables(backend, prefix)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_migration_0013_on_tables_holding_jobs_keeps_their_leases(
    backend: str, tmp_path: Path
) -> None:
    """The last ended lease's columns come to tables with waiting and running jobs: the
    leases held across the upgrade end as usual and may then be repeated; a job that
    never had a lease end has nothing to repeat."""
    require(backend)
    url = {"sqlite": f"sqlite:///{tmp_path}/m.db", "postgres": POSTGRES_URL,
           "mysql": MYSQL_URL}[backend]
    prefix = new_prefix()
    try:
        # 0014 (snoozes) first: the client needs it to claim, and applies it before 0013
        # on tables that had it from a branch that landed first.
        _old_schema(backend, url, prefix, upto=12, also=(14,))
        with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as q:
            ids = [q.enqueue("up", {"n": n}).id for n in range(3)]
            held = q.dequeue("up", worker_id="before", limit=2)  # claims need no 0013
            assert q.migrate() == ["0013_ended_lease"]
            assert q.get(ids[2]).state == "available"
            assert [q.release(held[0]), q.release(held[0])] == ["available"] * 2
            assert [q.bury(held[1]), q.bury(held[1])] == [None, None]
            assert (q.get(ids[0]).releases, q.get(ids[1]).buries) == (1, 1)
            assert q._schema_versions() == (14, 14)
    finally:
        drop_tables(backend, prefix)


# A queue paused before migration 0014, by each dialect's own SQL.
PAUSED_ROW = {
    "postgres": "INSERT INTO {p}queues (name, paused) VALUES ('held', true)",
    "mysql": "INSERT INTO {p}queues (name, paused, updated_at) "
             "VALUES ('held', 1, UTC_TIMESTAMP(6))",
    "sqlite": "INSERT INTO {p}queues (name, paused) VALUES ('held', 1)",
}


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_migration_0014_keeps_pauses_and_jobs_and_lets_them_snooze(
    backend: str, tmp_path: Path
) -> None:
    """Snoozes and timed pauses come to tables with jobs and an indefinitely paused queue
    (written by 0013's schema): the pause stays indefinite, the jobs have no snoozes,
    and they snooze at once."""
    require(backend)
    url = {"sqlite": f"sqlite:///{tmp_path}/m.db", "postgres": POSTGRES_URL,
           "mysql": MYSQL_URL}[backend]
    prefix = new_prefix()
    try:
        _old_schema(backend, url, prefix, upto=13)
        raw = _raw(backend, url)
        cur = raw.cursor()
        for n, state in ((1, "available"), (2, "dead")):
            cur.execute(OLD_ROWS[backend].format(p=prefix), (f'{{"n": {n}}}', state))
        cur.execute(PAUSED_ROW[backend].format(p=prefix))
        raw.close()
        with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as q:
            assert q.migrate() == ["0014_snoozes"]
            assert q._schema_versions() == (14, 14)
            held = q.stats()["held"]
            assert (held.paused, held.paused_until) == (True, None) and q.paused() == ["held"]
            assert q.queue_config("held").max_snoozes is None
            assert (q.get(1).snoozes, q.get(2).snoozes) == (0, 0)
            [job] = q.dequeue("old", worker_id="w")
            assert (job.id, job.snoozes) == (1, 0)
            assert q.snooze(job, 60, scope="queue") == "scheduled"
            assert (q.get(1).snoozes, q.get(1).attempts) == (1, 0)
            assert q.stats()["old"].paused_until is not None
    finally:
        drop_tables(backend, prefix)


def _raw(backend: str, url: str) -> Any:
    """An autocommit DB-API connection of the dialect's own driver to ``url``."""
    if backend == "postgres":
        import psycopg

        return psycopg.connect(url, autocommit=True)
    if backend == "mysql":
        from urllib.parse import urlsplit

        import pymysql

        parts = urlsplit(url)
        return pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                               user=parts.username, password=parts.password or "",
                               database=parts.path.lstrip("/"), autocommit=True)
    import sqlite3

    from leaseq.backends.sqlite.driver import sqlite_path

    return sqlite3.connect(sqlite_path(url), isolation_level=None)
