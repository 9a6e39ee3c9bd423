"""The ``leaseq`` command line: thin, it parses arguments and calls the public API."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

import leaseq
from leaseq.backends._sql.plan import load_migrations

DIALECTS = {
    "postgres": "leaseq.backends.postgres",
    "mysql": "leaseq.backends.mysql",
    "sqlite": "leaseq.backends.sqlite",
}
DEFAULT_URL = "sqlite:///leaseq.db"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(leaseq.__version__, prog_name="leaseq")
def cli() -> None:
    """leaseq: a durable job queue in the database you already run."""


def url_option(f: Any) -> Any:
    return click.option(
        "--url",
        envvar="LEASEQ_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Database URL (or set LEASEQ_URL).",
    )(f)


def prefix_option(f: Any) -> Any:
    return click.option(
        "--table-prefix", default="leaseq_", show_default=True, help="Prefix of table names."
    )(f)


@cli.command()
@url_option
@prefix_option
def migrate(url: str, table_prefix: str) -> None:
    """Create or upgrade leaseq's tables (idempotent)."""
    with leaseq.connect(url, table_prefix=table_prefix) as q:
        q.migrate()
    click.echo(f"schema is up to date at {url.split('@')[-1]}")


@cli.command()
@click.option("--dialect", type=click.Choice(sorted(DIALECTS)), required=True)
@prefix_option
def schema(dialect: str, table_prefix: str) -> None:
    """Print the DDL, for teams that own their migrations."""
    leaseq.Settings(table_prefix=table_prefix)  # validates the prefix
    for version, name, statements in load_migrations(DIALECTS[dialect], table_prefix):
        click.echo(f"-- leaseq migration {version:04d}_{name} ({dialect})")
        for sql in statements:
            click.echo(sql.rstrip() + ";\n")


def main() -> None:
    """Entry point: leaseq errors become one line on stderr and exit status 1."""
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except leaseq.LeaseqError as exc:
        click.echo(f"leaseq: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
