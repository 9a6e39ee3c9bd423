"""Racing producers in separate OS processes, each creating queues of its own, against
``max_queues``: however the enqueues interleave, the database never holds more queues
than the cap, it is filled to it, and a refused enqueue wrote nothing."""

from __future__ import annotations

import leaseq
from tests import _proc_workers as workers
from tests.test_concurrency import CTX, backend, spawned, take  # noqa: F401  (fixture)

RACERS = 6
ROUNDS = 4
CAP = 9


def test_racing_producers_never_exceed_max_queues(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    q.enqueue("first")
    q.configure_server(max_queues=CAP)
    barrier, results = CTX.Barrier(RACERS), CTX.Queue()
    procs = [CTX.Process(target=workers.race_new_queues, name=f"queues-{i}",
                         args=(url, prefix, i, ROUNDS, barrier, results))
             for i in range(RACERS)]
    written: list[str] = []
    refused = 0
    with spawned(*procs):
        for _ in range(RACERS * ROUNDS):
            _, _, names, full = take(results, "queues", timeout=60)
            written += names
            refused += full
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
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
    barrier, results = CTX.Barrier(RACERS), CTX.Queue()
    procs = [CTX.Process(target=workers.race_new_flow_queues, name=f"flows-{i}",
                         args=(url, prefix, i, ROUNDS, barrier, results))
             for i in range(RACERS)]
    admitted: list[str] = []
    refused = 0
    with spawned(*procs):
        for _ in range(RACERS * ROUNDS):
            _, _, names, full = take(results, "flows", timeout=60)
            admitted += names
            refused += full
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    assert len(admitted) == CAP - 1, admitted  # each chain reserves exactly one queue
    assert refused == RACERS * ROUNDS - (CAP - 1)
    assert q.server_config().queues == CAP
    # Only the admitted chains' first steps were written.
    assert q.stats()["first"].available == 1 + len(admitted)
    assert set(q.stats()) == {"first"}
