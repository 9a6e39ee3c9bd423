"""Per-job leases and touch limits (issue 11, items 3 and 4; seed 004 TTR, MaxTouches,
MaxTouchDuration, MinTouchInterval).

A job may carry its own lease (``enqueue(..., lease=)``); ``dequeue(lease=None)`` uses it,
else the queue's ``default_lease``, else the client's; every lease and extension is capped
by the queue's ``max_lease``. A heartbeat beyond ``max_touches`` extensions of one lease or
``max_touch_duration`` after the lease began raises ``TouchLimitExceeded`` and leaves the
lease to run out; one within ``min_touch_interval`` of the previous extension succeeds
without a write.
"""

from __future__ import annotations

import time

import pytest

import leaseq
from tests.conformance._util import take, utcnow


def _lease_of(job: leaseq.Job) -> float:
    return job.lease


def _remaining(job: leaseq.Job, until=None) -> float:
    return ((until or job.lease_until) - utcnow()).total_seconds()


def test_a_job_keeps_its_own_lease(q):
    job_id = q.enqueue("l", lease=120).id
    assert q.get(job_id).lease == 120
    job = take(q, "l", expect=job_id)
    assert job.lease == 120
    assert 115 < _remaining(job) <= 121
    # An explicit lease at dequeue wins.
    q.release(job)
    job = take(q, "l", expect=job_id, lease=10)
    assert job.lease == 10 and _remaining(job) <= 11


def test_lease_falls_back_to_the_queue_default_then_the_client(q):
    q.configure_queue("d", default_lease=77)
    own = q.enqueue("d", lease=5).id
    plain = q.enqueue("d").id
    elsewhere = q.enqueue("e").id
    jobs = {j.id: j for j in q.dequeue(["d", "e"], worker_id="w", limit=3)}
    assert jobs[own].lease == 5
    assert jobs[plain].lease == 77
    assert jobs[elsewhere].lease == 30  # Settings.lease


def test_max_lease_caps_every_lease_and_extension(q):
    q.configure_queue("c", max_lease=20)
    own = q.enqueue("c", lease=500).id
    plain = q.enqueue("c").id
    jobs = {j.id: j for j in q.dequeue("c", worker_id="w", limit=2, lease=None)}
    assert jobs[own].lease == 20 and jobs[plain].lease == 20
    assert _remaining(jobs[own]) <= 21
    explicit = take(q, "c", expect=q.enqueue("c").id, lease=999)
    assert explicit.lease == 20
    until = q.heartbeat(explicit, extend=999)
    assert _remaining(explicit, until) <= 21
    [state] = q.heartbeat_many([jobs[own]], extend=999)
    assert _remaining(jobs[own], state) <= 21


def test_max_touches_refuses_the_touch_beyond_it(q):
    q.configure_queue("t", max_touches=2)
    job = take(q, "t", expect=q.enqueue("t").id)
    q.heartbeat(job)
    last = q.heartbeat(job)
    with pytest.raises(leaseq.TouchLimitExceeded):
        q.heartbeat(job)
    assert q.get(job.id).lease_until == last  # nothing changed
    [state] = q.heartbeat_many([job])
    assert isinstance(state, leaseq.TouchLimitExceeded)
    assert isinstance(leaseq.TouchLimitExceeded("x"), leaseq.LeaseqError)
    # The holder still owns the job until the lease runs out: it may finish it.
    q.ack(job)
    assert q.get(job.id).state == "completed"


def test_touches_count_per_lease(q):
    q.configure_queue("t", max_touches=1)
    job = take(q, "t", expect=q.enqueue("t").id)
    q.heartbeat(job)
    q.release(job)
    job = take(q, "t", expect=job.id)
    q.heartbeat(job)  # a fresh lease, a fresh count


def test_max_touch_duration_refuses_late_touches(q):
    q.configure_queue("t", max_touch_duration=0.3)
    job = take(q, "t", expect=q.enqueue("t").id)
    q.heartbeat(job)
    time.sleep(0.45)
    with pytest.raises(leaseq.TouchLimitExceeded, match="max_touch_duration"):
        q.heartbeat(job)
    [state] = q.heartbeat_many([job])
    assert isinstance(state, leaseq.TouchLimitExceeded)


def test_a_touch_within_min_touch_interval_writes_nothing(q):
    q.configure_queue("t", min_touch_interval=60, max_touches=1)
    job = take(q, "t", expect=q.enqueue("t").id, lease=30)
    until = q.heartbeat(job, extend=300)
    assert until == job.lease_until == q.get(job.id).lease_until  # no write
    # Not counted as a touch either: max_touches=1 would refuse the second otherwise.
    assert q.heartbeat(job, extend=300) == job.lease_until
    [state] = q.heartbeat_many([job], extend=300)
    assert state == job.lease_until


def test_touch_limits_leave_other_queues_alone(q):
    q.configure_queue("t", max_touches=0)
    job = take(q, "free", expect=q.enqueue("free").id)
    for _ in range(3):
        q.heartbeat(job)
    limited = take(q, "t", expect=q.enqueue("t").id)
    with pytest.raises(leaseq.TouchLimitExceeded):
        q.heartbeat(limited)


def test_stale_lease_beats_touch_limit(q):
    q.configure_queue("t", max_touches=0)
    job = take(q, "t", expect=q.enqueue("t").id)
    q.ack(job)
    with pytest.raises(leaseq.LeaseLost):
        q.heartbeat(job)
