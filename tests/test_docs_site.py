"""The documentation site's generated parts cover the whole public surface. ``mkdocs build
--strict`` in scripts/test checks the same through scripts/mkdocs_hooks.py; these run in
a second, without building the site."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import click

import leaseq
from leaseq.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks",
                                                  ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_renders_exactly_the_names_of_all() -> None:
    assert hooks().documented_names(ROOT / "docs") == set(leaseq.__all__)


def test_every_public_name_and_member_has_a_docstring() -> None:
    assert hooks().missing_docstrings() == []


def test_the_cli_reference_lists_every_command() -> None:
    page = hooks().cli_reference()
    headings = set(re.findall(r"^#{2,3} (leaseq .+)$", page, re.MULTILINE))

    def paths(command: click.Command, prefix: str) -> set[str]:
        found = {prefix} if prefix != "leaseq" else set()
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                found |= paths(sub, f"{prefix} {name}")
        return found

    expected = paths(cli, "leaseq")
    assert len(expected) > 15
    assert headings == expected


def test_every_guide_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (ROOT / "docs").glob("*.md"):
        assert f" {page.name}" in nav, page.name
