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
_NO_FLOWS = (
    "chains and groups are refused on Redis Cluster: a step's completion and the next "
    "step's enqueue touch keys of several slots (tests/test_flows_kill.py checks the refusal)"
)
CLUSTER_SKIPS = {
    "test_server_stats_totals_every_queue": _NAMED_REDIS,
    "test_async_client_has_every_seed_operation": _NAMED_REDIS,
    **dict.fromkeys([
        "test_a_chain_passes_each_result_as_the_next_steps_first_argument",
        "test_a_stale_ack_creates_no_follow_up_and_a_repeated_ack_creates_no_second",
        "test_a_group_runs_its_callback_once_with_results_in_member_order",
        "test_a_group_without_then_waits_for_the_member_results_in_order",
        "test_members_completing_at_once_enqueue_the_callback_exactly_once",
        "test_a_dead_step_stops_the_chain",
        "test_a_chain_moves_between_queues",
        "test_flows_enqueue_and_wait_from_asyncio",
        "test_a_full_queue_refuses_the_whole_group",
        "test_prune_deletes_finished_flows_and_keeps_running_ones",
        "test_a_flow_enqueued_in_a_callers_transaction_exists_only_if_it_commits",
        "test_typed_results_cross_steps_and_come_back_typed",
    ], _NO_FLOWS),
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
