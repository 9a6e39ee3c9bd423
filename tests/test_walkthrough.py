"""Pages followed as a new user follows them: the README's Quickstart and "Tasks and
workers", and docs/getting-started.md from its install step through PostgreSQL to its
systemd unit, each step in page order, in a new directory with a new virtualenv that holds
the built wheel (not the source tree), against the URLs the page shows.

tests/test_docs_examples.py runs every block of every page, each in a process of its own
and with a database made for the run swapped in for the page's URLs. This module runs fewer
pages and keeps what a reader keeps between steps: one shell (a step's ``export`` and
``. .venv/bin/activate`` hold for the steps after it), files written by earlier steps, and
the page's own PostgreSQL role and database, which the page's commands create. It also
runs what the other test must leave out: the install steps, the superuser's commands, a
worker that runs until stopped, and the systemd unit's commands. ``<!-- walkthrough: KIND
-->`` before a block marks those (tests/test_docs_examples.py's docstring lists the kinds).

Two things stand in for the reader's machine, and only these: ``/path/to/leaseq`` (the
page's name for a checkout of leaseq) is the wheel built for the run, and ``sudo -u
postgres psql`` is ``psql`` as the test server's superuser. ``python`` on the PATH is the
interpreter running the tests, outside its virtualenv. Each test drops what its page
created. An unreachable PostgreSQL server fails the run in CI (``require``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import require
from tests.helpers import POSTGRES_URL, wait_for
from tests.test_docs_examples import PYTHON, SHELL, Block, parse

ROOT = Path(__file__).resolve().parent.parent
CHECKOUT = "/path/to/leaseq"
SUPERUSER_PSQL = "sudo -u postgres psql"
STEP_TIMEOUT = 120
STATS = """
import sys, leaseq
with leaseq.connect(sys.argv[1]) as q:
    s = q.stats().get(sys.argv[2])
    print(s.completed if s else 0, s.scheduled if s else 0, s.available if s else 0)
