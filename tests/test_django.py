"""leaseq.contrib.django through the example project (examples/django_project), on SQLite,
PostgreSQL and MariaDB/MySQL (Django on PyMySQL): ``manage.py migrate`` creates leaseq's
tables (again and again), an enqueue inside ``transaction.atomic()`` commits or rolls back
with the order written beside it, and ``manage.py leaseq_worker`` runs the shop's task
from its ``tasks.py``.

Each backend gets a fresh project database (a temporary SQLite file, a new PostgreSQL or
MySQL database) that ``manage.py`` subprocesses use, as a real deployment would. The mapping
of Django's settings to a leaseq URL is checked in-process.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

import leaseq
from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL, new_prefix, wait_for

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "django_project"


@dataclass
class Project:
    """The example project on one fresh database."""

    backend: str
    env: dict[str, str]
    url: str
    prefix: str

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=EXAMPLE, env=self.env,
                              capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stderr}"
        return done

    def queue(self) -> leaseq.Queue:
        return leaseq.connect(self.url, table_prefix=self.prefix)

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        """Rows of a query on the project's database, read outside Django."""
        if self.backend == "sqlite":
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
                return conn.execute(query).fetchall()
        if self.backend == "mysql":
            with mysql_connection(self.env["EXAMPLE_DB_NAME"]) as conn, conn.cursor() as cur:
                cur.execute(query)
                return [tuple(row) for row in cur.fetchall()]
        import psycopg

        with psycopg.connect(self.url) as conn:
            return conn.execute(query).fetchall()  # type: ignore[arg-type]


def mysql_connection(database: str) -> Any:
    import pymysql

    parts = urlsplit(MYSQL_URL)
    return pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                           password=parts.password or "", database=database, autocommit=True)


def server_env(url: str, vendor: str, name: str) -> dict[str, str]:
    """The example's EXAMPLE_DB* variables for database ``name`` on ``url``'s server."""
    parts = urlsplit(url)
    return {"EXAMPLE_DB": vendor, "EXAMPLE_DB_NAME": name,
            "EXAMPLE_DB_HOST": parts.hostname or "127.0.0.1",
            "EXAMPLE_DB_PORT": str(parts.port or ""), "EXAMPLE_DB_USER": parts.username or "",
            "EXAMPLE_DB_PASSWORD": parts.password or ""}


@pytest.fixture(scope="module", params=["sqlite", "postgres", "mysql"])
def project(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    backend: str = request.param
    require(backend)
    prefix = new_prefix()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "EXAMPLE_LEASEQ_PREFIX": prefix,
           "DJANGO_SETTINGS_MODULE": "project.settings"}
    if backend == "sqlite":
        path = tmp_path_factory.mktemp("django") / "shop.sqlite3"
        env.update(EXAMPLE_DB="sqlite", EXAMPLE_DB_NAME=str(path))
        yield Project(backend, env, f"sqlite:///{path}", prefix)
        return
    name = f"leaseq_django_{secrets.token_hex(4)}"
    if backend == "mysql":
        with mysql_connection(urlsplit(MYSQL_URL).path.lstrip("/")) as conn:
            conn.cursor().execute(f"CREATE DATABASE {name}")
        env.update(server_env(MYSQL_URL, "mysql", name))
        try:
            yield Project(backend, env, urlsplit(MYSQL_URL)._replace(path=f"/{name}").geturl(),
                          prefix)
        finally:
            with mysql_connection(urlsplit(MYSQL_URL).path.lstrip("/")) as conn:
                conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
        return
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    env.update(server_env(POSTGRES_URL, "postgresql", name))
    try:
        yield Project(backend, env, urlsplit(POSTGRES_URL)._replace(path=f"/{name}").geturl(),
                      prefix)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def migrated(project: Project) -> Project:
    out = project.manage("migrate").stdout
    assert "Applying leaseq.0001_initial... OK" in out
    return project


