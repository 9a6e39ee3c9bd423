"""Every code example in README.md and docs/ runs, or says why it cannot.

A fenced ``python`` block runs as a script; a ``sh`` block whose commands are ``leaseq``
commands runs in bash. The blocks of one Markdown file run in order, in one fresh
directory (so ``sqlite:///jobs.db`` is a new file per page, and a ``# myapp.py`` block is
the module a later ``leaseq worker myapp:app`` imports), against real servers: a
``postgresql://`` or ``mysql://`` URL in a block is replaced by a database created for
this run and dropped after it.

An HTML comment right before a block changes that:

* ``<!-- fragment: REASON -->``: not run; REASON says why (it needs names defined
  elsewhere, a server topology the suite does not start, it never exits, ...).
* ``<!-- example: continue -->``: runs as one script with the block before it (the prose
  between them explains the first half).
* ``<!-- example: setup`` + lines of Python + ``-->``: hidden code run first. Its first
  line is a comment saying why it is hidden (names an earlier section defined, say); a
  reader copying the block needs nothing else, so no hidden stand-in for "your code".
* ``<!-- walkthrough: KIND -->``: a step that only tests/test_walkthrough.py runs, where
  a page is followed in order in a fresh virtualenv against the URLs it shows:
  ``install`` (venv and pip lines; ``/path/to/leaseq`` is the wheel built for the run),
  ``superuser`` (the server's administrator creates the role and database the page uses:
  ``sudo -u postgres psql`` there is ``psql`` as the test server's superuser),
  ``background`` (a command that runs until stopped, a worker: started, then stopped with
  SIGTERM once the page's promise holds) and ``unit`` (a systemd unit: its ExecStartPre,
  then its ExecStart in the background, in its WorkingDirectory).

A block whose first line is ``# NAME.py`` is written to NAME.py and imported, not run as
a script, so that later blocks can import it.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON = {"python", "py", "python3"}
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(
    r"<!--\s*(?P<kind>fragment|example|walkthrough)\s*:?\s*(?P<text>.*?)\s*-->\s*$", re.DOTALL)
WALKTHROUGH = {"install", "superuser", "background", "unit"}
MODULE = re.compile(r"^#\s*(?P<name>[A-Za-z_][\w/]*\.py)\s*$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
TIMEOUT = 60


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    fragment: str | None = None
    continues: bool = False
    setup: str = ""
    walkthrough: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def is_leaseq_shell(self) -> bool:
        for line in shell_commands(self.code):
            for command in re.split(r"&&|\|\||;|\|", line):
                words = command.split()
                while words and ENV_ASSIGNMENT.match(words[0]):
                    words.pop(0)
                if words[:1] == ["leaseq"]:
                    return True
        return False


@dataclass
class Program:
    """Blocks that run as one script (a block and the ones that continue it)."""

    blocks: list[Block] = field(default_factory=list)


def shell_commands(code: str) -> list[str]:
    commands = []
    for raw in code.splitlines():
        line = raw.strip()
        line = line[2:] if line.startswith("$ ") else line
        if line and not line.startswith("#"):
            commands.append(line)
    return commands


def comment_before(lines: list[str], index: int) -> str | None:
    """The HTML comment that ends on the last non-blank line before ``index``."""
    end = index - 1
    while end >= 0 and not lines[end].strip():
        end -= 1
    if end < 0 or not lines[end].strip().endswith("-->"):
        return None
    start = end
    while start >= 0 and "<!--" not in lines[start]:
        start -= 1
    return "\n".join(line.strip() for line in lines[start:end + 1]) if start >= 0 else None


def parse(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match["indent"], match["fence"], match["lang"].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        block = Block(page, i + 1, lang, "\n".join(body) + "\n")
        comment = comment_before(lines, i)
        marker = MARKER.search(comment) if comment else None
        if marker and marker["kind"] == "fragment":
            block.fragment = marker["text"]
        elif marker and marker["kind"] == "walkthrough":
            block.walkthrough = marker["text"]
        elif marker and marker["text"] == "continue":
            block.continues = True
        elif marker and marker["text"].startswith("setup"):
            block.setup = marker["text"][len("setup"):].strip("\n") + "\n"
        blocks.append(block)
        i = j + 1
    return blocks


def programs(page: Path) -> list[Program]:
    """The runnable blocks of a page, grouped into scripts, in page order."""
    runs: list[Program] = []
    for block in parse(page):
        if block.fragment is not None or block.walkthrough is not None:
            continue
        if block.lang in PYTHON or (block.lang in SHELL and block.is_leaseq_shell):
            if block.continues and runs and runs[-1].blocks[-1].lang == block.lang:
                runs[-1].blocks.append(block)
            else:
                runs.append(Program([block]))
    return runs


# -- servers: a database of our own per run ------------------------------------------------


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


SERVER_URL = re.compile(r"(postgres(?:ql)?|mysql)://")


@contextmanager
def databases() -> Iterator[dict[str, str]]:
    """Fresh PostgreSQL and MySQL databases for one page's examples, dropped afterwards."""
    name = f"leaseq_docs_{secrets.token_hex(4)}"
    urls: dict[str, str] = {}
    require("postgres")
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    urls["postgres"] = _with_database(POSTGRES_URL, name)
    require("mysql")
    import pymysql

    parts = urlsplit(MYSQL_URL)
    mysql = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                            user=parts.username or "root", password=parts.password or "")
    with mysql.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    urls["mysql"] = _with_database(MYSQL_URL, name)
    try:
        yield urls
    finally:
        with mysql.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        mysql.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def localize(code: str, urls: dict[str, str]) -> str:
    """Point the example's database URLs at this run's own databases."""
    if not urls:
        return code
    code = re.sub(r"postgres(?:ql)?://[^\s\"'`)]*", urls["postgres"], code)
    return re.sub(r"mysql://[^\s\"'`)]*", urls["mysql"], code)


