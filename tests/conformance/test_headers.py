"""Job headers (issue 12): a small map of strings that travels with a job.

``enqueue(..., headers=...)`` and a ``headers`` key in ``enqueue_many`` items store a
mapping of string names (1-100 characters) to string values, at most 64 entries and
8 KiB encoded; anything else raises ``InvalidArgument`` and writes nothing. ``None`` and
``{}`` both mean no headers (``None`` comes back). The headers come back unchanged from
``dequeue`` (``Job.headers``) and from ``get``, ``jobs`` and ``peek`` (``JobInfo.headers``)
while the job is live, through retries and give-backs, and once it is in history, however
it got there (ack with or without a result, ``ack_many``, cancel, discard, reclaim,
dead retention).
"""

from __future__ import annotations

import asyncio

import pytest

import leaseq
from tests.conformance._util import live_total, make_dead, refusals, take
from tests.helpers import wait_for

H = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
     "tenant": "acme", "unicode \u00e9\U0001f600": "\u05e9\u05dc\u05d5\u05dd \U0001f389",
     "quotes": "\"'`;--/* */%s?:x", "nul": "a\x00b", "empty": ""}


def test_headers_round_trip_from_enqueue_to_history(q):
    job_id = q.enqueue("h", {"n": 1}, headers=H).id
    assert q.get(job_id).headers == H
    [peeked] = q.peek("h")
    assert peeked.headers == H
    job = take(q, "h", expect=job_id)
    assert job.headers == H
    assert q.get(job_id).headers == H  # running
    q.ack(job)
    done = q.get(job_id)
    assert (done.state, done.headers) == ("completed", H)
    [listed] = q.jobs("h", state="completed")
    assert listed.headers == H


def test_none_and_empty_headers_are_no_headers(q):
    ids = [q.enqueue("h", headers=None).id, q.enqueue("h", headers={}).id, q.enqueue("h").id]
    ids += [r.id for r in q.enqueue_many([{"queue": "h", "headers": {}},
                                          {"queue": "h", "headers": None}])]
    assert [q.get(i).headers for i in ids] == [None] * 5
    jobs = q.dequeue("h", limit=10)
    assert sorted(j.id for j in jobs) == sorted(ids)
    assert [j.headers for j in jobs] == [None] * 5
    assert q.ack_many(jobs) == [True] * 5
    assert [q.get(i).headers for i in ids] == [None] * 5


def test_enqueue_many_keeps_each_items_headers(q):
    # Plain rows, rows with a lease of their own and keyed rows take different insert paths.
    items = [
        {"queue": "h", "payload": 1, "headers": {"a": "1"}},
        {"queue": "h", "payload": 2},
        {"queue": "h", "payload": 3, "headers": {"b": "2"}, "lease": 60},
        {"queue": "h", "payload": 4, "headers": H},
        {"queue": "h", "payload": 5, "headers": {"c": "3"}, "unique_key": "k"},
        {"queue": "other", "payload": 6, "headers": {"d": "4"}, "delay": 60},
    ]
    results = q.enqueue_many(items)
    expected = [item.get("headers") for item in items]
    assert [q.get(r.id).headers for r in results] == expected
    [scheduled] = q.peek("other", "scheduled")
    assert scheduled.headers == {"d": "4"}
    jobs = {j.id: j for j in q.dequeue("h", limit=10)}
    assert [jobs[r.id].headers for r in results[:5]] == expected[:5]
    # ack_many without results, then one with a result: the two archive paths.
    plain = [jobs[r.id] for r in results[:4]]
    assert q.ack_many([*plain, (jobs[results[4].id], {"ok": True})]) == [True] * 5
    assert [q.get(r.id).headers for r in results[:5]] == expected[:5]


def test_headers_survive_retries_release_dead_kick_and_history(q):
    retried = q.enqueue("h", headers={"r": "1"}, max_attempts=3).id
    job = take(q, "h", expect=retried)
    q.nack(job, "boom", delay=0)
    job = take(q, "h", expect=retried)
    assert (job.attempts, job.headers) == (2, {"r": "1"})
    q.release(job)
    job = take(q, "h", expect=retried)
    assert job.headers == {"r": "1"}
    q.ack(job, result="done")  # an ack with a result
    assert q.get(retried).headers == {"r": "1"}

    dead = make_dead(q, "d", headers={"dead": "1"})
    [peeked] = q.peek("d", "dead")
    assert peeked.headers == {"dead": "1"}
    assert q.kick("d") == 1
    job = take(q, "d", expect=dead)
    assert job.headers == {"dead": "1"}
    q.bury(job, reason="again")
    q.discard(dead, reason="no")
    assert (q.get(dead).state, q.get(dead).headers) == ("discarded", {"dead": "1"})

    cancelled = q.enqueue("c", headers={"c": "1"}).id
    assert q.cancel(cancelled) == "cancelled"
    assert q.get(cancelled).headers == {"c": "1"}


