"""Errors as JSON, the reserved job's story, kick order and ready counts (issue 24, items
2, 5, 6 and 7; seeds 000 and 004).

``nack(job, error)`` keeps a dict as given, an exception as ``{"type", "message",
"traceback"}`` and a string as ``{"message"}``: ``JobInfo.error_detail``, beside the
readable ``JobInfo.error``, through retries, dead and history. A dequeued ``Job`` carries
``available_at``, ``reserves``, ``releases`` and ``timeouts``. ``kick`` takes dead jobs by
priority, then oldest first, and ``peek(queue, "dead")`` lists them in that order.
``priority_counts`` counts the due jobs per priority.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import leaseq
from tests.conformance._util import take


def _raised() -> ValueError:
    try:
        raise ValueError("bad input 7")
    except ValueError as exc:
        return exc


def test_nack_keeps_a_dict_an_exception_and_a_string_as_json(q):
    job_id = q.enqueue("e", max_attempts=4).id
    detail = {"code": 7, "message": "upstream said no", "retry": [1, 2.5, None],
              "ctx": {"host": "h1", "ok": False}}
    q.nack(take(q, "e", expect=job_id), detail, delay=0)
    info = q.get(job_id)
    assert info.error == "upstream said no"
    assert info.error_detail == detail

    q.nack(take(q, "e", expect=job_id), _raised(), delay=0)
    info = q.get(job_id)
    assert info.error == "ValueError: bad input 7"
    assert info.error_detail is not None
    assert set(info.error_detail) == {"type", "message", "traceback"}
    assert info.error_detail["type"] == "ValueError"
    assert info.error_detail["message"] == "bad input 7"
    assert "_raised" in info.error_detail["traceback"]
    assert "ValueError: bad input 7" in info.error_detail["traceback"]

    q.nack(take(q, "e", expect=job_id), "plain words", delay=0)
    info = q.get(job_id)
    assert (info.error, info.error_detail) == ("plain words", {"message": "plain words"})

    # A dict without a string "message" reads as its JSON; no error keeps the last one.
    q.nack(take(q, "e", expect=job_id), {"code": 9})
    assert q.get(job_id).error_detail == {"code": 9}
    assert q.get(job_id).error == '{"code":9}'
    assert q.get(job_id).state == "dead"


def test_error_detail_goes_dead_and_into_history(q):
    job_id = q.enqueue("h", max_attempts=1).id
    detail = {"message": "gave up", "attempt": 1}
    assert q.nack(take(q, "h", expect=job_id), detail) == "dead"
    assert q.get(job_id).error_detail == detail
    [listed] = q.jobs(queue="h", state="dead")
    assert listed.error_detail == detail
    q.discard(job_id)  # no reason: the last error stays, detail included
    info = q.get(job_id)
    assert (info.state, info.error, info.error_detail) == ("discarded", "gave up", detail)

    # A nack of a job asked to cancel goes to history with its detail.
    other = q.enqueue("h", max_attempts=3).id
    job = take(q, "h", expect=other)
    assert q.cancel(other) == "running"
    assert q.nack(job, {"message": "stopped", "n": 2}) == "cancelled"
    assert q.get(other).error_detail == {"message": "stopped", "n": 2}
    # A completed job has neither.
    done = q.enqueue("h").id
    q.ack(take(q, "h", expect=done))
    assert (q.get(done).error, q.get(done).error_detail) == (None, None)


def test_errors_stored_without_detail_read_as_a_message(q):
    job_id = q.enqueue("m", max_attempts=5).id
    q.nack(take(q, "m", expect=job_id), {"message": "first", "code": 1}, delay=0)
    q.bury(take(q, "m", expect=job_id), reason="needs a human")
    info = q.get(job_id)
    assert (info.error, info.error_detail) == ("needs a human", {"message": "needs a human"})
    q.kick("m")
    q.nack(take(q, "m", expect=job_id), {"message": "again", "code": 2}, delay=0)
    take(q, "m", expect=job_id, lease=0.2)
    time.sleep(0.3)
    assert q.reclaim() == 1
    info = q.get(job_id)
    assert (info.error, info.error_detail) == ("lease expired", {"message": "lease expired"})
    fresh = q.enqueue("m").id
    assert q.get(fresh).error_detail is None


def test_an_error_that_is_not_json_is_refused_and_nothing_changes(q):
    job_id = q.enqueue("x").id
    job = take(q, "x", expect=job_id)
    for bad in ({"when": object()}, {1: "int key"}, {"x": float("nan")}):
        with pytest.raises(leaseq.LeaseqError):
            q.nack(job, bad)
    info = q.get(job_id)
    assert (info.state, info.error, info.error_detail) == ("running", None, None)
    q.ack(job)


def test_a_dequeued_job_carries_its_story(q):
    job_id = q.enqueue("s", max_attempts=5).id
    job = take(q, "s", expect=job_id)
    assert (job.reserves, job.releases, job.timeouts) == (1, 0, 0)
    assert job.available_at == q.get(job_id).available_at
    q.release(job, delay=0)
    job = take(q, "s", expect=job_id, lease=0.2)
    assert (job.reserves, job.releases, job.timeouts) == (2, 1, 0)
    time.sleep(0.3)
    assert q.reclaim() == 1
    due = q.get(job_id).available_at
    job = take(q, "s", expect=job_id)
    assert (job.reserves, job.releases, job.timeouts) == (3, 1, 1)
    assert job.available_at == due
    assert job.attempts == 2  # a release gives the attempt back; a timeout does not


def test_kick_and_peek_take_dead_jobs_by_priority_then_oldest(q):
    dead = {}
    for n, priority in enumerate([0, 5, 0, 5, -3, 2]):
        job_id = q.enqueue("k", max_attempts=1, priority=priority, payload=n).id
        dead[job_id] = priority
        assert q.nack(take(q, "k", expect=job_id), "boom") == "dead"
    order = sorted(dead, key=lambda i: (-dead[i], i))
    assert [j.id for j in q.peek("k", "dead", limit=10)] == order
    assert [j.id for j in q.peek("k", "dead", limit=2)] == order[:2]
    assert q.kick("k", limit=3) == 3
    assert [j.id for j in q.peek("k", "dead", limit=10)] == order[3:]
    assert [j.id for j in q.peek("k", "available", limit=10)] == order[:3]
    # A bury with a new priority files the job under it.
    q.kick("k", limit=10)
    for job in q.dequeue("k", worker_id="w", limit=10):
        q.bury(job, priority=dead[job.id] if job.id != order[-1] else 9)
    assert q.peek("k", "dead", limit=1)[0].id == order[-1]
    assert q.kick("k", limit=1) == 1 and q.get(order[-1]).state == "available"


def test_priority_counts_counts_due_jobs_per_priority(q):
    assert q.priority_counts("pc") == {}
    for priority in (1, 5, 1, 5, -2, 1):
        q.enqueue("pc", priority=priority)
    q.enqueue("pc", priority=7, delay=60)  # scheduled: not counted
    q.enqueue("other", priority=5)
    take(q, "pc")  # running (a priority 5 job): not counted
    make = q.enqueue("pc", priority=8, max_attempts=1).id
    assert q.nack(take(q, "pc", expect=make), "x") == "dead"  # dead: not counted
    counts = q.priority_counts("pc")
    assert counts == {5: 1, 1: 3, -2: 1}
    assert list(counts) == [5, 1, -2]  # highest priority first
    q.pause("pc")
    assert q.priority_counts("pc") == counts  # pause ignored, as peek
    with pytest.raises(leaseq.ValidationError):
        q.priority_counts("bad name!")


def test_async_client_has_errors_as_json_the_story_and_the_counts(q, url, prefix):
    job_id = q.enqueue("a", priority=3, max_attempts=2).id
    q.enqueue("a", priority=1)

    async def body(aq):
        assert await aq.priority_counts("a") == {3: 1, 1: 1}
        [job] = await aq.dequeue("a", worker_id="aw")
        assert (job.id, job.reserves, job.releases, job.timeouts) == (job_id, 1, 0, 0)
        assert job.available_at is not None
        assert await aq.nack(job, {"message": "async", "k": [1]}, delay=0) == "available"
        assert (await aq.get(job_id)).error_detail == {"message": "async", "k": [1]}
        [job] = await aq.dequeue("a", worker_id="aw")
        assert await aq.nack(job, _raised()) == "dead"
        info = await aq.get(job_id)
        assert info.error_detail["type"] == "ValueError"
        assert [j.id for j in await aq.peek("a", "dead")] == [job_id]
        assert await aq.kick("a", limit=5) == 1

    async def main():
        async with leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None) as aq:
            await body(aq)

    asyncio.run(main())
    assert q.get(job_id).state == "available"
