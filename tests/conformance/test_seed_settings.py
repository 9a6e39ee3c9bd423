"""Queue settings stored in the database (issue 11, item 2; seed 000 ``queue_config``).

``configure_queue`` stores settings per queue for every client and worker; ``queue_config``
reads them back as a frozen ``QueueConfig``; None resets one to its default. Enqueue takes
``max_attempts`` from them (an explicit argument wins), ``nack`` its backoff, ``dequeue``
caps leases at ``max_lease``, and ``max_jobs`` caps a queue's live jobs: an enqueue beyond
it raises ``QueueFull`` and writes nothing.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

import leaseq
from tests.conformance._util import live_total, make_dead, refusals, take
from tests.helpers import wait_for


def test_a_queue_without_settings_reads_all_defaults(q):
    config = q.queue_config("fresh")
    assert config == leaseq.QueueConfig("fresh")
    assert all(getattr(config, f.name) is None for f in dataclasses.fields(config)
               if f.name != "queue")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_jobs = 3  # type: ignore[misc]


def test_configure_stores_only_what_is_given_and_none_resets(q):
    first = q.configure_queue("emails", max_attempts=3, base_backoff=2, max_backoff=60,
                              jitter=0.2, default_lease=45, max_lease=120, max_jobs=1000,
                              max_touches=5, max_touch_duration=600,
                              min_touch_interval=timedelta(seconds=1.5), dead_retention=86400)
    assert first == leaseq.QueueConfig(
        "emails", max_attempts=3, base_backoff=2.0, max_backoff=60.0, jitter=0.2,
        default_lease=45.0, max_lease=120.0, max_jobs=1000, max_touches=5,
        max_touch_duration=600.0, min_touch_interval=1.5, dead_retention=86400.0)
    assert q.queue_config("emails") == first
    second = q.configure_queue("emails", max_jobs=None, max_attempts=4)
    assert second == dataclasses.replace(first, max_jobs=None, max_attempts=4)
    assert q.queue_config("emails") == second
    assert q.queue_config("other") == leaseq.QueueConfig("other")
    assert set(q.queue_configs()) == {"emails"}
    assert q.queue_configs()["emails"] == second


def test_configuring_keeps_pause_and_pause_keeps_settings(q):
    q.pause("p")
    q.configure_queue("p", max_attempts=2)
    assert q.paused() == ["p"]
    q.resume("p")
    assert q.queue_config("p").max_attempts == 2
    assert "p" in q.stats()  # a queue with settings only is listed, with zero counts
    assert q.stats()["p"].available == 0


def test_bad_settings_are_refused_and_change_nothing(q):
    q.configure_queue("s", max_attempts=2)
    cases = {
        "max_attempts 0": lambda: q.configure_queue("s", max_attempts=0),
        "max_attempts float": lambda: q.configure_queue("s", max_attempts=1.5),
        "max_jobs 0": lambda: q.configure_queue("s", max_jobs=0),
        "max_jobs text": lambda: q.configure_queue("s", max_jobs="10"),
        "negative backoff": lambda: q.configure_queue("s", base_backoff=-1),
        "cap below base": lambda: q.configure_queue("s", base_backoff=10, max_backoff=5),
        "jitter 1": lambda: q.configure_queue("s", jitter=1),
        "zero lease": lambda: q.configure_queue("s", default_lease=0),
        "nan lease": lambda: q.configure_queue("s", max_lease=float("nan")),
        "negative touches": lambda: q.configure_queue("s", max_touches=-1),
        "bad name": lambda: q.configure_queue("no spaces", max_jobs=1),
    }
    assert refusals(cases, leaseq.ValidationError, unchanged=lambda: q.queue_configs()) == {}
    with pytest.raises(TypeError):
        q.configure_queue("s", no_such_setting=1)  # type: ignore[call-arg]


def test_enqueue_takes_max_attempts_from_the_queue_and_explicit_wins(q):
    q.configure_queue("m", max_attempts=2)
    assert q.get(q.enqueue("m").id).max_attempts == 2
    assert q.get(q.enqueue("m", max_attempts=7).id).max_attempts == 7
    [item] = q.enqueue_many([{"queue": "m"}])
    assert q.get(item.id).max_attempts == 2
    assert q.get(q.enqueue("elsewhere").id).max_attempts == 5


def test_nack_backs_off_by_the_queue_settings(q):
    q.configure_queue("b", base_backoff=100, max_backoff=100, jitter=0)
    job = take(q, "b", expect=q.enqueue("b").id)
    assert q.nack(job, "boom") == "scheduled"
    info = q.get(job.id)
    due_in = (info.available_at - info.updated_at).total_seconds()
    assert 99 <= due_in <= 101, due_in
    # An explicit delay still wins.
    q.retry(job.id)
    job = take(q, "b", expect=job.id)
    assert q.nack(job, "boom", delay=0) == "available"


def test_another_client_sees_new_settings_within_the_cache_time(q, url, prefix):
    other = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    try:
        assert q.get(other.enqueue("late").id).max_attempts == 5  # caches "no settings"
        q.configure_queue("late", max_attempts=3)
        wait_for(lambda: q.get(other.enqueue("late").id).max_attempts == 3, timeout=5,
                 interval=0.25, message="the other client to read the new max_attempts")
    finally:
        other.close()


def test_max_jobs_caps_live_jobs_and_a_refused_enqueue_writes_nothing(q):
    q.configure_queue("cap", max_jobs=3)
    for _ in range(3):
        q.enqueue("cap")
    before = (live_total(q), q.stats()["cap"])
    with pytest.raises(leaseq.QueueFull, match="max_jobs"):
        q.enqueue("cap")
    with pytest.raises(leaseq.QueueFull):
        q.enqueue_many([{"queue": "other"}, {"queue": "cap"}])  # all or nothing
    assert (live_total(q), q.stats()["cap"]) == before
    assert "other" not in q.stats()
    assert isinstance(leaseq.QueueFull("x"), leaseq.LeaseqError)


def test_max_jobs_counts_running_and_dead_but_not_history(q):
    q.configure_queue("cap", max_jobs=2)
    make_dead(q, "cap")
    take(q, "cap", expect=q.enqueue("cap").id)
    with pytest.raises(leaseq.QueueFull):
        q.enqueue("cap")
    dead = q.peek("cap", "dead")[0]
    q.discard(dead.id)
    q.enqueue("cap")  # the discarded job left the live count


def test_a_unique_duplicate_does_not_count_against_max_jobs(q):
    q.configure_queue("cap", max_jobs=1)
    first = q.enqueue("cap", unique_key="k")
    again = q.enqueue("cap", unique_key="k")
    assert (again.id, again.created) == (first.id, False)


def test_a_batch_over_max_jobs_is_refused_whole(q):
    q.configure_queue("cap", max_jobs=3)
    q.enqueue("cap")
    with pytest.raises(leaseq.QueueFull):
        q.enqueue_many([{"queue": "cap"} for _ in range(3)])
    assert q.stats()["cap"].available == 1
    assert len(q.enqueue_many([{"queue": "cap"} for _ in range(2)])) == 2


def test_lifting_max_jobs_lets_enqueues_through_again(q):
    q.configure_queue("cap", max_jobs=1)
    q.enqueue("cap")
    with pytest.raises(leaseq.QueueFull):
        q.enqueue("cap")
    q.configure_queue("cap", max_jobs=None)
    q.enqueue("cap")
    assert q.stats()["cap"].available == 2


def test_migrate_again_keeps_settings(q):
    q.configure_queue("kept", max_jobs=9)
    q.migrate()
    assert q.queue_config("kept").max_jobs == 9