def run(program: Program, workdir: Path, urls: dict[str, str]) -> None:
    first = program.blocks[0]
    code = "".join(block.setup + block.code for block in program.blocks)
    code = localize(code, urls)
    env = {**os.environ, "PYTHONPATH": str(workdir), "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("LEASEQ_URL", None)
    if first.lang in SHELL:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    else:
        module = MODULE.match(first.code.splitlines()[0]) if first.code.strip() else None
        if module:
            path = workdir / module["name"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code, encoding="utf-8")
            dotted = module["name"][:-3].replace("/", ".")
            argv = [sys.executable, "-c", f"import {dotted}"]
        else:
            script = workdir / f"_example_{first.line}.py"
            script.write_text(code, encoding="utf-8")
            argv = [sys.executable, str(script)]
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{first.where}: still running after {TIMEOUT} s\n{exc.stdout!r}\n"
                    f"{exc.stderr!r}")
    print(f"{first.where}: {time.monotonic() - started:.2f} s")
    if done.returncode != 0:
        pytest.fail(f"{first.where} ({first.lang}) exited {done.returncode}\n--- code\n{code}"
                    f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    runs = programs(page)
    servers = any(SERVER_URL.search(block.setup + block.code)
                  for program in runs for block in program.blocks)
    servers_or_none: AbstractContextManager[dict[str, str]] = (
        databases() if servers else nullcontext({}))
    with servers_or_none as urls:
        for program in runs:
            run(program, tmp_path, urls)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fragments_say_why(page: Path) -> None:
    for block in parse(page):
        if block.fragment is not None:
            assert block.fragment.strip(), f"{block.where}: a fragment needs a reason"
        if block.continues:
            assert block.lang in PYTHON | SHELL, f"{block.where}: nothing to continue"
        if block.setup:
            assert block.setup.startswith("#"), \
                f"{block.where}: hidden setup starts with a comment saying why it is hidden"
        if block.walkthrough is not None:
            assert block.walkthrough in WALKTHROUGH, f"{block.where}: {block.walkthrough}?"


def test_the_collector_finds_what_it_should(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)\n```\n\n<!-- fragment: needs a server -->\n```python\nx\n```\n"
        "<!-- example: continue -->\n```python\nprint(2)\n```\n"
        "<!-- example: setup\ndef send(p): pass\n-->\n```python\nsend(1)\n```\n"
        "```sh\npip install leaseq\n```\n```sh\nleaseq stats  # counts\n```\n"
        "```sh\npip install -e . && leaseq demo\n```\n"
        "=== \"tab\"\n\n    ```python\n    print(3)\n    ```\n"
        "<!-- walkthrough: install -->\n"
        "```sh\npip install /path/to/leaseq && leaseq --version\n```\n",
        encoding="utf-8")
    blocks = parse(page)
    assert [b.fragment for b in blocks][:2] == [None, "needs a server"]
    assert blocks[2].continues and blocks[3].setup == "def send(p): pass\n"
    assert [b.is_leaseq_shell for b in blocks[4:7]] == [False, True, True]
    assert blocks[7].code == "print(3)\n"
    assert blocks[8].walkthrough == "install" and blocks[8].is_leaseq_shell
    runs = programs(page)
    assert [[b.line for b in r.blocks] for r in runs] == [[1, 10], [16], [22], [25], [30]]


# -- what a reader copies must be safe to copy ---------------------------------------------

ENQUEUE_CALLS = {"enqueue", "enqueue_many"}


def import_time_enqueues(code: str) -> list[int]:
    """Lines of module-level statements that enqueue (not under ``if __name__ == ...``)."""
    import ast

    found = []
    for statement in ast.parse(code).body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(statement, ast.If) and "__name__" in ast.unparse(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ENQUEUE_CALLS:
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_a_worker_imports_enqueue_nothing_at_import(page: Path) -> None:
    """A ``# NAME.py`` block is a module ``leaseq worker NAME:app`` imports: an enqueue at
    its top level runs again at every worker start (and in every ``--processes`` child)."""
    for block in parse(page):
        if block.lang in PYTHON and block.fragment is None \
                and MODULE.match(block.code.splitlines()[0] if block.code.strip() else ""):
            lines = import_time_enqueues(block.code)
            assert not lines, (f"{block.where}: enqueues at import (lines {lines} of the "
                               "block): move them under if __name__ == '__main__' or into "
                               "a producer script")


# What a page uses -> the extras that provide it, the one to name first. A flag counts
# anywhere on the page (prose shows flags too); a command or call only in its code blocks.
NEEDS_EXTRA = {
    "--metrics-port": ("metrics", "dashboard", "all"),
    "leaseq dashboard": ("dashboard", "all"),
    "leaseq.tracing.instrument(": ("otel", "all"),
}
EXTRAS = re.compile(r"\[([\w,]+)\]'?")


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "design.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_the_extra_of_every_flag_they_use(page: Path) -> None:
    """A page that shows ``--metrics-port`` says which extra it needs: installed without
    it, the worker exits at start (a crash loop under ``Restart=always``)."""
    text = page.read_text(encoding="utf-8")
    code = "".join(block.code for block in parse(page))
    named = {extra for group in EXTRAS.findall(text) for extra in group.split(",")}
    for use, extras in NEEDS_EXTRA.items():
        if use in (text if use.startswith("--") else code):
            assert named & set(extras), f"{page.name} uses {use}: name the {extras[0]!r} extra"
