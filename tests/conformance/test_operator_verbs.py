"""Operator verbs: kick, retry, discard, cancel.

SPEC "Semantics / Dead letters, bury and kick": ``kick``/``retry`` make dead jobs available
again with a fresh round of attempts (kick: oldest first, up to ``limit``, one queue;
retry also makes a scheduled job due now); ``discard`` removes a waiting or dead job to
history as ``discarded``. "Cancel": a scheduled or available (or dead) job is cancelled
into history; a running job is flagged, ``cancel`` returns ``running``, the holder's
``heartbeat`` raises ``JobCancelled``, and its ``nack`` or ``release`` records the job as
``cancelled``. ``cancel`` on a finished job returns its state; retry and discard of a job
in the wrong state raise ``JobStateError`` and change nothing (unknown ids:
test_bad_input.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import leaseq
from tests.conformance._util import assert_between, make_dead, refusals, take, utcnow


def _waiting(q, state):
    job_id = q.enqueue("q", delay=60 if state == "scheduled" else 0).id
    assert q.get(job_id).state == state
    return job_id


def _finished(q, state):
    job_id = q.enqueue("q").id
    if state == "completed":
        q.ack(take(q, expect=job_id))
    elif state == "cancelled":
        q.cancel(job_id)
    else:
        q.discard(job_id)
    assert q.get(job_id).state == state
    return job_id


def _snapshot(q, ids):
    return [q.get(i) for i in ids.values()]


# -- kick ------------------------------------------------------------------------------


def test_kick_makes_dead_jobs_available_with_fresh_attempts(q):
    ids = [make_dead(q) for _ in range(2)]
    assert q.kick("q") == 2
    for job_id in ids:
        info = q.get(job_id)
        assert (info.state, info.attempts) == ("available", 0)
    job = take(q, expect=ids[0])
    assert (job.attempts, job.max_attempts) == (1, 1)
    assert q.nack(job, "again") == "dead"  # a fresh round: one attempt, used again


def test_kick_takes_the_oldest_first_up_to_the_limit(q):
    ids = [make_dead(q) for _ in range(3)]
    assert q.kick("q", limit=2) == 2
    assert [q.get(i).state for i in ids] == ["available", "available", "dead"]
    assert q.kick("q", limit=2) == 1
    assert q.get(ids[2]).state == "available"


def test_kick_touches_only_its_queue(q):
    a, b = make_dead(q, "a"), make_dead(q, "b")
    assert q.kick("a") == 1
    assert (q.get(a).state, q.get(b).state) == ("available", "dead")


def test_kick_without_dead_jobs_returns_zero_and_changes_nothing(q):
    waiting = q.enqueue("q").id
    running = take(q, expect=q.enqueue("q", priority=1).id).id
    before = [q.get(waiting), q.get(running)]
    assert q.kick("q") == 0
    assert q.kick("empty") == 0
    assert [q.get(waiting), q.get(running)] == before


# -- retry -----------------------------------------------------------------------------


def test_retry_makes_a_dead_job_available_with_fresh_attempts(q):
    job_id = make_dead(q)
    assert q.retry(job_id) is None
    info = q.get(job_id)
    assert (info.state, info.attempts) == ("available", 0)
    assert take(q, expect=job_id).attempts == 1


def test_retry_makes_a_scheduled_job_due_now(q):
    job_id = q.enqueue("q", delay=60).id
    before = utcnow()
    q.retry(job_id)
    after = utcnow()
    info = q.get(job_id)
    assert (info.state, info.attempts) == ("available", 0)
    assert_between(info.available_at, before, after)
    take(q, expect=job_id)


def test_retry_of_a_scheduled_retry_keeps_its_attempts(q):
    job_id = q.enqueue("q").id
    q.nack(take(q, expect=job_id), "x", delay=60)
    q.retry(job_id)
    assert q.get(job_id).attempts == 1
    assert take(q, expect=job_id).attempts == 2


def test_retry_refuses_jobs_that_are_neither_dead_nor_scheduled(q):
    running = q.enqueue("q").id
    take(q, expect=running)
    ids = {"running": running,
           **{state: _finished(q, state) for state in ("completed", "cancelled", "discarded")},
           "available": q.enqueue("q").id}
    cases = {state: lambda i=i: q.retry(i) for state, i in ids.items()}
    assert refusals(cases, leaseq.JobStateError, unchanged=lambda: _snapshot(q, ids)) == {}
    assert [q.get(i).state for i in ids.values()] == list(ids)


# -- discard ---------------------------------------------------------------------------


def test_discard_moves_a_dead_job_to_history_with_its_error(q):
    job_id = make_dead(q, error="poison")
    before = utcnow()
    assert q.discard(job_id) is None
    after = utcnow()
    info = q.get(job_id)
    assert (info.state, info.error, info.attempts) == ("discarded", "poison", 1)
    assert_between(info.finished_at, before, after)
    stats = q.stats()["q"]
    assert (stats.dead, stats.discarded, stats.failed) == (0, 1, 1)
    assert q.dequeue("q") == []


def test_discard_records_the_reason(q):
    job_id = make_dead(q)
    q.discard(job_id, reason="spam")
    assert q.get(job_id).error == "spam"


def test_discard_keeps_the_last_real_error_beside_its_reason(q):
    """Issue 30: a discard with a reason used to overwrite the error that made the job
    dead. The reason is the error now; the detail keeps the last one under "previous"."""
    try:
        raise ValueError("card declined")
    except ValueError as exc:
        failed = make_dead(q, error=exc)  # type: ignore[arg-type]
    last = q.get(failed).error_detail
    assert last is not None and last["type"] == "ValueError"
    q.discard(failed, reason="refunded by hand")
    info = q.get(failed)
    assert (info.state, info.error) == ("discarded", "refunded by hand")
    assert info.error_detail == {"message": "refunded by hand", "previous": last}
    assert info.error_line == "refunded by hand (last error: ValueError: card declined)"

    text_only = make_dead(q, error="poison")  # an error stored without detail
    q.discard(text_only, reason="spam")
    assert q.get(text_only).error_detail == {"message": "spam",
                                             "previous": {"message": "poison"}}

    never_failed = q.enqueue("q").id
    q.discard(never_failed, reason="not needed")
    assert q.get(never_failed).error_detail == {"message": "not needed"}

    kept = make_dead(q, error="poison")  # no reason: the last error stays as it was
    q.discard(kept)
    assert (q.get(kept).error, q.get(kept).error_detail) == ("poison", {"message": "poison"})


@pytest.mark.parametrize("state", ["scheduled", "available"])
def test_discard_moves_a_waiting_job_to_history(q, state):
    job_id = _waiting(q, state)
    q.discard(job_id)
    info = q.get(job_id)
    assert info.state == "discarded" and info.finished_at is not None
    assert q.dequeue("q") == []


def test_discard_refuses_running_and_finished_jobs(q):
    job = take(q, expect=q.enqueue("q").id)
    ids = {"running": job.id,
           **{state: _finished(q, state) for state in ("completed", "cancelled", "discarded")}}
    cases = {state: lambda i=i: q.discard(i) for state, i in ids.items()}
    assert refusals(cases, leaseq.JobStateError, unchanged=lambda: _snapshot(q, ids)) == {}
    q.ack(job)  # the holder still has it
    assert q.get(job.id).state == "completed"


# -- cancel ----------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["scheduled", "available"])
def test_cancel_moves_a_waiting_job_to_history(q, state):
    job_id = _waiting(q, state)
    before = utcnow()
    assert q.cancel(job_id) == "cancelled"
    after = utcnow()
    info = q.get(job_id)
    assert info.state == "cancelled"
    assert_between(info.finished_at, before, after)
    assert q.stats()["q"].cancelled == 1
    assert q.dequeue("q") == []


def test_cancel_moves_a_dead_job_to_history(q):
    job_id = make_dead(q)
    assert q.cancel(job_id) == "cancelled"
    assert q.get(job_id).state == "cancelled"


def test_cancel_of_a_running_job_flags_it_and_heartbeat_raises_job_cancelled(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    assert q.cancel(job_id) == "running"
    info = q.get(job_id)
    assert (info.state, info.cancel_requested) == ("running", True)
    before = utcnow()
    with pytest.raises(leaseq.JobCancelled):
        q.heartbeat(job, extend=60)
    after = utcnow()
    info = q.get(job_id)
    assert info.state == "running"  # the holder still has it, to give it up
    # The heartbeat extended the lease before reporting the cancel (backends.base).
    assert_between(info.lease_until, before + timedelta(seconds=60), after + timedelta(seconds=60))


def test_cancel_twice_on_a_running_job_stays_running(q):
    job_id = q.enqueue("q").id
    take(q, expect=job_id)
    assert q.cancel(job_id) == "running"
    assert q.cancel(job_id) == "running"
    assert q.get(job_id).state == "running"


@pytest.mark.parametrize("verb", ["nack", "release"])
def test_cancelled_holder_giving_up_records_the_job_cancelled(q, verb):
    for heartbeat_first in (True, False):
        job_id = q.enqueue("q").id
        job = take(q, expect=job_id)
        assert q.cancel(job_id) == "running"
        if heartbeat_first:
            with pytest.raises(leaseq.JobCancelled):
                q.heartbeat(job)
        state = q.nack(job, "stopped", delay=0) if verb == "nack" else q.release(job)
        assert state == "cancelled"
        info = q.get(job_id)
        assert info.state == "cancelled" and info.finished_at is not None
        assert q.dequeue("q") == []
    stats = q.stats()["q"]
    assert (stats.cancelled, stats.available, stats.running) == (2, 0, 0)


def test_cancel_of_a_finished_job_returns_its_state_and_changes_nothing(q):
    for state in ("completed", "cancelled", "discarded"):
        job_id = _finished(q, state)
        before = q.get(job_id)
        assert q.cancel(job_id) == state
        assert q.get(job_id) == before
