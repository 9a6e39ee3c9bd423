"""Repeats of nack, release and bury (docs/reliability.md, "When a call's outcome is
unknown"; design §62).

A ``nack``, ``release`` or ``bury`` whose reply was lost (``OutcomeUnknown``) may have
committed. Called again with the same job (its lease token), it returns what the first
call returned and changes nothing, for as long as that lease is the job's last ended one,
which a later claim does not change: the later lease has to end too. Then, or for any
other token, or another verb with that token, ``LeaseLost`` as before.

Each test walks every case on one set of tables, a queue per case (a backend's fixture
costs more than a case), and names every case that misbehaved together.
"""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

import leaseq
from tests.conformance._util import refusals, take
from tests.helpers import wait_for

VERBS = ("nack", "release", "bury")


def _cancelled(q, job):
    """A cancel requested while ``job`` runs: its nack or release cancels it."""
    assert q.cancel(job.id) == "running"


# Per case: the first call, what it returns, a repeat with other arguments (which must not
# matter), the enqueue options, and what to do before the first call.
CASES = {
    "nack": (lambda q, j: q.nack(j, "boom", delay=0), "available",
             lambda q, j: q.nack(j, "again", delay=60), {}, None),
    "nack-scheduled": (lambda q, j: q.nack(j, "boom", delay=60), "scheduled",
                       lambda q, j: q.nack(j, "again", delay=0), {}, None),
    "nack-dead": (lambda q, j: q.nack(j, {"code": 1}), "dead",
                  lambda q, j: q.nack(j, "again", delay=0), {"max_attempts": 1}, None),
    "nack-cancelled": (lambda q, j: q.nack(j, "boom"), "cancelled",
                       lambda q, j: q.nack(j, "again"), {}, _cancelled),
    "release": (lambda q, j: q.release(j), "available",
                lambda q, j: q.release(j, delay=60, priority=7, error="note"), {}, None),
    "release-scheduled": (lambda q, j: q.release(j, delay=60, error="later"), "scheduled",
                          lambda q, j: q.release(j), {}, None),
    "release-cancelled": (lambda q, j: q.release(j), "cancelled",
                          lambda q, j: q.release(j, delay=5), {}, _cancelled),
    "bury": (lambda q, j: q.bury(j, reason="look"), None,
             lambda q, j: q.bury(j, reason="other", priority=9), {}, None),
}


def _snapshot(q, job_id):
    """Everything a repeat must leave as it was: the job (live or in history, with its
    attempts, times, counters and errors), the counts per queue (history rows included),
    and the listing."""
    return q.get(job_id), q.stats(), [(j.id, j.state) for j in q.jobs(limit=100)]


def _first(q, case, queue=None):
    """A job of queue ``queue`` (default: the case's name) taken and ended by the case's
    first call."""
    call, expected, _, options, before = CASES[case]
    queue = queue or case
    job = take(q, queue, expect=q.enqueue(queue, **options).id)
    if before is not None:
        before(q, job)
    assert call(q, job) == expected, case
    return job


def _calls(q, job, verbs, label):
    """``refusals`` cases: each verb's repeat by ``job``'s lease."""
    return {f"{verb} {label}": (lambda repeat=CASES[verb][2]: repeat(q, job)) for verb in verbs}


def test_a_repeat_returns_the_first_result_and_changes_nothing(q):
    problems = {}
    for case, (_, expected, repeat, _, _) in CASES.items():
        job = _first(q, case)
        after = _snapshot(q, job.id)
        got = [repeat(q, job), repeat(q, job)]  # and any later repeat
        if got != [expected] * 2 or _snapshot(q, job.id) != after:
            problems[case] = (got, _snapshot(q, job.id), after)
    assert problems == {}


def test_a_repeat_while_a_later_lease_runs_returns_the_first_result(q):
    """The later claim did not end a lease: the old one is still the last that ended."""
    for verb in VERBS:
        job = _first(q, verb)
        if verb == "bury":
            assert q.kick(verb) == 1
        later = take(q, verb, expect=job.id, worker_id="w2")
        held = _snapshot(q, job.id)
        assert (verb, CASES[verb][2](q, job)) == (verb, CASES[verb][1])
        assert _snapshot(q, job.id) == held, verb
        q.ack(later, result="mine")  # the later holder was not disturbed
        assert q.get(job.id).result == "mine"


def _expire(q, job):
    """The later lease runs out and is reclaimed."""
    wait_for(lambda: q.reclaim() == 1, timeout=10, message="the later lease to expire")


ENDINGS = {
    "ack": lambda q, job: q.ack(job),
    "nack": lambda q, job: q.nack(job, "later", delay=0),
    "release": lambda q, job: q.release(job),
    "bury": lambda q, job: q.bury(job),
    "expired": _expire,
}


def test_once_a_later_lease_ended_a_repeat_is_lease_lost(q):
    for ending, end in ENDINGS.items():
        queue = f"after-{ending}"
        old = _first(q, "nack", queue)
        end(q, take(q, queue, expect=old.id, worker_id="w2",
                    lease=0.05 if ending == "expired" else 30))
        ended = _snapshot(q, old.id)
        cases = _calls(q, old, VERBS, f"after a later {ending}")
        assert refusals(cases, leaseq.LeaseLost, unchanged=partial(_snapshot, q, old.id)) == {}
        assert (ending, q.nack_many([old])) == (ending, [False])
        assert _snapshot(q, old.id) == ended, ending


def test_another_verb_with_the_ended_token_is_lease_lost(q):
    """A repeat is of the call that ended the lease: a different one with the same token
    was never made, and is as stale as any."""
    for verb in VERBS:
        job = _first(q, verb)
        cases = _calls(q, job, [v for v in VERBS if v != verb], f"after {verb}")
        cases[f"ack after {verb}"] = lambda job=job: q.ack(job)
        cases[f"heartbeat after {verb}"] = lambda job=job: q.heartbeat(job)
        assert refusals(cases, leaseq.LeaseLost, unchanged=partial(_snapshot, q, job.id)) == {}


def test_nack_many_repeats_too_and_a_job_listed_twice_fails_once(q):
    ids = [q.enqueue("q").id for _ in range(3)]
    jobs = [take(q, expect=job_id) for job_id in ids]
    stale = jobs[2]
    q.release(stale)
    q.nack(take(q, expect=stale.id, worker_id="w2"), "a later lease ended", delay=0)
    assert q.nack_many([(jobs[0], "first"), (jobs[0], "twice"), jobs[1], stale]) == [
        True, True, True, False]
    after = _snapshot(q, ids[0]), _snapshot(q, ids[1])
    assert (after[0][0].error, after[0][0].attempts) == ("first", 1)
    assert q.nack_many([(jobs[1], "again"), (jobs[0], "again")]) == [True, True]
    assert q.nack(jobs[0], "again") == "scheduled"  # nack_many's backoff: a delay
    assert (_snapshot(q, ids[0]), _snapshot(q, ids[1])) == after


def test_the_async_client_repeats_alike(q, url, prefix):
    async def body():
        async with leaseq.connect_async(url, table_prefix=prefix,
                                        reclaim_interval=None) as aq:
            job_id = (await aq.enqueue("q")).id
            [job] = await aq.dequeue("q")
            first = await aq.release(job, delay=60)
            again = await aq.release(job)
            with pytest.raises(leaseq.LeaseLost):
                await aq.nack(job, "not the call that ended it")
            return job_id, first, again

    job_id, first, again = asyncio.run(body())
    assert (first, again) == ("scheduled", "scheduled")
    info = q.get(job_id)
    assert (info.state, info.releases, info.attempts) == ("scheduled", 1, 0)
