"""Snoozes (``RetryAfter``) and timed pauses (issue 33, item 5).

A snooze puts a held job back after a delay **without using an attempt**: attempts go
back down, ``snoozes`` goes up (not ``releases``; no failure is recorded), and past the
queue's ``max_snoozes`` the job goes dead instead. It is fenced as every holder write: a
stale token is ``LeaseLost`` and changes nothing, the queue's pause included. With
``scope="queue"`` the same write pauses the job's queue until the job is due again, by
the database's clock; that pause only extends one in force and never lifts an indefinite
one, and ``resume`` ends it. ``pause(queue, until=...)`` is the operator's timed pause:
it replaces the pause in force and ends by itself. A queue paused until a time to come
hands out nothing, is not due (``due_now``) and ``next_due`` says when it ends.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta, timezone

import pytest

import leaseq
from tests.conformance._util import assert_between, refusals, take, utcnow
from tests.helpers import wait_for

# Redis keeps a pause's end in whole milliseconds (PXAT), rounded up.
MS = 0.0011


def paused_until(q: leaseq.Queue, queue: str) -> datetime | None:
    return q.stats()[queue].paused_until


def lease_start(job: leaseq.Job) -> datetime:
    """When the claim that leased ``job`` ran, by the database's clock."""
    return job.lease_until - timedelta(seconds=job.lease)


def test_a_snooze_gives_the_attempt_back_and_counts_a_snooze(q):
    job_id = q.enqueue("q", max_attempts=1).id
    for n in range(1, 4):
        job = take(q, expect=job_id)
        assert (job.attempts, job.snoozes) == (1, n - 1)
        assert q.snooze(job, 0) == "available"
        info = q.get(job_id)
        assert (info.state, info.attempts, info.snoozes) == ("available", 0, n)
        # Not a release and not a failure: those counters and times stay as they were.
        assert (info.releases, info.failed_at, info.error) == (0, None, None)
    job = take(q, expect=job_id)
    q.ack(job, result="done")
    done = q.get(job_id)
    assert (done.state, done.attempts, done.snoozes, done.result) == ("completed", 1, 3, "done")


