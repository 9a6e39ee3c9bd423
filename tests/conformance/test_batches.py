"""Batch completion and renewal keep per-job fencing (SPEC "Never concurrent").

``ack_many`` completes every job still held under its token and leaves stale ones
untouched; ``heartbeat_many`` extends the held leases and reports the rest as values.
"""

from __future__ import annotations

import time

import leaseq


def test_ack_many_completes_held_jobs_and_refuses_stale_ones(q: leaseq.Queue) -> None:
    q.enqueue_many([{"queue": "q", "payload": i} for i in range(4)])
    old = sorted(q.dequeue("q", limit=4, lease=0.3), key=lambda j: j.id)
    time.sleep(0.4)
    assert q.reclaim() == 4
    new = sorted(q.dequeue("q", limit=4), key=lambda j: j.id)
    done = q.ack_many([old[0], (old[1], {"x": 1}), new[2], (new[3], {"r": 3})])
    assert done == [False, False, True, True]
    for stale in old[:2]:  # untouched: still running under the new holder
        info = q.get(stale.id)
        assert (info.state, info.result) == ("running", None)
    assert q.get(new[2].id).state == "completed"
    assert q.get(new[3].id).result == {"r": 3}
    assert q.ack_many(new[:2]) == [True, True]
    assert q.stats()["q"].completed == 4


def test_ack_many_of_nothing_is_nothing(q: leaseq.Queue) -> None:
    assert q.ack_many([]) == []
    assert q.heartbeat_many([]) == []


def test_heartbeat_many_extends_held_leases_and_reports_the_rest(q: leaseq.Queue) -> None:
    q.enqueue_many([{"queue": "q", "payload": i} for i in range(3)])
    a, b, c = q.dequeue("q", limit=3, lease=30)
    q.ack(b)
    assert q.cancel(c.id) == "running"
    before = q.get(a.id).lease_until
    out = q.heartbeat_many([a, b, c], extend=120)
    assert isinstance(out[0], type(before)) and before is not None and out[0] > before
    assert isinstance(out[1], leaseq.LeaseLost)
    assert isinstance(out[2], leaseq.JobCancelled)
    assert q.get(a.id).lease_until == out[0]
