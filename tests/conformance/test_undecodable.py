"""No poison job: a stored value that does not decode never blocks a queue or breaks a read.

leaseq only stores what decodes, but a row written by SQL, by hand or by an older version
may hold text that is not JSON, or JSON nested deeper than Python's decoder reads (about
1,000 levels). Such a value is planted here behind leaseq's back (``helpers.plant``: an
SQL UPDATE, a Redis HSET, the memory store's record). A claim then buries that job, with
``error_detail`` ``{"type": "Undecodable", "message": ...}``, and hands out the rest of its
batch, through ``Queue.dequeue``, ``AsyncQueue.dequeue`` and a worker alike; every read
(``get``, ``jobs``, ``peek``, history) shows a ``leaseq.Undecodable`` in place of the
value. SPEC: docs/design.md §52.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

import leaseq
from tests.helpers import plant, running, wait_for

BAD = {
    "not JSON": "{'n': 1, oops",
    "2,000 deep": "[" * 2000 + "]" * 2000,
}


def ten(q: leaseq.Queue, queue: str = "q", **item: object) -> list[int]:
    return [r.id for r in q.enqueue_many([{"queue": queue, "payload": {"n": n}, **item}
                                          for n in range(10)])]


def assert_buried(q: leaseq.Queue, job_id: int, text: str, field: str = "payload") -> None:
    """Job ``job_id`` is dead with the Undecodable error, and reads show its value as
    ``Undecodable``."""
    info = q.get(job_id)
    assert info.state == "dead"
    assert isinstance(info.error_detail, dict)
    assert info.error_detail["type"] == "Undecodable"
    message = info.error_detail["message"]
    assert f"job {job_id} cannot run: its stored {field}" in message, message
    assert "buried" in message
    assert info.error == message
    value = getattr(info, field)
    assert isinstance(value, leaseq.Undecodable)
    assert value.preview == text[:200]
    assert value.reason


@pytest.mark.parametrize("text", BAD.values(), ids=BAD.keys())
def test_one_bad_job_in_a_batch_of_ten_is_buried_and_the_nine_run(q, backend, url, prefix,
                                                                  text, caplog):
    ids = ten(q)
    bad = ids[3]
    plant(backend, url, prefix, bad, "payload", text)
    with caplog.at_level(logging.WARNING, logger="leaseq"):
        jobs = q.dequeue("q", limit=10, worker_id="w")
    assert [job.id for job in jobs] == [i for i in ids if i != bad]
    assert [job.payload for job in jobs] == [{"n": n} for n in range(10) if n != 3]
    assert_buried(q, bad, text)
    assert any(f"job {bad} cannot run" in r.getMessage() for r in caplog.records)
    assert q.get(bad).attempts == 1  # claimed once, as a failure would count it
    for job in jobs:
        q.ack(job, result={"done": job.payload["n"]})
    stats = q.stats()["q"]
    assert (stats.completed, stats.dead, stats.available, stats.running) == (9, 1, 0, 0)
    assert q.dequeue("q", limit=10) == []
    # Every read copes: the listing, peek, and the dead job once discarded into history.
    listed = {info.id: info for info in q.jobs("q", limit=100)}
    assert isinstance(listed[bad].payload, leaseq.Undecodable)
    [dead] = q.peek("q", "dead")
    assert dead.id == bad and isinstance(dead.payload, leaseq.Undecodable)
    q.discard(bad, reason="cannot be read")
    assert q.get(bad).state == "discarded"
    assert isinstance(q.get(bad).payload, leaseq.Undecodable)


def test_undecodable_headers_bury_the_job_too(q, backend, url, prefix):
    ids = ten(q, headers={"trace": "x"})
    plant(backend, url, prefix, ids[0], "headers", "not json")
    plant(backend, url, prefix, ids[9], "headers", '["a list", "not an object"]')
    jobs = q.dequeue("q", limit=10)
    assert [job.id for job in jobs] == ids[1:9]
    assert all(job.headers == {"trace": "x"} for job in jobs)
    assert_buried(q, ids[0], "not json", field="headers")
    assert q.get(ids[9]).state == "dead"
    assert q.get(ids[9]).error_detail["type"] == "Undecodable"  # type: ignore[index]


def test_a_batch_of_nothing_but_bad_jobs_returns_empty_and_the_queue_goes_on(q, backend,
                                                                               url, prefix):
    ids = ten(q)
    for job_id in ids[:3]:
        plant(backend, url, prefix, job_id, "payload", "nope")
    assert [job.id for job in q.dequeue("q", limit=3)] == []
    assert [job.id for job in q.dequeue("q", limit=10)] == ids[3:]
    assert [q.get(i).state for i in ids[:3]] == ["dead"] * 3


def test_the_async_client_buries_the_same(q, backend, url, prefix):
    ids = ten(q)
    plant(backend, url, prefix, ids[5], "payload", BAD["2,000 deep"])

    async def main() -> tuple[list[int], list[int]]:
        async with leaseq.connect_async(url, table_prefix=prefix,
                                        reclaim_interval=None) as aq:
            first = await aq.dequeue("q", limit=10, worker_id="aw")
            for job in first:
                await aq.ack(job)
            info = await aq.get(ids[5])
            assert isinstance(info.payload, leaseq.Undecodable)
            # A blocking dequeue that finds only a bad job keeps waiting, then returns.
            more = ten(q, queue="p")
            plant(backend, url, prefix, more[0], "payload", "nope", queue="p")
            second = await aq.dequeue("p", limit=1, wait=5, worker_id="aw")
            return [job.id for job in first], [job.id for job in second]

    first, second = asyncio.run(main())
    assert first == [i for i in ids if i != ids[5]]
    assert_buried(q, ids[5], BAD["2,000 deep"])
    assert q.stats()["q"].completed == 9
    assert len(second) == 1 and q.get(second[0]).state == "running"


def test_reads_of_stored_values_that_do_not_decode_never_raise(q, backend, url, prefix):
    """A result, an error detail or headers written by SQL: ``get`` shows each as an
    ``Undecodable``, live or in history, deep or not JSON at all."""
    done, failed, waiting = ten(q)[:3]
    jobs = q.dequeue("q", limit=2)
    assert [job.id for job in jobs] == [done, failed]
    q.ack(jobs[0], result={"ok": True})
    q.nack(jobs[1], {"message": "boom", "code": 7})
    q.enqueue("q", headers={"h": "1"})
    plant(backend, url, prefix, done, "result", BAD["2,000 deep"])
    plant(backend, url, prefix, failed, "error_detail", "not json")
    plant(backend, url, prefix, waiting, "headers", BAD["not JSON"])
    result = q.get(done).result
    assert isinstance(result, leaseq.Undecodable) and "deep" in result.reason
    assert result.preview == "[" * 200
    failure = q.get(failed)
    assert failure.error == "boom"
    assert failure.error_detail == leaseq.Undecodable(failure.error_detail.reason,  # type: ignore[union-attr]
                                                      "not json")
    assert isinstance(q.get(waiting).headers, leaseq.Undecodable)
    assert len(q.jobs("q", limit=100)) == 11
    # A stored value deeper than MAX_DEPTH that the decoder reads comes back as stored.
    deep = "[" * 500 + "]" * 500
    plant(backend, url, prefix, done, "result", deep)
    value = q.get(done).result
    for _ in range(499):
        value = value[0]
    assert value == []


def test_a_worker_runs_the_nine_and_buries_the_bad_one(q, backend, url, prefix):
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)
    ran: list[int] = []

    @app.task(queue="w")
    def work(n: int) -> int:
        ran.append(n)
        return n

    try:
        ids = [work.enqueue(n).id for n in range(10)]
        plant(backend, url, prefix, ids[6], "payload", BAD["2,000 deep"], queue="w")
        with running(app, concurrency=10):
            wait_for(lambda: q.stats()["w"].completed == 9, message="nine completed")
        assert sorted(ran) == [n for n in range(10) if n != 6]
        assert_buried(q, ids[6], BAD["2,000 deep"])
        assert q.stats()["w"].dead == 1
    finally:
        app.close()
