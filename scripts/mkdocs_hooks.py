"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``).

* The changelog page is CHANGELOG.md at the repository's root, so it lives in one place.
* The command-line reference is generated from the click commands (their ``--help``), so
  it lists every command and cannot drift from them.
* The API reference must show every name of ``leaseq.__all__`` and every public name must
  have a docstring: mkdocstrings silently leaves out a member without one, so these checks
  log warnings, and ``mkdocs build --strict`` (scripts/test) fails on them.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = "reference"
DIRECTIVE = re.compile(r"^::: leaseq\.(\w+)\s*$", re.MULTILINE)

log = logging.getLogger("mkdocs.hooks.leaseq")


def documented_names(docs_dir: Path) -> set[str]:
    """The names of ``leaseq`` that the reference pages render (``::: leaseq.NAME``)."""
    names: set[str] = set()
    for page in sorted((docs_dir / REFERENCE).glob("*.md")):
        names.update(DIRECTIVE.findall(page.read_text(encoding="utf-8")))
    return names


def missing_docstrings() -> list[str]:
    """Public names (and their public methods and properties) without a docstring."""
    sys.path.insert(0, str(ROOT / "src"))
    import leaseq

    missing = []
    for name in leaseq.__all__:
        obj = getattr(leaseq, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases carry their docstring in the source; griffe reads it
        if not inspect.getdoc(obj):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for member_name, member in vars(obj).items():
            if member_name.startswith("_"):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if (inspect.isfunction(member) or isinstance(member, property)) \
                    and not member.__doc__:
                missing.append(f"{name}.{member_name}")
    return missing


CLI_INTRO = """\
# Command line

Every command that talks to a database takes `--url`; without it, the `LEASEQ_URL`
environment variable, else `sqlite:///leaseq.db`. `leaseq worker` runs on its App's URL,
which `LEASEQ_URL` fills in only when the App names none and `--url` overrides: the whole
rule is one table, [Which database](../operations.md#which-database). Every command that
prints a result takes `--json` (all but `worker`, `dashboard`, `demo` and `schema`, which
prints DDL). Exit codes scripts can trust: 0 success, 1 a leaseq error (bad input, bad
state), 2 bad usage, 3 the database is unreachable or refused the connection, 4 no such
job, 130 interrupted.

This page is generated from the commands' own `--help`, so it lists every one of them.
"""


def cli_reference() -> str:
    """Markdown for every ``leaseq`` command: its summary and its ``--help`` text."""
    import click

    sys.path.insert(0, str(ROOT / "src"))
    from leaseq.cli import cli

    parts = [CLI_INTRO]

    def walk(command: click.Command, name: str, parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=name, parent=parent, terminal_width=78,
                            max_content_width=78)
        if parent is not None:
            level = "##" if parent.parent is None else "###"
            parts.append(f"{level} {ctx.command_path}\n\n"
                         f"{command.get_short_help_str(limit=200)}\n")
        parts.append(f"```text\n{command.get_help(ctx)}\n```\n")
        if isinstance(command, click.Group):
            for sub_name in command.list_commands(ctx):
                sub = command.get_command(ctx, sub_name)
                if sub is not None and not sub.hidden:
                    walk(sub, sub_name, ctx)

    walk(cli, "leaseq", None)
    return "\n".join(parts)


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    files.append(File.generated(
        config, "changelog.md",
        content=(ROOT / "CHANGELOG.md").read_text(encoding="utf-8")))
    files.append(File.generated(config, f"{REFERENCE}/cli.md", content=cli_reference()))
    return files


def on_pre_build(config: MkDocsConfig, **_: Any) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    import leaseq

    shown = documented_names(Path(config.docs_dir))
    for name in sorted(set(leaseq.__all__) - shown):
        log.warning("leaseq.%s is in leaseq.__all__ but on no page of docs/%s/",
                    name, REFERENCE)
    for name in sorted(shown - set(leaseq.__all__)):
        log.warning("docs/%s/ renders leaseq.%s, which is not in leaseq.__all__",
                    REFERENCE, name)
    for name in missing_docstrings():
        log.warning("leaseq.%s has no docstring", name)