"""


def fresh_env(bin_dir: Path) -> dict[str, str]:
    """The environment of a new shell: no virtualenv, no LEASEQ_URL, and ``python`` on
    the PATH (``bin_dir``, a link to the interpreter under this test run's virtualenv)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "LEASEQ_URL")}
    ours = Path(sys.prefix) / "bin"
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != ours]
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "python"
    if not link.exists():
        link.symlink_to(getattr(sys, "_base_executable", sys.executable))
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Walk:
    """One reader at one terminal: steps run in ``workdir``, the shell's environment
    carried from step to step, processes started in the background stopped at the end."""

    def __init__(self, workdir: Path, env: dict[str, str], wheel: Path) -> None:
        self.workdir, self.env, self.wheel = workdir, env, wheel
        self.output: dict[int, str] = {}          # a step's line -> what it printed
        self.background: list[tuple[Block, subprocess.Popen[bytes], Path]] = []

    def steps(self, page: Path, start: str | None = None, stop: str | None = None) -> None:
        """Every step of ``page`` (between the headings ``start`` and ``stop``) in order."""
        text = page.read_text(encoding="utf-8").splitlines()
        first = text.index(start) + 1 if start else 0
        last = text.index(stop) + 1 if stop else len(text) + 1
        for block in parse(page):
            if first <= block.line <= last and block.fragment is None:
                self.step(block)

    def step(self, block: Block) -> None:
        kind = block.walkthrough
        if kind == "background":
            self.start(block, block.code.strip())
        elif kind == "unit":
            self.unit(block)
        elif block.lang in SHELL:
            self.shell(block)
        elif block.lang in PYTHON:
            self.python(block)

    def _run(self, block: Block, argv: list[str], env: dict[str, str]) -> str:
        done = subprocess.run(argv, cwd=self.workdir, env=env, capture_output=True,
                              text=True, timeout=STEP_TIMEOUT)
        self.output[block.line] = done.stdout
        assert done.returncode == 0, (
            f"{block.where} exited {done.returncode}\n--- step\n{block.code}--- stdout\n"
            f"{done.stdout}\n--- stderr\n{done.stderr}")
        return done.stdout

    def shell(self, block: Block) -> None:
        code = block.code
        if block.walkthrough == "install":
            assert CHECKOUT in code, f"{block.where}: an install step names {CHECKOUT}"
            code = code.replace(CHECKOUT, str(self.wheel))
        elif block.walkthrough == "superuser":
            assert SUPERUSER_PSQL in code, f"{block.where}: {SUPERUSER_PSQL}?"
            superuser = urlunsplit(urlsplit(POSTGRES_URL)._replace(path="/postgres"))
            code = code.replace(SUPERUSER_PSQL, f"psql -v ON_ERROR_STOP=1 {superuser}")
        saved = self.workdir / ".walkthrough-env"
        self._run(block, ["bash", "-euo", "pipefail", "-c",
                          f"{code}\nenv -0 > {shlex.quote(str(saved))}\n"], self.env)
        self.env = dict(item.split("=", 1)
                        for item in saved.read_text().split("\0") if "=" in item)

    def python(self, block: Block) -> None:
        first = block.code.splitlines()[0]
        module = re.match(r"^#\s*(?P<name>\w+\.py)\s*$", first)
        if module:                                  # a file the page asks you to create
            (self.workdir / module["name"]).write_text(block.code, encoding="utf-8")
            return
        script = self.workdir / f"step_{block.line}.py"
        script.write_text(block.code, encoding="utf-8")
        self._run(block, ["python", script.name], self.env)

    def start(self, block: Block, command: str, env: dict[str, str] | None = None) -> None:
        assert "\n" not in command, f"{block.where}: one command runs in the background"
        log = self.workdir / f"background_{block.line}_{len(self.background)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.workdir,
                                    env=env or self.env, stdout=out, stderr=subprocess.STDOUT)
        self.background.append((block, proc, log))

    def unit(self, block: Block) -> None:
        """A systemd unit: ExecStartPre runs, then ExecStart in the background, with the
        unit's Environment and its WorkingDirectory (this walk's directory)."""
        keys: dict[str, list[str]] = {}
        for line in block.code.splitlines():
            if "=" in line and not line.startswith(("#", "[")):
                key, value = line.split("=", 1)
                keys.setdefault(key.strip(), []).append(value.strip())
        [home] = keys["WorkingDirectory"]
        env = {**self.env, **dict(v.split("=", 1) for v in keys.get("Environment", []))}
        for pre in keys.get("ExecStartPre", []):
            self._run(block, shlex.split(pre.replace(home, str(self.workdir))), env)
        [start] = keys["ExecStart"]
        self.start(block, start.replace(home, str(self.workdir)), env)

    def alive(self) -> None:
        for block, proc, log in self.background:
            assert proc.poll() is None, (f"{block.where} exited {proc.returncode}\n"
                                         f"{log.read_text(errors='replace')}")

    def stats(self, url: str, queue: str) -> tuple[int, int, int]:
        """(completed, scheduled, available) of ``queue``, read with the walk's leaseq."""
        done = subprocess.run(["python", "-c", STATS, url, queue], cwd=self.workdir,
                              env=self.env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        completed, scheduled, available = map(int, done.stdout.split())
        return completed, scheduled, available

    def stop(self, grace: float = 45) -> None:
        """SIGTERM to what runs in the background, as a service manager stops it; each
        must exit 0 within ``grace`` seconds."""
        for block, proc, log in self.background:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            assert proc.returncode == 0, (f"{block.where} exited {proc.returncode}\n"
                                          f"{log.read_text(errors='replace')}")
        self.background.clear()

    def kill(self) -> None:
        for _, proc, _ in self.background:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [built] = dist.glob("leaseq-*.whl")
    return built


@pytest.fixture(scope="module")
def reader_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the wheel and the extras the README's steps use: the README has
    no install step of its own beyond ``pip install -e .`` in a checkout."""
    env = tmp_path_factory.mktemp("reader-venv")
    venv.create(env, with_pip=False)        # this run's pip installs into it: ~5 s saved
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"),
                           "install", "--quiet", f"{wheel}[postgres,metrics]"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return env


@pytest.fixture
def walk(tmp_path: Path, wheel: Path) -> Iterator[Walk]:
    workdir = tmp_path / "project"
    workdir.mkdir()
    walk = Walk(workdir, fresh_env(tmp_path / "system-bin"), wheel)
    try:
        yield walk
    finally:
        walk.kill()


def test_readme_quickstart_then_tasks_and_a_worker(walk: Walk, reader_venv: Path) -> None:
    walk.env["VIRTUAL_ENV"] = str(reader_venv)      # as after `pip install -e .` in a venv
    walk.env["PATH"] = f"{reader_venv / 'bin'}{os.pathsep}{walk.env['PATH']}"
    readme = ROOT / "README.md"
    walk.steps(readme, "## Quickstart (SQLite)", "## Results")

    [quickstart] = [line for line, out in walk.output.items() if "sending to" in out]
    printed = walk.output[quickstart]
    assert printed.count("sending to ") == 2 and "failed" not in printed, printed
    assert walk.stats("sqlite:///jobs.db", "emails") == (2, 1, 0)   # the delayed one waits

    # The worker the section starts runs the three due emails; the delayed one waits.
    def ran() -> bool:
        walk.alive()
        return walk.stats("sqlite:///leaseq.db", "emails")[0] == 3

    wait_for(ran, timeout=30, interval=0.3, message="the README's worker to run the due emails")
    walk.stop()
    assert walk.stats("sqlite:///leaseq.db", "emails") == (3, 1, 0)


@pytest.fixture
def no_app_role() -> Iterator[None]:
    """The page creates role ``app`` and database ``app``; drop them after the test. A
    server that has them already is not ours to touch: the test fails instead."""
    require("postgres")
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        found = conn.execute(
            "SELECT (SELECT count(*) FROM pg_roles WHERE rolname = 'app'),"
            " (SELECT count(*) FROM pg_database WHERE datname = 'app')").fetchone()
    assert found == (0, 0), (
        "role or database 'app' exists on the test server; getting-started creates its "
        "own. If a killed run left them: DROP DATABASE app WITH (FORCE); DROP ROLE app")
    try:
        yield
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS app WITH (FORCE)")
            conn.execute("DROP ROLE IF EXISTS app")


def test_getting_started_on_sqlite_then_postgresql(walk: Walk, no_app_role: None) -> None:
    page = ROOT / "docs" / "getting-started.md"
    with socket.socket() as s:      # the unit's --metrics-port, as the page writes it
        assert s.connect_ex(("127.0.0.1", 9464)) != 0, "port 9464 is taken"
    walk.steps(page, None, "## Move to PostgreSQL")

    # SQLite: the burst worker ran the due jobs; the one due in an hour waits.
    assert "leaseq, version" in "".join(walk.output.values())
    assert walk.stats("sqlite:///leaseq.db", "emails") == (3, 1, 0)   # ada, cy, then dan
    assert any("welcomed dan@example.com" in out for out in walk.output.values())

    walk.steps(page, "## Move to PostgreSQL", "### A container")
    url = walk.env["LEASEQ_URL"]
    assert url.startswith("postgresql://app:") and "@localhost/app" in url   # as shown

    # The unit's worker (migrate first, then --metrics-port) runs fay, enqueued in the
    # psycopg transaction after the burst worker ran eve.
    def ran() -> bool:
        walk.alive()
        return walk.stats(url, "emails")[0] == 2

    wait_for(ran, timeout=30, interval=0.3, message="the unit's worker to run the PostgreSQL jobs")

    def metrics() -> bool:
        walk.alive()
        try:
            with urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=2) as r:
                return b"leaseq_" in r.read()
        except OSError:
            return False

    wait_for(metrics, timeout=20, interval=0.3, message="the unit's worker to serve /metrics")
    walk.stop()                                       # TimeoutStopSec=45 > --grace 30


def test_the_cli_runs_without_the_dashboard_extra() -> None:
    """Getting started installs leaseq without extras and runs ``leaseq --version``: the
    CLI reads the dashboard's token limits at start, never starlette (caught by the
    walkthrough once, when ``leaseq.dashboard`` imported its app eagerly)."""
    code = ("import sys; sys.modules['starlette'] = None\n"
            "sys.argv = ['leaseq', '--version']\n"
            "from leaseq.cli import main\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "leaseq, version" in done.stdout, done.stderr
