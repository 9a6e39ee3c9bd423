"""Fixtures derived from tests/conftest.py's ``q``: more clients on the same tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import leaseq

SMALL_CAP = 1000


@pytest.fixture
def small_q(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    """A second client on ``q``'s tables whose payload cap is ``SMALL_CAP`` bytes."""
    queue = leaseq.connect(url, table_prefix=prefix, max_payload_bytes=SMALL_CAP,
                           reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()
