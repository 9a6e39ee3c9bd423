"""Fixtures derived from tests/conftest.py's ``q``: more clients on the same tables; and
``prefix`` and ``q`` again, reusing tables on the SQL servers (see ``_SPARE``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress

import pytest

import leaseq
from tests.conftest import migrated_queue, require
from tests.helpers import CONFORMANCE_BACKENDS, drop_tables, empty_tables, new_prefix

SMALL_CAP = 1000

@pytest.fixture(params=CONFORMANCE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """tests/conftest.py's backends and a Redis Cluster (``redis_cluster``): every
    operation there splits work that spans slots (backends/redis/ops.py)."""
    name: str = request.param
    require(name)
    return name


# Tables a conformance test left behind, emptied, for the next test of this process on the
# same backend: creating and dropping a prefix's tables cost a SQL server 0.1-0.3 s a test
# (MariaDB most, more on a busy machine), emptying them a few milliseconds. Only here:
# these tests reach the tables through ``q`` and the clients made from it, all closed
# before ``q``'s teardown, so no program is left using a prefix when it is handed on.
_SPARE: dict[str, list[str]] = {}
_REUSED = ("postgres", "postgres_pgbouncer", "mysql")


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A spare prefix (above) for a test on ``q``'s tables, else a new one."""
    if "q" in request.fixturenames:
        spare = _SPARE.get(request.getfixturevalue("backend"))
        if spare:
            return spare.pop()
    return new_prefix()


def _put_away(backend: str, prefix: str) -> None:
    """Empties the tables into ``_SPARE`` on the SQL servers, drops them elsewhere."""
    if backend not in _REUSED:
        drop_tables(backend, prefix)
        return
    try:
        empty_tables(backend, prefix)
    except Exception:  # a test that changed the tables: start afresh
        drop_tables(backend, prefix)
    else:
        _SPARE.setdefault(backend, []).append(prefix)


@pytest.fixture
def q(backend: str, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    """tests/conftest.py's ``q``, whose tables go to ``_SPARE`` after the test on the SQL
    servers; migrate() on reused tables finds them current."""
    yield from migrated_queue(backend, url, prefix, put_away=_put_away)


def pytest_sessionfinish() -> None:
    for backend, prefixes in _SPARE.items():
        for spare in prefixes:
            with suppress(Exception):  # a server gone by now: nothing left to clean
                drop_tables(backend, spare)
    _SPARE.clear()


@pytest.fixture
def small_q(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    """A second client on ``q``'s tables whose payload cap is ``SMALL_CAP`` bytes."""
    queue = leaseq.connect(url, table_prefix=prefix, max_payload_bytes=SMALL_CAP,
                           reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()
