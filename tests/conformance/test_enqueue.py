"""Enqueue and enqueue_many.

SPEC "Public API": ``enqueue(queue, payload, priority=0, delay=0, unique_key=None,
max_attempts=5)`` returns ``r.id, r.created``; ``enqueue_many`` takes enqueue's arguments
per item in one round trip. SPEC "Semantics": a new job is live, ``available`` when due
now (``scheduled`` when later: see test_delays_and_times.py); each job has exactly one id
for its whole life, in the live table and in history.
"""

from __future__ import annotations

import leaseq
from tests.conformance._util import take


def test_enqueue_returns_a_fresh_id_and_created_true(q):
    first = q.enqueue("q", {"n": 1})
    second = q.enqueue("q", {"n": 2})
    assert first.created is True and second.created is True
    assert isinstance(first.id, int) and isinstance(second.id, int)
    assert first.id != second.id


def test_new_job_is_available_with_its_arguments_stored(q):
    r = q.enqueue("emails", {"to": "a@b.c"}, kind="send_email", priority=7, max_attempts=3)
    info = q.get(r.id)
    assert (info.id, info.queue, info.kind, info.state, info.payload) == (
        r.id, "emails", "send_email", "available", {"to": "a@b.c"})
    assert (info.priority, info.attempts, info.max_attempts, info.unique_key) == (7, 0, 3, None)
    assert info.lease_until is None and info.worker_id is None
    assert info.started_at is None and info.finished_at is None
    assert info.result is None and info.error is None and info.cancel_requested is False


def test_defaults_are_priority_zero_no_kind_and_five_attempts(q):
    info = q.get(q.enqueue("q").id)
    assert info.payload is None and info.kind is None
    assert info.priority == 0 and info.max_attempts == 5


def test_default_max_attempts_follows_the_client_setting(q, url, prefix):
    with leaseq.connect(url, table_prefix=prefix, max_attempts=2, reclaim_interval=None) as q2:
        job_id = q2.enqueue("q").id
    assert q.get(job_id).max_attempts == 2


def test_enqueue_many_returns_one_result_per_item_in_item_order(q):
    items = [
        {"queue": "a", "payload": {"n": 0}},
        {"queue": "b", "payload": {"n": 1}, "priority": 3},
        {"queue": "a", "payload": {"n": 2}, "kind": "k", "max_attempts": 2},
    ]
    results = q.enqueue_many(items)
    assert len(results) == 3 and all(r.created for r in results)
    assert len({r.id for r in results}) == 3
    infos = [q.get(r.id) for r in results]
    assert [(i.queue, i.payload) for i in infos] == [(it["queue"], it["payload"]) for it in items]
    assert [i.priority for i in infos] == [0, 3, 0]
    assert [i.kind for i in infos] == [None, None, "k"]
    assert [i.max_attempts for i in infos] == [5, 5, 2]


def test_enqueue_many_mixing_keyed_delayed_and_plain_items_keeps_item_order(q):
    results = q.enqueue_many([
        {"queue": "q", "payload": 0, "unique_key": "k0"},
        {"queue": "q", "payload": 1},
        {"queue": "q", "payload": 2, "delay": 60},
        {"queue": "q", "payload": 3, "unique_key": "k3"},
        {"queue": "q", "payload": 4},
    ])
    infos = [q.get(r.id) for r in results]
    assert [i.payload for i in infos] == [0, 1, 2, 3, 4]
    assert [i.unique_key for i in infos] == ["k0", None, None, "k3", None]
    assert [i.state for i in infos] == ["available", "available", "scheduled", "available",
                                        "available"]


def test_enqueue_many_accepts_any_iterable(q):
    results = q.enqueue_many({"queue": "q", "payload": n} for n in range(3))
    assert [q.get(r.id).payload for r in results] == [0, 1, 2]


def test_enqueue_many_of_nothing_writes_nothing(q):
    assert q.enqueue_many([]) == []
    assert q.stats() == {}


def test_job_ids_are_not_reused_after_a_job_leaves_the_live_table(q):
    first = q.enqueue("q").id
    q.ack(take(q, expect=first))
    second = q.enqueue("q").id
    assert second != first
    assert q.get(first).state == "completed"
    assert q.get(second).state == "available"


def test_longest_names_and_keys_are_stored_whole(q):
    queue = "Qz0_.-" * 33 + "xy"  # 200 characters, every allowed kind of character
    kind = "k\u00e9\U0001f600" * 66 + "kk"  # 200 characters, up to 4 bytes each
    key = "\U0001f511" * 255  # 255 four-byte characters
    r = q.enqueue(queue, {"x": 1}, kind=kind, unique_key=key)
    info = q.get(r.id)
    assert (info.queue, info.kind, info.unique_key) == (queue, kind, key)
    assert q.enqueue(queue, unique_key=key) == leaseq.EnqueueResult(r.id, False)
    job = take(q, queue, expect=r.id, worker_id="w" * 200)
    assert (job.queue, job.kind, job.unique_key, job.worker_id) == (queue, kind, key, "w" * 200)