def place_order(project: Project, email: str, fail: bool = False) -> tuple[int, int, str]:
    """``manage.py place_order``: (order id, job id, output)."""
    done = project.manage("place_order", email, *(["--fail"] if fail else []), check=not fail)
    found = re.search(r"order (\d+),? job (\d+)", done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return int(found[1]), int(found[2]), done.stdout + done.stderr


def orders(project: Project, email: str) -> list[tuple[Any, ...]]:
    return project.sql(f"SELECT id, receipt_sent FROM shop_order WHERE email = '{email}'")


def test_migrate_creates_leaseq_tables_and_runs_again_keeping_jobs(migrated: Project) -> None:
    q = migrated.queue()
    try:
        job = q.enqueue("receipts", {"kept": True}).id
        # Unapplied and applied again, the migration runs leaseq's migrate on existing
        # tables: it must change nothing, and the job stays.
        migrated.manage("migrate", "leaseq", "zero")
        assert "Applying leaseq.0001_initial... OK" in migrated.manage("migrate").stdout
        assert q.get(job).state == "available"
        q.discard(job)
    finally:
        q.close()


def test_enqueue_inside_atomic_commits_with_the_order(migrated: Project) -> None:
    order, job, _ = place_order(migrated, "commit@example.com")
    assert orders(migrated, "commit@example.com") == [(order, False)]
    q = migrated.queue()
    try:
        info = q.get(job)
        assert (info.state, info.kind, info.payload) == (
            "available", "shop.tasks.send_receipt", {"order_id": order})
        q.discard(job)
    finally:
        q.close()


def test_an_exception_inside_atomic_rolls_back_the_order_and_the_job(migrated: Project) -> None:
    _, job, output = place_order(migrated, "rollback@example.com", fail=True)
    assert "payment declined" in output
    assert orders(migrated, "rollback@example.com") == []
    q = migrated.queue()
    try:
        with pytest.raises(leaseq.JobNotFound):
            q.get(job)
    finally:
        q.close()


ACK_SCRIPT = """
import django; django.setup()
from django.db import transaction
import leaseq
from leaseq.contrib.django import app
from shop.models import Order

order = Order.objects.create(email="ack@example.com")
job_id = app.queue.enqueue("acks", {"order": order.pk}).id
job, = app.queue.dequeue("acks", worker_id="t", lease=60)
try:
    with transaction.atomic():
        Order.objects.filter(pk=order.pk).update(receipt_sent=True)
        app.queue.ack(job, result="sent")
        raise KeyError("crash after the ack")
except KeyError:
    pass
print("after rollback:", app.queue.get(job_id).state, Order.objects.get(pk=order.pk).receipt_sent)
with transaction.atomic():
    Order.objects.filter(pk=order.pk).update(receipt_sent=True)
    app.queue.ack(job, result="sent")
print("after commit:", app.queue.get(job_id).state, Order.objects.get(pk=order.pk).receipt_sent)
"""


def test_ack_inside_atomic_commits_or_rolls_back_with_the_side_effects(
        migrated: Project) -> None:
    done = subprocess.run([sys.executable, "-c", ACK_SCRIPT], cwd=EXAMPLE, env=migrated.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["after rollback: running False",
                                        "after commit: completed True"]


def test_leaseq_worker_runs_a_task_from_the_apps_tasks_py(migrated: Project) -> None:
    order, job, _ = place_order(migrated, "worker@example.com")
    # PostgreSQL runs the worker with --processes 2: spawned children set Django up
    # themselves and find the task too.
    processes = "2" if migrated.backend == "postgres" else "1"
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "leaseq_worker", "--queues", "receipts",
         "--poll-interval", "0.05", "--grace", "5", "--processes", processes],
        cwd=EXAMPLE, env=migrated.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    q = migrated.queue()
    try:
        info = wait_for(lambda: (i := q.get(job)).state == "completed" and i, timeout=30,
                        message="the receipt job to complete")
        assert info.result == "worker@example.com"
        assert orders(migrated, "worker@example.com") == [(order, True)]
    finally:
        q.close()
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=30)[0]
    assert worker.returncode == 0, output


def test_leaseq_worker_takes_the_options_of_leaseq_worker(tmp_path: Path) -> None:
    def options(help_text: str) -> list[str]:
        return re.findall(r"^\s+((?:-\w, )?--[\w-]+)", help_text, re.MULTILINE)

    from leaseq.cli import cli

    cli_help = CliRunner().invoke(cli, ["worker", "--help"]).output
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"),
           "EXAMPLE_DB": "sqlite", "EXAMPLE_DB_NAME": str(tmp_path / "help.sqlite3")}
    project = Project("sqlite", env, "", "")
    django_help = project.manage("leaseq_worker", "--help").stdout
    assert "Usage: manage.py leaseq_worker [OPTIONS]\n" in django_help
    assert options(django_help) == options(cli_help)
    assert len(options(cli_help)) > 10


