"""Delays and times.

SPEC "Semantics / Delays": ``delay=`` seconds or ``run_at=`` datetime; all times are the
database's clock, stored in UTC. A delayed job is ``scheduled`` (due later) and is not
dequeued before it is due; once due it is ``available`` and dequeued. Every time leaseq
hands back is an aware UTC datetime.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from tests.conformance._util import SLACK, assert_between, assert_utc, take, utcnow
from tests.helpers import wait_for

MS = timedelta(milliseconds=1)


def test_every_time_handed_back_is_aware_utc(q):
    west = timezone(timedelta(hours=-7))
    job_id = q.enqueue("q", run_at=datetime.now(west) - timedelta(seconds=1)).id
    waiting = q.get(job_id)
    assert_utc(waiting.created_at)
    assert_utc(waiting.available_at)
    job = take(q, expect=job_id)
    assert_utc(job.created_at)
    assert_utc(job.lease_until)
    assert_utc(q.heartbeat(job, extend=5))
    running = q.get(job_id)
    for value in (running.created_at, running.available_at, running.lease_until,
                  running.started_at):
        assert_utc(value)
    q.ack(job)
    done = q.get(job_id)
    for value in (done.created_at, done.started_at, done.finished_at):
        assert_utc(value)


def test_a_new_job_is_created_and_due_now(q):
    before = utcnow()
    job_id = q.enqueue("q").id
    after = utcnow()
    info = q.get(job_id)
    assert_between(info.created_at, before, after)
    assert_between(info.available_at, before, after)
    assert info.state == "available"


def test_delayed_job_is_scheduled_and_not_dequeued_before_it_is_due(q):
    start = time.monotonic()
    before = utcnow()
    job_id = q.enqueue("q", delay=0.3).id
    after = utcnow()
    info = q.get(job_id)
    assert info.state == "scheduled"
    assert_between(info.available_at, before + timedelta(seconds=0.3),
                   after + timedelta(seconds=0.3))
    assert q.dequeue("q") == []
    jobs = wait_for(lambda: q.dequeue("q"), timeout=5, message="the delayed job")
    assert time.monotonic() - start >= 0.3 - SLACK / 3
    assert [j.id for j in jobs] == [job_id]


def test_delay_accepts_a_timedelta(q):
    before = utcnow()
    job_id = q.enqueue("q", delay=timedelta(minutes=1)).id
    after = utcnow()
    info = q.get(job_id)
    assert info.state == "scheduled"
    assert_between(info.available_at, before + timedelta(minutes=1), after + timedelta(minutes=1))


def test_run_at_in_the_future_is_scheduled_until_then(q):
    run_at = utcnow() + timedelta(seconds=0.3)
    job_id = q.enqueue("q", run_at=run_at).id
    info = q.get(job_id)
    assert info.state == "scheduled"
    assert abs(info.available_at - run_at) <= MS
    assert (q.stats()["q"].scheduled, q.stats()["q"].available) == (1, 0)
    assert q.dequeue("q") == []
    # Due without anyone touching it: get and stats see it turn available.
    wait_for(lambda: q.get(job_id).state == "available", timeout=5, message="due job")
    assert utcnow() >= run_at - timedelta(seconds=SLACK / 3)
    assert (q.stats()["q"].scheduled, q.stats()["q"].available) == (0, 1)
    take(q, expect=job_id)


def test_run_at_in_another_timezone_is_the_same_instant_in_utc(q):
    india = timezone(timedelta(hours=5, minutes=30))
    run_at = datetime.now(india) + timedelta(hours=1)
    info = q.get(q.enqueue("q", run_at=run_at).id)
    assert_utc(info.available_at)
    assert abs(info.available_at - run_at) <= MS
    assert info.state == "scheduled"


def test_run_at_in_the_past_is_available_now(q):
    job_id = q.enqueue("q", run_at=utcnow() - timedelta(hours=1)).id
    assert q.get(job_id).state == "available"
    take(q, expect=job_id)
