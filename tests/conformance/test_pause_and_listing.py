"""Operator views: pausing a queue and listing jobs.

A paused queue hands out nothing, to any dequeue, until it is resumed; enqueueing into
it still works and stats show it paused. ``jobs()`` lists live and historical jobs in id
order, filtered by queue and state, paged with ``after``.
"""

from __future__ import annotations

import pytest

import leaseq


def test_paused_queue_hands_out_nothing_until_resumed(q: leaseq.Queue) -> None:
    a = q.enqueue("a", {"n": 1}).id
    b = q.enqueue("b", {"n": 2}).id
    q.pause("a")
    assert q.paused() == ["a"]
    assert [j.id for j in q.dequeue(["a", "b"], limit=10)] == [b]
    assert q.dequeue("a") == []
    assert q.enqueue("a", {"n": 3}).created  # enqueueing into a paused queue still works
    assert q.stats()["a"].paused and not q.stats()["b"].paused
    q.resume("a")
    assert q.paused() == []
    assert q.dequeue("a", limit=10)[0].id == a


def test_pausing_an_empty_queue_shows_in_stats(q: leaseq.Queue) -> None:
    q.pause("later")
    q.pause("later")  # idempotent
    assert q.stats()["later"].paused
    assert q.stats()["later"].available == 0


def test_jobs_lists_live_and_history_in_id_order_with_filters(q: leaseq.Queue) -> None:
    ids = [r.id for r in q.enqueue_many([{"queue": "a", "payload": i} for i in range(4)])]
    later = q.enqueue("b", {"n": 9}, delay=3600).id
    done = q.dequeue("a")[0]
    q.ack(done, result={"ok": 1})
    listed = q.jobs()
    assert [j.id for j in listed] == [*ids, later]
    assert {j.id: j.state for j in listed}[done.id] == "completed"
    assert [j.id for j in q.jobs("b")] == [later]
    assert [j.id for j in q.jobs(state="scheduled")] == [later]
    assert [j.id for j in q.jobs(state="completed")] == [done.id]
    assert q.jobs(state="completed")[0].result == {"ok": 1}
    assert [j.id for j in q.jobs("a", state="available")] == ids[1:]


def test_jobs_pages_with_after(q: leaseq.Queue) -> None:
    ids = [r.id for r in q.enqueue_many([{"queue": "a", "payload": i} for i in range(7)])]
    seen: list[int] = []
    after = 0
    while page := q.jobs("a", limit=3, after=after):
        seen += [j.id for j in page]
        after = page[-1].id
    assert seen == ids


@pytest.mark.parametrize("bad", [{"state": "done"}, {"limit": 0}, {"after": -1}])
def test_jobs_refuses_bad_filters(q: leaseq.Queue, bad: dict[str, object]) -> None:
    with pytest.raises(leaseq.InvalidArgument):
        q.jobs(**bad)  # type: ignore[arg-type]


def test_pause_refuses_bad_queue_names(q: leaseq.Queue) -> None:
    with pytest.raises(leaseq.InvalidQueueName):
        q.pause("a b")
