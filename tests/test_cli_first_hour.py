"""The CLI's small first-hour fixes (issue 30, item 8), each a real `python -m leaseq.cli`
process: `migrate` says what it did; read-only commands leave no SQLite file behind;
--json on every command that prints a result; counts read "1 job", "2 jobs"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import POSTGRES_URL, drop_tables, new_prefix


def leaseq_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # no LEASEQ_URL
    return subprocess.run([sys.executable, "-m", "leaseq.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd, env=env)


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """--url and --table-prefix of a database leaseq has never seen."""
    prefix = new_prefix()
    if request.param == "sqlite":
        yield ["--url", f"sqlite:///{tmp_path}/new.db", "--table-prefix", prefix]
        return
    require("postgres")
    yield ["--url", POSTGRES_URL, "--table-prefix", prefix]
    drop_tables("postgres", prefix)


def test_migrate_says_what_it_created_then_that_nothing_was_left(
        tmp_path: Path, fresh: list[str]) -> None:
    first = leaseq_cli(tmp_path, "migrate", *fresh)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("created leaseq's schema at ")
    assert "0001_initial" in first.stdout and "up to date" not in first.stdout
    again = leaseq_cli(tmp_path, "migrate", *fresh)
    assert "already up to date: nothing to apply" in again.stdout
    assert json.loads(leaseq_cli(tmp_path, "migrate", "--json", *fresh).stdout) == {
        "applied": [], "created": False}


def test_migrate_names_the_migrations_of_an_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/old.db"
    q = leaseq.connect(url)
    q.migrate()
    q.close()
    import sqlite3

    with sqlite3.connect(tmp_path / "old.db") as db:  # as if 0010 were new
        db.execute("DELETE FROM leaseq_migrations WHERE version = 10")
        db.execute("DROP TABLE leaseq_server")  # what 0010_server_config made
        db.execute("DROP TABLE leaseq_queue_names")
    out = leaseq_cli(tmp_path, "migrate", "--url", url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("applied 0010_server_config")
    assert out.stdout.startswith("upgraded leaseq's schema at ")


READ_ONLY = [["stats"], ["jobs"], ["get", "1"], ["queue", "show", "emails"], ["queues"],
             ["server", "show"], ["stats", "--json"]]


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_read_only_commands_never_create_a_sqlite_file(tmp_path: Path,
                                                       args: list[str]) -> None:
    out = leaseq_cli(tmp_path, *args)  # the default: sqlite:///leaseq.db in the cwd
    assert out.returncode == 1
    assert "no SQLite database at 'leaseq.db'" in out.stderr and "leaseq migrate" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_every_command_that_prints_a_result_takes_json(tmp_path: Path) -> None:
    url = ["--url", f"sqlite:///{tmp_path}/j.db"]

    def emitted(*args: str) -> object:
        out = leaseq_cli(tmp_path, *args, "--json", *url)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert emitted("migrate")["created"] is True  # type: ignore[index]
    q = leaseq.connect(url[1])
    dead = q.enqueue("q", max_attempts=1).id
    q.nack(q.dequeue("q")[0], "boom")
    waiting = q.enqueue("q", delay=60).id
    assert emitted("kick", "q") == {"queue": "q", "kicked": 1}
    assert emitted("retry", str(waiting)) == {"id": waiting, "state": "available"}
    assert emitted("cancel", str(waiting)) == {"id": waiting, "state": "cancelled"}
    assert emitted("discard", str(dead)) == {"id": dead, "state": "discarded"}
    assert emitted("pause", "q") == {"queue": "q", "paused": True}
    assert emitted("resume", "q") == {"queue": "q", "paused": False}
    assert emitted("prune", "--older-than", "0") == {"pruned": 2}
    q.close()


def test_counts_read_as_people_say_them(tmp_path: Path) -> None:
    url = ["--url", f"sqlite:///{tmp_path}/p.db"]
    assert leaseq_cli(tmp_path, "migrate", *url).returncode == 0
    q = leaseq.connect(url[1])
    q.enqueue("q", max_attempts=1)
    q.nack(q.dequeue("q")[0], "boom")
    assert leaseq_cli(tmp_path, "kick", "q", *url).stdout == "1 job kicked\n"
    assert leaseq_cli(tmp_path, "kick", "q", *url).stdout == "0 jobs kicked\n"
    q.ack(q.dequeue("q")[0])
    assert leaseq_cli(tmp_path, "prune", "--older-than", "0", *url).stdout == (
        "1 history row pruned\n")
    q.close()


def test_reclaim_interval_help_no_longer_contradicts_itself(tmp_path: Path) -> None:
    shown = " ".join(leaseq_cli(tmp_path, "worker", "--help").stdout.split())
    assert "at most the app's" not in shown
    assert "caps it when shorter" in shown


def test_json_is_where_the_readme_and_the_cli_reference_say() -> None:
    """README.md and the CLI reference name the commands without --json; every other
    command has it."""
    import click

    from leaseq.cli import cli

    def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
        for name, command in sorted(group.commands.items()):
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield prefix + name, command

    without = {name for name, command in commands(cli)
               if "--json" not in {o for p in command.params for o in getattr(p, "opts", [])}}
    assert without == {"worker", "dashboard", "demo", "schema"}
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "takes `--json` (all but `worker`, `dashboard`, `demo` and `schema`)" in readme
