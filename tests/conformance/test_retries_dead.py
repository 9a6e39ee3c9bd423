"""Retries, backoff, dead letters, bury.

SPEC "Semantics / Retries": ``nack`` reschedules with exponential backoff and jitter,
``min(cap, base * 2**(attempt-1)) * uniform(1-jitter, 1+jitter)`` (default
``Backoff()``: 1 s, 10 % jitter; per call ``backoff=``; per client ``connect(backoff=)``),
or after an explicit ``delay``. When ``attempts >= max_attempts`` the job goes to the
dead-letter state instead. "Dead letters, bury and kick": dead or buried jobs stay live
and inspectable with their last error (kick/retry/discard: test_operator_verbs.py).
"""

from __future__ import annotations

from datetime import timedelta

import leaseq
from tests.conformance._util import assert_between, refusals, take, utcnow
from tests.helpers import wait_for


def _nack_window(q, job, **kwargs):
    """nack ``job``; return (state, available_at, before, after)."""
    before = utcnow()
    state = q.nack(job, "failed", **kwargs)
    after = utcnow()
    return state, q.get(job.id).available_at, before, after


def _seconds(s):
    return timedelta(seconds=s)


def test_nack_with_a_delay_reschedules_the_job_after_it(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    state, available_at, before, after = _nack_window(q, job, delay=0.3)
    assert state == "scheduled"
    assert_between(available_at, before + _seconds(0.3), after + _seconds(0.3))
    info = q.get(job_id)
    assert (info.state, info.attempts, info.error, info.lease_until) == (
        "scheduled", 1, "failed", None)
    assert q.dequeue("q") == []
    again = wait_for(lambda: q.dequeue("q"), timeout=5, message="the retried job")
    assert [(j.id, j.attempts) for j in again] == [(job_id, 2)]


def test_nack_with_zero_delay_makes_the_job_available_at_once(q):
    job_id = q.enqueue("q").id
    assert q.nack(take(q, expect=job_id), "x", delay=0) == "available"
    assert q.get(job_id).state == "available"
    assert take(q, expect=job_id).attempts == 2


def test_nack_delay_may_be_a_timedelta(q):
    job = take(q, expect=q.enqueue("q").id)
    state, available_at, before, after = _nack_window(q, job, delay=timedelta(minutes=2))
    assert state == "scheduled"
    assert_between(available_at, before + timedelta(minutes=2), after + timedelta(minutes=2))


def test_nack_without_delay_uses_the_default_backoff(q):
    job = take(q, expect=q.enqueue("q").id)
    state, available_at, before, after = _nack_window(q, job)
    assert state == "scheduled"
    # Backoff(): base 1 s after the first attempt, jitter 10 %.
    assert_between(available_at, before + _seconds(0.9), after + _seconds(1.1))


def test_nack_backoff_grows_exponentially_with_the_attempt(q):
    backoff = leaseq.Backoff(base=0.4, cap=10, jitter=0)
    job_id = q.enqueue("q").id
    state, available_at, before, after = _nack_window(q, take(q, expect=job_id), backoff=backoff)
    assert state == "scheduled"
    assert_between(available_at, before + _seconds(0.4), after + _seconds(0.4))
    q.retry(job_id)  # due now, so the test need not wait
    second = take(q, expect=job_id)
    assert second.attempts == 2
    _, available_at, before, after = _nack_window(q, second, backoff=backoff)
    assert_between(available_at, before + _seconds(0.8), after + _seconds(0.8))


def test_nack_backoff_is_capped(q):
    backoff = leaseq.Backoff(base=0.4, cap=0.5, jitter=0)
    job_id = q.enqueue("q").id
    q.nack(take(q, expect=job_id), backoff=backoff)
    q.retry(job_id)
    _, available_at, before, after = _nack_window(q, take(q, expect=job_id), backoff=backoff)
    assert_between(available_at, before + _seconds(0.5), after + _seconds(0.5))


def test_client_backoff_setting_is_the_default_for_nack(q, url, prefix):
    backoff = leaseq.Backoff(base=0.3, cap=5, jitter=0)
    with leaseq.connect(url, table_prefix=prefix, backoff=backoff, reclaim_interval=None) as q2:
        job = take(q2, expect=q2.enqueue("q").id)
        _, available_at, before, after = _nack_window(q2, job)
    assert_between(available_at, before + _seconds(0.3), after + _seconds(0.3))


def test_explicit_delay_wins_over_backoff(q):
    job = take(q, expect=q.enqueue("q").id)
    backoff = leaseq.Backoff(base=100, cap=100, jitter=0)
    _, available_at, before, after = _nack_window(q, job, delay=0, backoff=backoff)
    assert_between(available_at, before, after)


def test_nack_on_the_last_attempt_makes_the_job_dead_with_its_error(q):
    job_id = q.enqueue("q", max_attempts=2).id
    assert q.nack(take(q, expect=job_id), "first", delay=0) == "available"
    last = take(q, expect=job_id)
    assert last.attempts == 2
    assert q.nack(last, "second", delay=0) == "dead"
    info = q.get(job_id)
    assert (info.state, info.error, info.attempts, info.max_attempts) == ("dead", "second", 2, 2)
    assert info.lease_until is None and info.finished_at is None
    assert q.dequeue("q") == []


def test_max_attempts_one_goes_dead_on_the_first_nack(q):
    job_id = q.enqueue("q", max_attempts=1).id
    assert q.nack(take(q, expect=job_id), "only chance") == "dead"
    assert (q.get(job_id).state, q.get(job_id).error) == ("dead", "only chance")


def test_nack_error_may_be_an_exception(q):
    job_id = q.enqueue("q").id
    q.nack(take(q, expect=job_id), ValueError("bad value"), delay=0)
    assert q.get(job_id).error == "ValueError: bad value"


def test_nack_without_an_error_keeps_the_last_one(q):
    job_id = q.enqueue("q", max_attempts=2).id
    q.nack(take(q, expect=job_id), "the real cause", delay=0)
    assert q.nack(take(q, expect=job_id)) == "dead"
    assert q.get(job_id).error == "the real cause"


def test_dead_job_is_live_not_history(q):
    job_id = q.enqueue("q", max_attempts=1).id
    q.nack(take(q, expect=job_id), "boom")
    info = q.get(job_id)
    assert info.state == "dead" and info.finished_at is None
    stats = q.stats()["q"]
    assert (stats.dead, stats.completed, stats.cancelled, stats.discarded) == (1, 0, 0, 0)


def test_bury_makes_a_held_job_dead_with_the_reason(q):
    job_id = q.enqueue("q", max_attempts=5).id
    job = take(q, expect=job_id)
    assert q.bury(job, reason="needs a human") is None
    info = q.get(job_id)
    assert (info.state, info.error, info.attempts) == ("dead", "needs a human", 1)
    assert info.lease_until is None and info.finished_at is None
    assert q.dequeue("q") == []


def test_buried_job_token_is_stale(q):
    job = take(q, expect=q.enqueue("q").id)
    q.bury(job, reason="parked")
    cases = {verb: lambda verb=verb: getattr(q, verb)(job)
             for verb in ("ack", "nack", "heartbeat", "release")}
    assert refusals(cases, leaseq.LeaseLost, unchanged=lambda: q.get(job.id)) == {}
    assert q.bury(job, reason="again") is None  # a repeat of the bury: nothing changes
    assert (q.get(job.id).state, q.get(job.id).error) == ("dead", "parked")
