"""Fixtures derived from tests/conftest.py's ``q``: more clients on the same tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import CONFORMANCE_BACKENDS

SMALL_CAP = 1000

# Conformance tests that do not apply to the Redis Cluster run, by name, and why.
_NAMED_REDIS = (
    "compares ServerStats.backend with the fixture's name, but on a cluster the backend "
    "is the Redis one and says 'redis' (Queue.backend; push wake-ups and metrics go by it)"
)
CLUSTER_SKIPS = {
    "test_server_stats_totals_every_queue": _NAMED_REDIS,
    "test_async_client_has_every_seed_operation": _NAMED_REDIS,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = getattr(item, "originalname", item.name)
        if (callspec is not None and callspec.params.get("backend") == "redis_cluster"
                and name in CLUSTER_SKIPS):
            item.add_marker(pytest.mark.skip(reason=CLUSTER_SKIPS[name]))


@pytest.fixture(params=CONFORMANCE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """tests/conftest.py's backends and a Redis Cluster (``redis_cluster``): every
    operation there splits work that spans slots (backends/redis/ops.py)."""
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def small_q(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    """A second client on ``q``'s tables whose payload cap is ``SMALL_CAP`` bytes."""
    queue = leaseq.connect(url, table_prefix=prefix, max_payload_bytes=SMALL_CAP,
                           reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()
