"""The documentation site's generated parts cover the whole public surface. ``mkdocs build
--strict`` in scripts/test checks the same through scripts/mkdocs_hooks.py; these run in
a second, without building the site. One test builds it (~15 s) and follows every relative
link of every page: mkdocs checks links between Markdown pages, not to the other files a
page links to (``grafana/leaseq.json`` was left out of the site that way)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlsplit

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


LINK = re.compile(r'(?:href|src)="([^"]*)"')


def test_the_built_site_holds_the_target_of_every_relative_link(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr
    checked, dead = 0, []
    for page in sorted(site.rglob("*.html")):
        for link in LINK.findall(page.read_text(encoding="utf-8")):
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path or link.startswith("/"):
                continue  # another site, an anchor on the same page, or the site's root
            target = (page.parent / unquote(parts.path)).resolve()
            checked += 1
            if not (target / "index.html" if target.is_dir() else target).exists():
                dead.append(f"{page.relative_to(site)} -> {link}")
    assert dead == []
    assert checked > 500 and (site / "grafana" / "leaseq.json").exists()
