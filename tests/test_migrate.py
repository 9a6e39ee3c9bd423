"""migrate() is idempotent and safe when several processes run it at once; the DDL that
``leaseq schema`` prints is what migrate() applies."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

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
