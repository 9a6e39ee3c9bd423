"""Racing producers in separate OS processes, each creating queues of its own, against
``max_queues``: however the enqueues interleave, the database never holds more queues
than the cap, it is filled to it, and a refused enqueue wrote nothing."""

from __future__ import annotations

import leaseq
from tests import _proc_workers as workers
from tests.test_concurrency import backend, race  # noqa: F401  (fixture)

RACERS = 6
ROUNDS = 4
CAP = 9


def test_racing_producers_never_exceed_max_queues(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    q.enqueue("first")
    q.configure_server(max_queues=CAP)
    replies = race(workers.race_new_queues, "queues", lambda i: (url, prefix, i, ROUNDS),
                   racers=RACERS, replies=RACERS * ROUNDS)
    written = [name for names, _ in replies for name in names]
    refused = sum(full for _, full in replies)
    queues = set(q.stats())
    assert queues == {"first", *written}, (queues, written)
    # 6 racers x 4 rounds asked for 36 queues: the cap filled (a last batch of two may
    # not fit a last free slot) and the rest were refused.
    assert CAP - 1 <= len(queues) <= CAP, queues
    assert refused > 0
    assert q.server_config().queues == len(queues)


def test_racing_flows_never_exceed_max_queues(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    """Chains whose later steps name new queues, started at once: the queues counted
    (reserved for the later steps before any job reaches them) never pass the cap, and a
    refused chain wrote nothing."""
    q.enqueue("first")
    q.configure_server(max_queues=CAP)
    replies = race(workers.race_new_flow_queues, "flows",
                   lambda i: (url, prefix, i, ROUNDS), racers=RACERS, replies=RACERS * ROUNDS)
    admitted = [name for names, _ in replies for name in names]
    refused = sum(full for _, full in replies)
    assert len(admitted) == CAP - 1, admitted  # each chain reserves exactly one queue
    assert refused == RACERS * ROUNDS - (CAP - 1)
    assert q.server_config().queues == CAP
    # Only the admitted chains' first steps were written.
    assert q.stats()["first"].available == 1 + len(admitted)
    assert set(q.stats()) == {"first"}