def test_database_settings_map_to_leaseq_urls(tmp_path: Path) -> None:
    from leaseq.contrib.django.conf import database_url

    pg = {"NAME": "shop", "USER": "app", "PASSWORD": "p@ss:/w?rd", "HOST": "db.internal",
          "PORT": 6432, "OPTIONS": {"sslmode": "require", "server_side_binding": True}}
    assert database_url("postgresql", pg) == (
        "postgresql://app:p%40ss%3A%2Fw%3Frd@db.internal:6432/shop?sslmode=require")
    assert database_url("postgresql", {"NAME": "shop", "HOST": "/run/postgresql"}) == (
        "postgresql:///shop?host=%2Frun%2Fpostgresql")
    assert database_url("postgresql", {"NAME": "s", "HOST": "::1"}) == "postgresql://[::1]/s"
    assert database_url("mysql", {"NAME": "shop", "USER": "root",
                                  "OPTIONS": {"charset": "utf8mb4"}}) == (
        "mysql://root@127.0.0.1/shop?charset=utf8mb4")
    assert database_url("sqlite", {"NAME": tmp_path / "x.db"}) == f"sqlite:///{tmp_path}/x.db"
    for vendor, params in [("sqlite", {"NAME": ":memory:"}),
                           ("sqlite", {"NAME": "file:memorydb_default?mode=memory&cache=shared"}),
                           ("mysql", {"NAME": "shop", "HOST": "/var/run/mysqld.sock"}),
                           ("oracle", {"NAME": "shop"})]:
        with pytest.raises(leaseq.ConfigurationError):
            database_url(vendor, params)


def test_a_driver_leaseq_cannot_join_is_refused_by_name() -> None:
    from leaseq.contrib.django.conf import _driver_connection

    for vendor, module, words in [("postgresql", "psycopg2.extensions", "psycopg 3"),
                                  ("mysql", "MySQLdb.connections", "PyMySQL")]:
        conn = type("connection", (), {"__module__": module})()
        with pytest.raises(leaseq.ConfigurationError, match=words):
            _driver_connection(vendor, conn, "default")


def test_bad_leaseq_settings_are_refused_by_name(tmp_path: Path) -> None:
    from django.conf import settings
    from django.test import override_settings

    from leaseq.contrib.django.checks import check_settings
    from leaseq.contrib.django.conf import Config, read_config

    if not settings.configured:  # this process runs no Django project of its own
        sqlite = "django.db.backends.sqlite3"
        settings.configure(DATABASES={
            "default": {"ENGINE": sqlite, "NAME": str(tmp_path / "x.sqlite3")},
            "memory": {"ENGINE": sqlite, "NAME": ":memory:"},
        })
    with override_settings():
        del settings.LEASEQ
        assert read_config() == Config("default", None, {})
    good = {"DATABASE": "default", "SETTINGS": {"table_prefix": "jobs_"}}
    with override_settings(LEASEQ=good):
        assert read_config() == Config("default", None, {"table_prefix": "jobs_"})
    with override_settings(LEASEQ={"URL": "memory://"}):
        assert read_config().alias == "default"
        assert read_config().database is None
    for bad, words in [({"DATABASE": "other"}, "must name a database"),
                       ({"DATABSE": "default"}, "unknown keys"),
                       ({"URL": 5}, "must be a string"),
                       ({"SETTINGS": {"leas": 5}}, "leas"),
                       ({"SETTINGS": {"lease": -5}}, "lease"),
                       (["default"], "must be a dict")]:
        with override_settings(LEASEQ=bad):
            with pytest.raises(leaseq.ConfigurationError, match=words):
                read_config()
            assert [e.id for e in check_settings()] == ["leaseq.E001"]
    assert check_settings() == []
    with override_settings(LEASEQ={"DATABASE": "memory"}):
        assert "in-memory" in check_settings()[0].msg


# One backend is enough here (the command's code is the same on each); MySQL, where the
# other worker test runs no --processes children.
@pytest.mark.parametrize("project", ["mysql"], indirect=True)
def test_call_command_runs_the_worker_in_the_calling_process(migrated: Project) -> None:
    order, job, _ = place_order(migrated, "call@example.com")
    script = (
        "import django; django.setup()\n"
        "from django.core.management import call_command, CommandError\n"
        "call_command('leaseq_worker', '--burst', '--queues', 'receipts')\n"
        "try:\n"
        "    call_command('leaseq_worker', '--bogus')\n"
        "except CommandError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=EXAMPLE, env=migrated.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "refused: No such option '--bogus'" in done.stdout
    assert orders(migrated, "call@example.com") == [(order, True)]
    q = migrated.queue()
    try:
        assert q.get(job).state == "completed"
    finally:
        q.close()


def test_options_manage_py_applied_itself_are_not_passed_to_click() -> None:
    from leaseq.contrib.django.management.commands.leaseq_worker import without_applied

    assert without_applied(["--settings", "a.b", "--burst", "--pythonpath=/x", "--queues",
                            "q", "--settings=c.d"]) == ["--burst", "--queues", "q"]


def test_nothing_outside_contrib_imports_django() -> None:
    src = ROOT / "src" / "leaseq"
    for path in src.rglob("*.py"):
        if "contrib" in path.relative_to(src).parts:
            continue
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+django\b", text, re.MULTILINE), path
