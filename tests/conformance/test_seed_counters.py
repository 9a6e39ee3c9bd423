"""Per-job counters and times (issue 11, item 5; seed 004 stats-job).

``JobInfo`` counts ``reserves`` (leases handed out), ``timeouts`` (leases that ran out and
were reclaimed), ``releases``, ``buries`` (times it went dead) and ``kicks`` (times it came
back from dead), and keeps ``failed_at`` (last failure) and ``updated_at`` (last state
change); history rows keep them all. ``available_at`` is set for every live job.
"""

from __future__ import annotations

import time

from tests.conformance._util import assert_between, take, utcnow


def _counts(info):
    return (info.reserves, info.timeouts, info.releases, info.buries, info.kicks)


def test_a_fresh_job_has_zero_counters_and_was_updated_when_created(q):
    info = q.get(q.enqueue("c").id)
    assert _counts(info) == (0, 0, 0, 0, 0)
    assert info.failed_at is None
    assert info.updated_at == info.created_at
    assert info.available_at is not None


def test_every_transition_counts(q):
    job_id = q.enqueue("c", max_attempts=2).id
    job = take(q, "c", expect=job_id)
    q.release(job)
    job = take(q, "c", expect=job_id)
    before = utcnow()
    q.nack(job, "boom", delay=0)
    after = utcnow()
    info = q.get(job_id)
    assert _counts(info) == (2, 0, 1, 0, 0)
    assert_between(info.failed_at, before, after)
    assert_between(info.updated_at, before, after)
    job = take(q, "c", expect=job_id)
    q.bury(job, reason="look at me")
    assert _counts(q.get(job_id)) == (3, 0, 1, 1, 0)
    assert q.kick("c") == 1
    job = take(q, "c", expect=job_id, lease=0.2)
    time.sleep(0.3)
    assert q.reclaim() == 1
    info = q.get(job_id)
    assert _counts(info) == (4, 1, 1, 1, 1)
    assert info.failed_at >= info.created_at
    job = take(q, "c", expect=job_id)
    assert q.nack(job, "again") == "dead"  # 2 attempts since the kick
    q.retry(job_id)
    info = q.get(job_id)
    assert _counts(info) == (5, 1, 1, 2, 2)
    assert info.available_at is not None


def test_a_running_job_has_available_at(q):
    job = take(q, "c", expect=q.enqueue("c").id)
    info = q.get(job.id)
    assert info.state == "running" and info.available_at is not None
    assert info.updated_at >= info.created_at


def test_history_keeps_counters_and_times(q):
    job_id = q.enqueue("h", lease=40).id
    job = take(q, "h", expect=job_id)
    q.nack(job, "first", delay=0)
    job = take(q, "h", expect=job_id)
    q.release(job)
    job = take(q, "h", expect=job_id)
    q.ack(job, result={"ok": True})
    info = q.get(job_id)
    assert info.state == "completed"
    assert _counts(info) == (3, 0, 1, 0, 0)
    assert info.failed_at is not None and info.failed_at <= info.finished_at
    assert info.updated_at == info.finished_at
    assert info.lease == 40
    [listed] = q.jobs("h", state="completed")
    assert _counts(listed) == _counts(info) and listed.failed_at == info.failed_at
