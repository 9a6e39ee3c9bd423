"""The package as users get it: ``python -m build`` makes the sdist and, from it, the wheel;
the wheel (not an editable install) goes into a fresh virtualenv, and its ``leaseq``
runs the demo, a PostgreSQL and a Redis round trip and serves the dashboard with its
static files. Catches what an editable install hides: a migration, template or static
file left out of the package, an import of something only the source tree has, a
dependency missing from the metadata."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import POSTGRES_URL, REDIS_URL, drop_tables, new_prefix, wait_for

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.release

ROUND_TRIP = """
import sys
import leaseq

url, prefix = sys.argv[1], sys.argv[2]
assert "site-packages" in leaseq.__file__, leaseq.__file__   # the wheel, not the tree
with leaseq.connect(url, table_prefix=prefix) as q:
    q.migrate()
    r = q.enqueue("release", {"n": 1})
    [job] = q.dequeue("release", worker_id="release-test")
    assert job.id == r.id and job.payload == {"n": 1}
    q.ack(job, result={"ok": True})
    assert q.result(r.id) == {"ok": True}
    print(q.backend, "round trip ok")
"""


def run(argv: list[str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items()
                               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LEASEQ_URL")})
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and the extras the checks need; its bin/."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    [wheel] = dist.glob("leaseq-*.whl")
    run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", f"{wheel}[postgres,redis,dashboard]"], cwd=env)
    return env / "bin"


def test_sdist_and_wheel_carry_the_version_and_the_package_data(dist: Path) -> None:
    version = leaseq.__version__
    sdists = list(dist.glob(f"leaseq-{version}.tar.gz"))
    wheels = list(dist.glob(f"leaseq-{version}-py3-none-any.whl"))
    assert sdists and wheels, sorted(p.name for p in dist.iterdir())
    import zipfile

    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for needed in ("leaseq/py.typed", "leaseq/dashboard/static/dashboard.css",
                   "leaseq/dashboard/templates/base.html",
                   "leaseq/backends/postgres/migrations/0001_initial.sql",
                   "leaseq/backends/sqlite/queries.sql", "leaseq/backends/_sql/queries.sql"):
        assert needed in names, needed


def test_version_lives_in_one_place() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.MULTILINE)
    assert not re.search(r"^version = ", pyproject, re.MULTILINE)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, re.MULTILINE)
    assert released and released[0] == leaseq.__version__, released


def test_cli_version_and_demo(installed: Path, tmp_path: Path) -> None:
    out = run([str(installed / "leaseq"), "--version"], cwd=tmp_path)
    assert out.strip() == f"leaseq, version {leaseq.__version__}"
    out = run([str(installed / "leaseq"), "demo"], cwd=tmp_path, timeout=120)
    assert "completed" in out


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_round_trip(installed: Path, tmp_path: Path, backend: str) -> None:
    require(backend)
    prefix = new_prefix()
    url = POSTGRES_URL if backend == "postgres" else REDIS_URL
    try:
        out = run([str(installed / "python"), "-c", ROUND_TRIP, url, prefix], cwd=tmp_path)
    finally:
        drop_tables(backend, prefix)
    assert out.strip() == f"{backend} round trip ok"


@pytest.fixture
def dashboard(installed: Path, tmp_path: Path) -> Iterator[str]:
    run([str(installed / "leaseq"), "migrate", "--url", "sqlite:///board.db"], cwd=tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(installed / "leaseq"), "dashboard", "--url", "sqlite:///board.db",
             "--port", str(port)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "LEASEQ_DASHBOARD_TOKEN": BOARD_TOKEN})
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    try:
        wait_for(up, timeout=30, message="the dashboard's port")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


BOARD_TOKEN = "release-test-token-0123456789"


def get(url: str) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {BOARD_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status, reply.headers.get("content-type", ""), reply.read().decode()


def test_dashboard_serves_a_page_and_its_static_files(dashboard: str) -> None:
    status, kind, page = get(dashboard + "/")
    assert status == 200 and kind.startswith("text/html")
    assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', page)
    assert {"/static/dashboard.css", "/static/dashboard.js"} <= set(assets), assets
    for asset in assets:
        status, kind, body = get(dashboard + asset)
        assert status == 200 and body, asset
        assert ("css" in kind) if asset.endswith(".css") else ("javascript" in kind), kind
