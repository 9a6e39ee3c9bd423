"""Reclaim of expired leases.

SPEC "Semantics / Leases and visibility timeout": an expired lease is reclaimed; the
attempt stays counted (so a poison pill cannot crash workers forever): the job is
available again, or dead with error "lease expired" when its attempts are used up, or
cancelled when a cancel was requested. The old holder's token is stale afterwards.
Reclaim runs as an API (``reclaim(limit=...)``) and inline in ``dequeue`` (at most once
per ``reclaim_interval``; 0 means every dequeue, None never) — no external cron.
"""

from __future__ import annotations

import time

import leaseq
from tests.conformance._util import refusals, take

LEASE, PAST_LEASE = 0.2, 0.3


def test_expired_lease_is_reclaimed_and_the_attempt_stays_counted(q):
    job_id = q.enqueue("q", max_attempts=2).id
    old = take(q, expect=job_id, lease=LEASE)
    time.sleep(PAST_LEASE)
    assert q.reclaim() == 1
    info = q.get(job_id)
    assert (info.state, info.attempts, info.lease_until) == ("available", 1, None)
    new = take(q, expect=job_id, worker_id="w2")
    assert new.attempts == 2 and new.lease_token != old.lease_token
    # The old holder is fenced off; the new one is not disturbed.
    before = q.get(job_id)
    cases = {"ack": lambda: q.ack(old), "nack": lambda: q.nack(old, "late", delay=0),
             "heartbeat": lambda: q.heartbeat(old)}
    assert refusals(cases, leaseq.LeaseLost, unchanged=lambda: q.get(job_id)) == {}
    assert q.get(job_id) == before
    q.ack(new)
    assert q.get(job_id).state == "completed"


def test_unexpired_leases_are_left_alone(q):
    job_id = q.enqueue("q").id
    take(q, expect=job_id, lease=30)
    before = q.get(job_id)
    assert q.reclaim() == 0
    assert q.get(job_id) == before


def test_reclaim_with_nothing_running_returns_zero(q):
    q.enqueue("q")
    assert q.reclaim() == 0


def test_expired_lease_on_the_last_attempt_makes_the_job_dead(q):
    job_id = q.enqueue("q", max_attempts=1).id
    take(q, expect=job_id, lease=LEASE)
    time.sleep(PAST_LEASE)
    assert q.reclaim() == 1
    info = q.get(job_id)
    assert (info.state, info.error, info.attempts) == ("dead", "lease expired", 1)
    assert info.finished_at is None
    assert q.dequeue("q") == []


def test_expired_lease_of_a_cancelled_job_records_it_cancelled(q):
    job_id = q.enqueue("q").id
    take(q, expect=job_id, lease=LEASE)
    assert q.cancel(job_id) == "running"
    time.sleep(PAST_LEASE)
    assert q.reclaim() == 1
    info = q.get(job_id)
    assert info.state == "cancelled" and info.finished_at is not None
    assert q.dequeue("q") == []


def test_reclaim_covers_every_queue_up_to_limit(q):
    ids = [q.enqueue("a").id, q.enqueue("b").id, q.enqueue("c").id]
    assert len(q.dequeue(["a", "b", "c"], lease=LEASE, limit=3)) == 3
    time.sleep(PAST_LEASE)
    assert q.reclaim(limit=2) == 2
    assert q.reclaim(limit=2) == 1
    assert [q.get(i).state for i in ids] == ["available"] * 3


def test_inline_reclaim_redelivers_an_expired_job_from_dequeue_alone(q, url, prefix):
    job_id = q.enqueue("q").id
    old = take(q, expect=job_id, lease=LEASE)
    time.sleep(PAST_LEASE)
    assert q.dequeue("q") == []  # the q fixture has reclaim_interval=None: no inline reclaim
    assert q.get(job_id).state == "running"
    with leaseq.connect(url, table_prefix=prefix, reclaim_interval=0) as inline:
        jobs = inline.dequeue("q", worker_id="w2")
    assert [(j.id, j.attempts, j.worker_id) for j in jobs] == [(job_id, 2, "w2")]
    before = q.get(job_id)
    assert refusals({"ack": lambda: q.ack(old)}, leaseq.LeaseLost) == {}
    assert q.get(job_id) == before
    q.ack(jobs[0])
    assert q.get(job_id).state == "completed"
