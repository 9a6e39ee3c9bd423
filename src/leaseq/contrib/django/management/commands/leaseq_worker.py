"""``manage.py leaseq_worker``: ``leaseq worker`` on the project's app.

The command is ``leaseq worker`` itself, click command and option objects included, with
its ``MODULE:APP`` argument preset to ``leaseq.contrib.django:app``: its options, their
defaults, checks and exit codes cannot drift from the CLI's. Django's argument parser is
bypassed (``run_from_argv``), so click parses, as it does for ``leaseq worker``.
"""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Sequence
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser

from leaseq.cli import worker

TARGET = "leaseq.contrib.django:app"
"""What the worker (and each ``--processes`` child, a fresh interpreter) loads: the
package's lazy ``app``, which sets Django up and so imports every app's ``tasks.py``."""

HELP = """Run the tasks of this project's leaseq app (each installed app's tasks.py)
until SIGTERM or SIGINT. Takes the options of `leaseq worker`; settings.LEASEQ names the
database."""

# Options Django's ManagementUtility has already applied before calling the command.
_APPLIED = ("--settings", "--pythonpath")


def command() -> click.Command:
    """``leaseq worker`` with its app argument preset: the same option objects."""
    callback = worker.callback
    assert callback is not None  # a click command made by @cli.command() has one

    def run(**options: Any) -> Any:
        return callback(app_path=TARGET, **options)

    rest = inspect.cleandoc(worker.help or "").split("\n\n", 1)[1:]
    return click.Command(
        "leaseq_worker", callback=run, help="\n\n".join([HELP, *rest]),
        params=[p for p in worker.params if p.name != "app_path"],
        context_settings={**worker.context_settings, "help_option_names": ["-h", "--help"]},
    )


def without_applied(args: Sequence[str]) -> list[str]:
    """``args`` less ``--settings``/``--pythonpath`` (and their values)."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _APPLIED:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _APPLIED)):
            out.append(arg)
    return out


class _Passthrough(CommandParser):  # type: ignore[misc]  # Django ships no type hints
    """Leaves the worker's options to click when the command runs by ``call_command``."""

    def parse_args(self, args: Sequence[str] | None = None,
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed: argparse.Namespace
        parsed, rest = self.parse_known_args(args, namespace)
        parsed.args = rest
        return parsed


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    """``manage.py leaseq_worker [leaseq worker's options]``."""

    help = HELP

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand the arguments to click; exits with the worker's exit code."""
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        command().main(args=without_applied(argv[2:]), prog_name=prog)

    def print_help(self, prog_name: str, subcommand: str) -> None:
        """``manage.py help leaseq_worker``: click's help of the command."""
        command().main(args=["--help"], prog_name=f"{prog_name} {subcommand}",
                       standalone_mode=False)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        """Django's parser (used by ``call_command``), passing the options it does not
        know on to click as positional arguments."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = _Passthrough  # same state, one method changed
        return parser

    def handle(self, *args: str, **options: Any) -> None:
        """``call_command("leaseq_worker", "--burst", ...)``: the worker in this process.

        Raises:
            CommandError: A bad option, or the worker exited with a non-zero code.
        """
        try:
            command().main(args=list(args), prog_name="leaseq_worker", standalone_mode=False)
        except click.ClickException as exc:
            raise CommandError(exc.format_message()) from exc
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise CommandError(f"leaseq worker exited with code {exc.code}") from exc
