"""Fixtures: every test that takes ``q`` runs once per backend, on fresh tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import leaseq
from tests.helpers import BACKENDS, backend_url, drop_tables, new_prefix, reachable

_unreachable: dict[str, str | None] = {}


def require(backend: str) -> None:
    """Skip (or, in CI, fail) when the backend's server is not there."""
    if backend not in _unreachable:
        _unreachable[backend] = reachable(backend)
    why = _unreachable[backend]
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI=true: an unreachable database fails the run)")
        pytest.skip(why)


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, the wheel built from the unpacked sdist (``python -m
    build``): what tests/test_release.py and tests/test_walkthrough.py install."""
    out = tmp_path_factory.mktemp("dist")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(root)],
                          cwd=out, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items()
                               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LEASEQ_URL")})
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return out


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def prefix() -> str:
    return new_prefix()


@pytest.fixture
def url(backend: str, tmp_path: object) -> str:
    return backend_url(backend, str(tmp_path))


def migrated_queue(
    backend: str, url: str, prefix: str,
    put_away: Callable[[str, str], None] = drop_tables,
) -> Iterator[leaseq.Queue]:
    """A migrated Queue, inline reclaim off so tests decide when; closed after, and its
    tables then ``put_away`` (dropped, unless a conftest keeps them for the next test)."""
    queue = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    queue.migrate()
    try:
        yield queue
    finally:
        queue.close()
        put_away(backend, prefix)


@pytest.fixture
def q(backend: str, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    """A migrated Queue on fresh tables (``migrated_queue``)."""
    yield from migrated_queue(backend, url, prefix)


# Run after the parallel part of the suite, two at a time (scripts/test): multi-process
# scenarios that load the cores, time what a busy machine would stretch, or cut connections
# and start servers. Each aims its faults at its own workers only (connection kills by
# application or client name, MariaDB's own database, private servers and networks), so
# two can share the machine; the other tests' four processes would stretch them too far.
SERIAL_PATHS = ("tests/chaos/", "tests/test_herd.py", "tests/test_flows_kill.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL_PATHS) or item.nodeid.startswith(
                tuple(p.removeprefix("tests/") for p in SERIAL_PATHS)):
            item.add_marker(pytest.mark.serial)
