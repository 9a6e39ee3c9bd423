"""``due_now``: whether a job of the queues is due now, whatever their limits.

What keeps ``leaseq worker --burst`` running: an available job whose time has come, in a
queue that is not paused, counts even while its queue's rate or concurrency limit holds
it back; a job scheduled for later, a running one or one of a paused queue does not.
"""

from __future__ import annotations

from tests.conformance._util import take


def test_nothing_is_due_in_empty_queues(q):
    assert q._due_now(["a", "b"]) is False


def test_an_available_job_is_due(q):
    q.enqueue("b")
    assert q._due_now(["a", "b"]) is True
    assert q._due_now(["a"]) is False


def test_a_scheduled_or_running_job_is_not_due(q):
    q.enqueue("a", delay=3600)
    job_id = q.enqueue("a").id
    take(q, "a", expect=job_id)
    assert q._due_now(["a"]) is False


def test_a_job_of_a_paused_queue_is_not_due(q):
    q.enqueue("a")
    q.pause("a")
    assert q._due_now(["a"]) is False
    q.resume("a")
    assert q._due_now(["a"]) is True


def test_a_job_held_back_by_a_limit_is_due(q):
    q.configure_queue("a", rate_per_sec=0.001, rate_burst=1)
    first, second = q.enqueue("a").id, q.enqueue("a").id
    take(q, "a", expect=first)  # the bucket's one token
    assert q.dequeue("a") == []  # the rate limit holds the second back...
    assert q._due_now(["a"]) is True  # ...yet it is due
    q.configure_queue("b", concurrency_limit=1)
    third, fourth = q.enqueue("b").id, q.enqueue("b").id
    take(q, "b", expect=third)
    assert q.dequeue("b") == []
    assert q._due_now(["b"]) is True
    assert second and fourth