def test_a_snooze_with_a_delay_schedules_the_job(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    before = utcnow()
    assert q.snooze(job, timedelta(seconds=0.5)) == "scheduled"
    after = utcnow()
    info = q.get(job_id)
    assert (info.state, info.attempts, info.snoozes) == ("scheduled", 0, 1)
    assert_between(info.available_at, before + timedelta(seconds=0.5),
                   after + timedelta(seconds=0.5))
    assert q.dequeue("q") == []
    [again] = wait_for(lambda: q.dequeue("q"), timeout=5, message="the snoozed job")
    assert (again.id, again.attempts, again.snoozes) == (job_id, 1, 1)


def test_max_snoozes_sends_the_job_dead_and_a_kick_starts_the_count_again(q):
    assert q.configure_queue("q", max_snoozes=2).max_snoozes == 2
    assert q.queue_config("q").max_snoozes == 2
    job_id = q.enqueue("q", max_attempts=1).id
    assert q.snooze(take(q, expect=job_id), 0) == "available"
    assert q.snooze(take(q, expect=job_id), 0) == "available"
    assert q.snooze(take(q, expect=job_id), 0) == "dead"
    info = q.get(job_id)
    assert (info.state, info.snoozes, info.buries) == ("dead", 2, 1)
    assert "snoozed 2 times" in (info.error or "") and "max_snoozes=2" in (info.error or "")
    assert q.kick("q") == 1
    assert q.get(job_id).snoozes == 0
    assert q.snooze(take(q, expect=job_id), 0) == "available"
    q.configure_queue("q", max_snoozes=0)  # 0: the first snooze is one too many
    assert q.snooze(take(q, expect=job_id), 0) == "dead"
    q.retry(job_id)  # retry of a dead job is a kick: fresh snoozes too
    assert q.get(job_id).snoozes == 0
    assert q.configure_queue("q", max_snoozes=None).max_snoozes is None


def test_bad_max_snoozes_are_refused(q):
    cases = {repr(bad): (lambda bad=bad: q.configure_queue("q", max_snoozes=bad))
             for bad in (-1, 1.5, True, "3")}
    assert refusals(cases, leaseq.InvalidArgument, lambda: q.queue_configs()) == {}


def test_a_stale_snooze_is_lease_lost_and_changes_nothing(q):
    job_id = q.enqueue("q").id
    first = take(q, expect=job_id)
    assert q.release(first) == "available"  # this lease ended otherwise than by a snooze
    second = take(q, expect=job_id)
    for scope in ("job", "queue"):
        with pytest.raises(leaseq.LeaseLost):
            q.snooze(first, 5, scope=scope)
    info = q.get(job_id)
    assert (info.state, info.attempts, info.snoozes) == ("running", 1, 0)
    assert q.paused() == [] and not q.stats()["q"].paused  # the queue was not paused
    q.ack(second)
    with pytest.raises(leaseq.LeaseLost):
        q.snooze(second, 0)
    assert q.get(job_id).state == "completed"


def test_a_repeated_snooze_returns_the_first_result_and_changes_nothing(q):
    """Design §62: the lease a snooze ended may repeat it (its reply lost) while that
    lease is the job's last ended one, and gets the first result: no second snooze is
    counted and the pause is not written again."""
    job_id = q.enqueue("q").id
    first = take(q, expect=job_id)
    assert q.snooze(first, 60, scope="queue") == "scheduled"
    q.resume("q")
    assert q.snooze(first, 60, scope="queue") == "scheduled"
    info = q.get(job_id)
    assert (info.state, info.attempts, info.snoozes) == ("scheduled", 0, 1)
    assert q.paused() == []
    with pytest.raises(leaseq.LeaseLost):  # the same lease, another verb: not a repeat
        q.release(first)


def test_a_snooze_of_a_job_asked_to_cancel_cancels_it(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    assert q.cancel(job_id) == "running"
    assert q.snooze(job, 0) == "cancelled"
    assert q.get(job_id).state == "cancelled"


def test_bad_snooze_arguments_are_refused_and_change_nothing(q):
    job = take(q, expect=q.enqueue("q").id)
    cases = {
        "negative delay": lambda: q.snooze(job, -1),
        "NaN delay": lambda: q.snooze(job, math.nan),
        "partition scope (not yet)": lambda: q.snooze(job, 1, scope="partition"),
        "unknown scope": lambda: q.snooze(job, 1, scope="tenant"),  # type: ignore[arg-type]
    }
    assert refusals(cases, leaseq.InvalidArgument, lambda: q.get(job.id)) == {}
    assert q.paused() == []


def test_a_queue_snooze_holds_the_queue_until_then(q):
    first = q.enqueue("a", {"n": 1}).id
    second = q.enqueue("a", {"n": 2}).id
    other = q.enqueue("b", {"n": 3}).id
    job = take(q, "a", expect=first)
    before = utcnow()
    assert q.snooze(job, 1, scope="queue") == "scheduled"
    after = utcnow()
    # Held: no claim takes a job of the queue; other queues and enqueues go on.
    assert [j.id for j in q.dequeue(["a", "b"], limit=10)] == [other]
    assert q.enqueue("a", {"n": 4}).created
    stats = q.stats()["a"]
    assert stats.paused and q.paused() == ["a"]
    assert_between(stats.paused_until, before + timedelta(seconds=1),
                   after + timedelta(seconds=1 + MS))
    assert not q._due_now(["a"])
    wait = q.next_due(["a"])
    assert wait is not None and 0 < wait <= 1 + MS, wait
    assert q.queue_configs().get("a") is not None  # the pause gave it a settings row
    # It ends by itself, by the database's clock.
    jobs = wait_for(lambda: q.dequeue("a", limit=10), timeout=5, message="the pause's end")
    assert jobs[0].id == second
    assert min(lease_start(j) for j in jobs) >= stats.paused_until
    assert not q.stats()["a"].paused and q.stats()["a"].paused_until is None
    assert q.paused() == []


def test_a_queue_snooze_only_extends_a_timed_pause(q):
    job_id = q.enqueue("a").id
    job = take(q, "a", expect=job_id)
    q.pause("a", until=60)
    longer = paused_until(q, "a")
    assert longer is not None
    assert q.snooze(job, 1, scope="queue") == "scheduled"
    assert paused_until(q, "a") == longer  # a shorter pause leaves the later end
    q.resume("a")
    job = take(q, "a", expect=q.enqueue("a").id)
    q.pause("a", until=1)
    before = utcnow()
    q.snooze(job, 60, scope="queue")
    assert_between(paused_until(q, "a"), before + timedelta(seconds=60),
                   utcnow() + timedelta(seconds=60 + MS))


def test_a_queue_snooze_never_lifts_an_indefinite_pause(q):
    job = take(q, "a", expect=q.enqueue("a").id)
    q.pause("a")
    assert q.snooze(job, 0.1, scope="queue") == "scheduled"
    stats = q.stats()["a"]
    assert stats.paused and stats.paused_until is None  # still paused until resume
    assert q.next_due(["a"]) is None and q.paused() == ["a"]
    q.resume("a")
    [again] = wait_for(lambda: q.dequeue("a"), timeout=5, message="the job after resume")
    assert again.id == job.id


def test_resume_ends_a_handler_pause(q):
    job = take(q, "a", expect=q.enqueue("a").id)
    waiting = q.enqueue("a").id
    q.snooze(job, 60, scope="queue")
    assert q.paused() == ["a"]
    q.resume("a")
    assert q.paused() == [] and paused_until(q, "a") is None
    assert take(q, "a").id == waiting


def test_a_timed_pause_ends_by_itself(q):
    job_id = q.enqueue("a").id
    end = utcnow() + timedelta(seconds=1)
    q.pause("a", until=end)
    assert q.paused() == ["a"] and q.dequeue("a") == []
    stored = paused_until(q, "a")
    assert stored is not None and abs((stored - end).total_seconds()) <= MS
    assert not q._due_now(["a"])
    [job] = wait_for(lambda: q.dequeue("a"), timeout=5, message="the timed pause's end")
    assert job.id == job_id and lease_start(job) >= stored
    assert q.paused() == []


def test_pause_with_an_end_replaces_the_pause_in_force(q):
    q.pause("a")
    before = utcnow()
    q.pause("a", until=timedelta(minutes=5))  # indefinite -> timed: the operator's word
    assert_between(paused_until(q, "a"), before + timedelta(minutes=5),
                   utcnow() + timedelta(minutes=5, seconds=MS))
    q.pause("a", until=30)  # and an earlier end than the one in force
    assert paused_until(q, "a") < before + timedelta(minutes=1)  # type: ignore[operator]
    q.pause("a")  # timed -> indefinite
    assert q.stats()["a"].paused and paused_until(q, "a") is None
    q.resume("a")
    assert not q.stats()["a"].paused


def test_bad_pause_ends_are_refused_and_store_nothing(q):
    naive = datetime.now() + timedelta(minutes=1)  # no timezone: the case refused
    cases = {repr(bad): (lambda bad=bad: q.pause("a", until=bad))
             for bad in (naive, utcnow() - timedelta(seconds=1), 0, -5, math.nan, math.inf,
                         True, "30s", timedelta(0), 20 * 365 * 86400)}
    assert refusals(cases, leaseq.InvalidArgument, lambda: (q.paused(), q.stats())) == {}
    assert "a" not in q.stats()


def test_an_aware_datetime_in_another_zone_is_the_same_instant(q):
    end = datetime.now(timezone(timedelta(hours=5))) + timedelta(minutes=1)
    q.pause("a", until=end)
    stored = paused_until(q, "a")
    assert stored is not None and abs((stored - end).total_seconds()) <= MS
    assert stored.utcoffset() == timedelta(0)


def test_async_snooze_and_timed_pause(q, url, prefix):
    job_id = q.enqueue("a", max_attempts=1).id

    async def body(aq: leaseq.AsyncQueue) -> None:
        [job] = await aq.dequeue("a", worker_id="aw")
        assert await aq.snooze(job, 60, scope="queue") == "scheduled"
        assert await aq.paused() == ["a"]
        await aq.resume("a")
        await aq.pause("a", until=timedelta(seconds=30))
        assert (await aq.stats())["a"].paused_until is not None

    asyncio.run(_run(url, prefix, body))
    info = q.get(job_id)
    assert (info.state, info.attempts, info.snoozes) == ("scheduled", 0, 1)


async def _run(url, prefix, body):
    async with leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None) as aq:
        await body(aq)
