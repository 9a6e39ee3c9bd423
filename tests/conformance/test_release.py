"""Release.

SPEC "Semantics / Release": a holder can give a job back (optionally delayed) without it
counting as a failure: the attempt it used is given back too. ``release`` returns the
job's new state: ``available``, or ``scheduled`` with a delay.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import leaseq
from tests.conformance._util import assert_between, take, utcnow
from tests.helpers import wait_for


def test_release_gives_the_attempt_back(q):
    job_id = q.enqueue("q").id
    first = take(q, expect=job_id)
    assert q.release(first) == "available"
    info = q.get(job_id)
    assert (info.state, info.attempts, info.lease_until) == ("available", 0, None)
    second = take(q, expect=job_id)
    assert second.attempts == first.attempts == 1
    assert second.lease_token != first.lease_token


def test_release_is_not_a_failure(q):
    job_id = q.enqueue("q", max_attempts=1).id
    for _ in range(3):
        assert q.release(take(q, expect=job_id)) == "available"
    info = q.get(job_id)
    assert (info.state, info.error) == ("available", None)
    assert q.nack(take(q, expect=job_id), "real failure") == "dead"


def test_release_with_a_delay_schedules_the_job(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    before = utcnow()
    assert q.release(job, delay=0.3) == "scheduled"
    after = utcnow()
    info = q.get(job_id)
    assert (info.state, info.attempts) == ("scheduled", 0)
    assert_between(info.available_at, before + timedelta(seconds=0.3),
                   after + timedelta(seconds=0.3))
    assert q.dequeue("q") == []
    again = wait_for(lambda: q.dequeue("q"), timeout=5, message="the released job")
    assert [(j.id, j.attempts) for j in again] == [(job_id, 1)]


def test_release_delay_may_be_a_timedelta(q):
    job_id = q.enqueue("q").id
    assert q.release(take(q, expect=job_id), delay=timedelta(minutes=1)) == "scheduled"
    assert q.get(job_id).state == "scheduled"


def test_release_gives_back_only_its_own_attempt(q):
    job_id = q.enqueue("q").id
    q.nack(take(q, expect=job_id), "first failure", delay=0)
    assert q.release(take(q, expect=job_id)) == "available"
    assert q.get(job_id).attempts == 1
    assert take(q, expect=job_id).attempts == 2


def test_release_may_carry_a_note(q):
    """A release may say why (the worker's hand-back of a job of an unknown task): the
    note is stored as the last error and its detail, and the release is no failure."""
    job_id = q.enqueue("q", max_attempts=1).id
    note = {"type": "UnknownTask", "message": "no task 'x' here", "first_seen": "then"}
    assert q.release(take(q, expect=job_id), delay=0.2, error=note) == "scheduled"
    info = q.get(job_id)
    assert (info.state, info.attempts, info.failed_at) == ("scheduled", 0, None)
    assert info.error == "no task 'x' here"
    assert info.error_detail == note
    assert info.releases == 1


def test_release_without_a_note_keeps_the_last_error(q):
    job_id = q.enqueue("q").id
    assert q.release(take(q, expect=job_id), error={"message": "first", "n": 1}) == "available"
    assert q.release(take(q, expect=job_id)) == "available"
    info = q.get(job_id)
    assert (info.error, info.error_detail) == ("first", {"message": "first", "n": 1})
    assert q.nack(take(q, expect=job_id), "real failure") == "scheduled"
    assert q.get(job_id).error_detail == {"message": "real failure"}


def test_async_release_carries_a_note(q, url, prefix):
    async def main():
        async with leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None) as aq:
            job_id = (await aq.enqueue("q")).id
            [job] = await aq.dequeue("q", limit=1)
            assert job.id == job_id
            assert await aq.release(job, error="handed back") == "available"
            return await aq.get(job_id)

    info = asyncio.run(main())
    assert (info.error, info.error_detail) == ("handed back", {"message": "handed back"})
