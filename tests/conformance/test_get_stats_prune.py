"""get, stats, prune.

SPEC "Public API": ``get(job_id)`` shows any job, live or in history, with its state
(``JobNotFound`` for ids no job has); ``stats()`` gives per queue the available,
scheduled, running, dead, completed, cancelled, discarded and failed counts; SPEC
"History": history is prunable by age — ``prune(older_than=...)`` deletes history rows
finished longer ago than that and never touches live jobs.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import leaseq
from tests.conformance._util import make_dead, take


def _finish_three(q):
    done = q.enqueue("q").id
    q.ack(take(q, expect=done), result="r")
    cancelled = q.enqueue("q").id
    q.cancel(cancelled)
    discarded = q.enqueue("q").id
    q.discard(discarded)
    return [done, cancelled, discarded]


def test_get_shows_each_live_state(q):
    scheduled = q.enqueue("q", delay=60).id
    dead = make_dead(q)
    running = q.enqueue("q").id
    take(q, expect=running)
    available = q.enqueue("q").id
    states = {i: q.get(i).state for i in (scheduled, available, running, dead)}
    assert states == {scheduled: "scheduled", available: "available", running: "running",
                      dead: "dead"}
    for job_id in states:
        assert q.get(job_id).finished_at is None


def test_get_of_an_unknown_id_raises_job_not_found(q):
    q.enqueue("q")
    with pytest.raises(leaseq.JobNotFound) as raised:
        q.get(10**9)
    assert isinstance(raised.value, LookupError)


def test_stats_of_an_empty_database_is_empty(q):
    assert q.stats() == {}


def test_stats_counts_every_state_per_queue(q):
    make_dead(q, "a")
    q.ack(take(q, "a", expect=q.enqueue("a").id))
    q.cancel(q.enqueue("a").id)
    q.discard(q.enqueue("a").id)
    take(q, "a", expect=q.enqueue("a").id)
    q.enqueue("a", delay=60)
    q.enqueue_many([{"queue": "a"}, {"queue": "a"}, {"queue": "b", "priority": 1}])
    stats = q.stats()
    assert sorted(stats) == ["a", "b"]
    a, b = stats["a"], stats["b"]
    assert a.queue == "a" and b.queue == "b"
    assert (a.available, a.scheduled, a.running, a.dead) == (2, 1, 1, 1)
    assert (a.completed, a.cancelled, a.discarded, a.failed) == (1, 1, 1, 1)
    b_dict = b.as_dict()
    age = b_dict.pop("oldest_available_age")
    assert isinstance(age, float) and 0 <= age < 60, age
    assert b_dict == {"queue": "b", "available": 1, "scheduled": 0, "running": 0,
                      "dead": 0, "completed": 0, "cancelled": 0, "discarded": 0,
                      "failed": 0, "paused": False, "paused_until": None}


def test_prune_older_than_zero_removes_every_history_row(q):
    finished = _finish_three(q)
    live = q.enqueue("q").id
    time.sleep(0.01)  # so every finished_at is strictly in the past
    assert q.prune(older_than=0) == 3
    for job_id in finished:
        with pytest.raises(leaseq.JobNotFound):
            q.get(job_id)
    assert q.get(live).state == "available"
    stats = q.stats()["q"]
    assert (stats.completed, stats.cancelled, stats.discarded, stats.available) == (0, 0, 0, 1)


def test_prune_keeps_history_younger_than_the_age(q):
    finished = _finish_three(q)
    assert q.prune(older_than=timedelta(days=1)) == 0
    assert q.prune(older_than=3600) == 0
    assert [q.get(i).state for i in finished] == ["completed", "cancelled", "discarded"]


def test_prune_never_touches_live_jobs(q):
    dead = make_dead(q)
    scheduled = q.enqueue("q", delay=60).id
    running = q.enqueue("q").id
    take(q, expect=running)
    time.sleep(0.01)
    assert q.prune(older_than=0) == 0
    assert [q.get(i).state for i in (dead, scheduled, running)] == ["dead", "scheduled",
                                                                   "running"]


def test_prune_of_an_empty_history_returns_zero(q):
    assert q.prune(older_than=0) == 0
