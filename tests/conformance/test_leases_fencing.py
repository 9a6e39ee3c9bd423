"""Leases and fencing.

SPEC "Semantics / Never concurrent": every dequeue issues a fresh lease token; ``ack``,
``nack``, ``heartbeat``, ``release`` and ``bury`` must present it; a stale token is refused
with ``LeaseLost`` and changes nothing. A token goes stale when the job is re-delivered,
reclaimed after its lease expired, finished, or dead; only the call that ended its lease
may be repeated by it (a repeat after a lost reply: the first result, nothing changed;
test_repeats.py). "Leases and visibility timeout": a
holder extends its lease with ``heartbeat`` (``lease_until = now + extend``, by default
the lease it dequeued with), and an extended lease is not reclaimed.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

import leaseq
from tests.conformance._util import assert_between, refusals, take, utcnow

VERBS = {
    "ack": lambda q, job: q.ack(job, result={"r": 1}),
    "nack": lambda q, job: q.nack(job, "boom", delay=0),
    "heartbeat": lambda q, job: q.heartbeat(job, extend=60),
    "release": lambda q, job: q.release(job),
    "bury": lambda q, job: q.bury(job, reason="stale"),
}


def _redelivered(q):
    """The old holder's job was given back and leased again to someone else."""
    job_id = q.enqueue("q").id
    old = take(q, expect=job_id)
    q.release(old)
    take(q, expect=job_id, worker_id="w2")
    return old


def _reclaimed(q):
    """The old holder's lease expired and was reclaimed: the job waits, available."""
    job_id = q.enqueue("q").id
    old = take(q, expect=job_id, lease=0.2)
    time.sleep(0.3)
    assert q.reclaim() == 1
    return old


def _completed(q):
    job_id = q.enqueue("q").id
    old = take(q, expect=job_id)
    q.ack(old, result="first")
    return old


def _dead(q):
    job_id = q.enqueue("q", max_attempts=1).id
    old = take(q, expect=job_id)
    assert q.nack(old, "used up") == "dead"
    return old


STALE = {"redelivered": _redelivered, "reclaimed": _reclaimed, "completed": _completed,
         "dead": _dead}
# The verb that ended the old lease in each scenario, and what it returned: the holder's
# repeat of it (after a lost reply) returns that and changes nothing. A reclaim ended the
# other one: nothing to repeat.
REPEATS = {"redelivered": ("release", "available"), "completed": ("ack", None),
           "dead": ("nack", "dead")}


@pytest.mark.parametrize("how", STALE)
def test_stale_token_is_refused_by_every_verb_and_changes_nothing(q, how):
    # A refused call changes nothing, so every verb meets the same state in turn.
    old = STALE[how](q)
    before, stats_before = q.get(old.id), q.stats()
    # The call that ended the old lease may be repeated by it: a no-op returning the first
    # result, checked below; every other verb is refused.
    repeat, first = REPEATS.get(how, (None, None))
    cases = {verb: lambda call=call: call(q, old) for verb, call in VERBS.items()
             if verb != repeat}
    assert refusals(cases, leaseq.LeaseLost, unchanged=lambda: (q.get(old.id), q.stats())) == {}
    if repeat is not None:
        assert VERBS[repeat](q, old) == first
    assert (q.get(old.id), q.stats()) == (before, stats_before)


def test_current_holder_is_unaffected_by_a_stale_holder(q):
    job_id = q.enqueue("q").id
    old = take(q, expect=job_id)
    q.release(old)
    new = take(q, expect=job_id, worker_id="w2")
    assert new.lease_token != old.lease_token
    cases = {verb: lambda call=call: call(q, old) for verb, call in VERBS.items()
             if verb != "release"}
    assert refusals(cases, leaseq.LeaseLost) == {}
    # The old lease's release, repeated (its reply lost): the first result, nothing more.
    assert VERBS["release"](q, old) == "available"
    info = q.get(job_id)
    assert (info.state, info.worker_id, info.lease_until) == ("running", "w2", new.lease_until)
    q.ack(new, result="mine")
    assert (q.get(job_id).state, q.get(job_id).result) == ("completed", "mine")


def test_a_token_that_was_never_issued_is_refused(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    before = q.get(job_id)
    forged = dataclasses.replace(job, lease_token=job.lease_token + 1)
    cases = {verb: lambda call=call: call(q, forged) for verb, call in VERBS.items()}
    assert refusals(cases, leaseq.LeaseLost, unchanged=lambda: q.get(job_id)) == {}
    assert q.get(job_id) == before
    q.ack(job)


def test_a_repeated_ack_by_the_same_lease_changes_nothing_and_history_keeps_one_row(q):
    # An ack retried after its reply was lost must not turn a success into LeaseLost;
    # it is the same holder, so it is recognised and changes nothing.
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id)
    q.ack(job, result="first")
    q.ack(job, result="second")
    assert q.ack_many([(job, "third")]) == [True]
    assert q.get(job_id).result == "first"
    assert q.stats()["q"].completed == 1


def test_an_ack_by_an_older_lease_of_a_completed_job_is_refused(q):
    job_id = q.enqueue("q").id
    old = take(q, expect=job_id, lease=0.2)
    time.sleep(0.3)
    assert q.reclaim() == 1
    new = take(q, expect=job_id)
    q.ack(new, result="new")
    with pytest.raises(leaseq.LeaseLost):
        q.ack(old, result="old")
    assert q.ack_many([old]) == [False]
    assert q.get(job_id).result == "new"


def test_heartbeat_extends_the_lease_to_now_plus_extend(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id, lease=0.2)
    before = utcnow()
    until = q.heartbeat(job, extend=30)
    after = utcnow()
    assert_between(until, before + timedelta(seconds=30), after + timedelta(seconds=30))
    assert q.get(job_id).lease_until == until


def test_heartbeat_without_extend_renews_by_the_dequeue_lease(q):
    q.enqueue("q")
    job = take(q, lease=20)
    before = utcnow()
    until = q.heartbeat(job)
    after = utcnow()
    assert_between(until, before + timedelta(seconds=20), after + timedelta(seconds=20))


def test_an_extended_lease_is_not_reclaimed_and_the_token_stays_valid(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id, lease=0.2)
    q.heartbeat(job, extend=30)
    time.sleep(0.3)  # past the original lease
    assert q.reclaim() == 0
    assert q.get(job_id).state == "running"
    q.heartbeat(job, extend=30)
    q.ack(job)
    assert q.get(job_id).state == "completed"


def test_heartbeat_can_shorten_the_lease(q):
    job_id = q.enqueue("q").id
    job = take(q, expect=job_id, lease=30)
    q.heartbeat(job, extend=0.2)
    time.sleep(0.3)
    assert q.reclaim() == 1
    assert q.get(job_id).state == "available"