def test_headers_survive_reclaim_and_dead_retention(q):
    expired = q.enqueue("x", headers={"x": "1"}, max_attempts=1).id
    take(q, "x", expect=expired, lease=0.05)
    wait_for(lambda: q.reclaim() or None, message="the expired lease to be reclaimed")
    info = q.get(expired)
    assert (info.state, info.headers) == ("dead", {"x": "1"})
    q.configure_queue("x", dead_retention=0.05)

    def discarded() -> bool:
        q.reclaim()
        return q.get(expired).state == "discarded"

    wait_for(discarded, message="the dead job to be discarded past its retention")
    assert q.get(expired).headers == {"x": "1"}


def test_a_duplicate_keeps_the_first_jobs_headers(q):
    first = q.enqueue("h", unique_key="k", headers={"n": "1"})
    again = q.enqueue("h", unique_key="k", headers={"n": "2"})
    assert (again.id, again.created) == (first.id, False)
    assert q.get(first.id).headers == {"n": "1"}


def test_headers_at_their_limits_are_accepted(q):
    widest = {f"{i:03d}" + "k" * 97: "" for i in range(64)}  # 64 names of 100 characters
    size = len('{"x":""}')
    biggest = {"x": "v" * (8192 - size)}  # 8 KiB encoded, exactly
    ids = [q.enqueue("h", headers=widest).id, q.enqueue("h", headers=biggest).id]
    assert [q.get(i).headers for i in ids] == [widest, biggest]


BAD_HEADERS = {
    "list": [("a", "b")], "str": "a=b", "int": 5, "bytes": b"a",
    "int_key": {1: "a"}, "none_key": {None: "a"}, "empty_key": {"": "a"},
    "101_char_key": {"k" * 101: "a"}, "int_value": {"a": 1}, "none_value": {"a": None},
    "bytes_value": {"a": b"b"}, "nested": {"a": {"b": "c"}}, "list_value": {"a": ["b"]},
    "65_entries": {str(i): "" for i in range(65)},
    "over_8_KiB": {"x": "v" * 8192}, "over_8_KiB_in_bytes": {"x": "\u00e9" * 4096},
    "lone_surrogate": {"a": "\ud800"}, "lone_surrogate_key": {"\udfff": "a"},
    "reserved_flow_header": {"leaseq-flow": "c:0123:0:q"},  # chains and groups set it
}


def test_bad_headers_raise_and_write_nothing(q):
    cases = {name: (lambda h=h: q.enqueue("h", headers=h)) for name, h in BAD_HEADERS.items()}
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: live_total(q)) == {}
    many = {name: (lambda h=h: q.enqueue_many([{"queue": "h", "headers": {"ok": "1"}},
                                                {"queue": "h", "headers": h}]))
            for name, h in BAD_HEADERS.items()}
    assert refusals(many, leaseq.InvalidArgument, unchanged=lambda: live_total(q)) == {}
    assert live_total(q) == 0


def test_the_async_client_round_trips_headers(q, url, prefix):
    async def main() -> tuple[leaseq.Job, list[int]]:
        async with leaseq.connect_async(url, table_prefix=prefix,
                                        reclaim_interval=None) as aq:
            one = await aq.enqueue("a", headers={"a": "1"})
            more = await aq.enqueue_many([{"queue": "a", "headers": {"b": "2"}}])
            [job] = await aq.dequeue("a", worker_id="w")
            await aq.ack(job)
            with pytest.raises(leaseq.InvalidArgument):
                await aq.enqueue("a", headers={"a": 1})
            return job, [one.id, more[0].id]

    job, ids = asyncio.run(main())
    assert (job.id, job.headers) == (ids[0], {"a": "1"})
    assert [q.get(i).headers for i in ids] == [{"a": "1"}, {"b": "2"}]


def test_a_task_enqueue_carries_headers_given_in_options(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="t")
    def work(n: int) -> None: ...

    try:
        plain = work.enqueue(n=1).id
        with_headers = work.options(headers={"t": "1"}).enqueue(n=2).id
        assert q.get(plain).headers is None
        assert q.get(with_headers).headers == {"t": "1"}
    finally:
        app.close()


def test_a_batch_holding_nul_characters_is_stored_as_given(q):
    # JSON writes NUL as \u0000, which PostgreSQL refuses where it parses a JSON batch.
    items = [{"queue": "h", "payload": {"s": "a\x00b"}, "headers": {"n": "\x00"}},
             {"queue": "h", "payload": "\x00"}, {"queue": "h", "headers": {"\x00": "x"}}]
    ids = [r.id for r in q.enqueue_many(items)]
    assert [(q.get(i).payload, q.get(i).headers) for i in ids] == [
        ({"s": "a\x00b"}, {"n": "\x00"}), ("\x00", None), (None, {"\x00": "x"})]
