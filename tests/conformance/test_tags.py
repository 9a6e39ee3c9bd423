"""Job tags (issue 31 item 2): labels to find a job by, the first option added through
the one declaration of ``leaseq._core.options``.

``tags=[...]`` on ``enqueue``, an ``enqueue_many`` item, ``@app.task`` and
``Task.options`` (whose tags replace the task's), and so on a chain's steps. They come
back as a tuple of str in the given order with duplicates dropped, ``()`` when none:
``Job.tags`` from ``dequeue``, ``JobInfo.tags`` from ``get``, ``jobs`` and ``peek``,
in history too. ``jobs(tag=...)`` lists the jobs carrying a tag, combined with the other
filters. At most 16 tags of 1-64 characters of ``A-Z a-z 0-9 _ . : -``; anything else
raises ``InvalidArgument`` and writes nothing.
"""

from __future__ import annotations

import asyncio

import pytest

import leaseq
from tests.conformance._util import live_total, make_dead, refusals, take
from tests.helpers import wait_for


def test_tags_round_trip_from_enqueue_to_history(q):
    job_id = q.enqueue("t", {"n": 1}, tags=["billing", "eu", "billing", "x:1.2-a_b"]).id
    expected = ("billing", "eu", "x:1.2-a_b")  # order kept, the duplicate dropped
    assert q.get(job_id).tags == expected
    [peeked] = q.peek("t")
    assert peeked.tags == expected
    job = take(q, "t", expect=job_id)
    assert job.tags == expected
    q.ack(job)
    done = q.get(job_id)
    assert (done.state, done.tags) == ("completed", expected)
    [listed] = q.jobs("t", state="completed", tag="eu")
    assert (listed.id, listed.tags) == (job_id, expected)


def test_no_tags_are_an_empty_tuple(q):
    ids = [q.enqueue("t").id, q.enqueue("t", tags=[]).id, q.enqueue("t", tags=None).id,
           q.enqueue("t", tags=()).id]
    assert [q.get(i).tags for i in ids] == [()] * 4
    jobs = q.dequeue("t", limit=10)
    assert [j.tags for j in jobs] == [()] * 4
    assert q.ack_many(jobs) == [True] * 4
    assert [q.get(i).tags for i in ids] == [()] * 4


def test_enqueue_many_keeps_each_items_tags(q):
    # Plain rows, rows with a lease or headers of their own and keyed rows take different
    # insert paths.
    items = [
        {"queue": "t", "payload": 1, "tags": ["a"]},
        {"queue": "t", "payload": 2},
        {"queue": "t", "payload": 3, "tags": ["b", "c"], "lease": 60},
        {"queue": "t", "payload": 4, "tags": ["d"], "headers": {"h": "1"}},
        {"queue": "t", "payload": 5, "tags": ["e"], "unique_key": "k"},
        {"queue": "t", "payload": 6, "tags": ["f"], "unique_key": "g",
         "unique_scope": "global"},
        {"queue": "later", "payload": 7, "tags": ["g"], "delay": 60},
    ]
    results = q.enqueue_many(items)
    expected = [tuple(item.get("tags", ())) for item in items]
    assert [q.get(r.id).tags for r in results] == expected
    [scheduled] = q.peek("later", "scheduled")
    assert scheduled.tags == ("g",)
    jobs = {j.id: j for j in q.dequeue("t", limit=10)}
    assert [jobs[r.id].tags for r in results[:6]] == expected[:6]
    # ack_many without results, then one with a result: the two archive paths.
    plain = [jobs[r.id] for r in results[:5]]
    assert q.ack_many([*plain, (jobs[results[5].id], {"ok": True})]) == [True] * 6
    assert [q.get(r.id).tags for r in results[:6]] == expected[:6]


def test_tags_survive_retries_dead_kick_discard_and_cancel(q):
    retried = q.enqueue("t", tags=["r"], max_attempts=3).id
    job = take(q, "t", expect=retried)
    q.nack(job, "boom", delay=0)
    job = take(q, "t", expect=retried)
    assert (job.attempts, job.tags) == (2, ("r",))
    q.release(job)
    assert take(q, "t", expect=retried).tags == ("r",)

    dead = make_dead(q, "d", tags=["dead"])
    [peeked] = q.peek("d", "dead")
    assert peeked.tags == ("dead",)
    assert q.kick("d") == 1
    q.bury(take(q, "d", expect=dead), reason="again")
    q.discard(dead, reason="no")
    assert (q.get(dead).state, q.get(dead).tags) == ("discarded", ("dead",))

    cancelled = q.enqueue("c", tags=["c"]).id
    assert q.cancel(cancelled) == "cancelled"
    assert q.get(cancelled).tags == ("c",)


def test_tags_survive_reclaim_and_dead_retention(q):
    expired = q.enqueue("x", tags=["x"], max_attempts=1).id
    take(q, "x", expect=expired, lease=0.05)
    wait_for(lambda: q.reclaim() or None, message="the expired lease to be reclaimed")
    assert (q.get(expired).state, q.get(expired).tags) == ("dead", ("x",))
    q.configure_queue("x", dead_retention=0.05)

    def discarded() -> bool:
        q.reclaim()
        return q.get(expired).state == "discarded"

    wait_for(discarded, message="the dead job to be discarded past its retention")
    assert q.get(expired).tags == ("x",)
    assert [j.id for j in q.jobs("x", tag="x", state="discarded")] == [expired]


def test_jobs_filters_by_tag_combined_with_the_other_filters(q):
    eu = q.enqueue("a", tags=["billing", "eu"], kind="k").id
    us = q.enqueue("a", tags=["billing", "us"]).id
    other = q.enqueue("b", tags=["billing"]).id
    q.enqueue("a", tags=["eu-west"])  # holds "eu" only as part of a longer tag
    q.enqueue("a", tags=["EU"])  # tags are matched exactly, case included
    q.enqueue("a")
    assert [j.id for j in q.jobs(tag="billing")] == [eu, us, other]
    assert [j.id for j in q.jobs("a", tag="billing")] == [eu, us]
    assert [j.id for j in q.jobs("a", tag="eu")] == [eu]
    assert [j.id for j in q.jobs(tag="eu", kind="k")] == [eu]
    assert q.jobs(tag="eu", kind="other") == []
    assert q.jobs(tag="nobody") == []
    job = take(q, "a", expect=eu)
    q.ack(job)
    assert [j.id for j in q.jobs("a", tag="billing", state="completed")] == [eu]
    assert [j.id for j in q.jobs("a", tag="billing", state="available")] == [us]
    assert [j.id for j in q.jobs(tag="billing", limit=2)] == [eu, us]
    assert [j.id for j in q.jobs(tag="billing", after=us)] == [other]
    with pytest.raises(leaseq.InvalidArgument, match="tag"):
        q.jobs(tag="not a tag")


def test_tags_at_their_limits_are_accepted(q):
    widest = [f"{i:02d}" + "t" * 62 for i in range(16)]  # 16 tags of 64 characters
    every = ["AZaz09_.:-"]
    ids = [q.enqueue("t", tags=widest).id, q.enqueue("t", tags=every).id,
           q.enqueue("t", tags=widest + widest).id]  # 32 given, 16 once duplicates go
    assert [q.get(i).tags for i in ids] == [tuple(widest), tuple(every), tuple(widest)]


BAD_TAGS: dict[str, object] = {
    "bare_string": "billing", "bytes": b"billing", "set": {"a"}, "dict": {"a": "b"},
    "int": 5, "17_tags": [f"t{i}" for i in range(17)], "empty": [""],
    "space": ["a b"], "65_chars": ["t" * 65], "int_tag": [1], "none_tag": [None],
    "bytes_tag": [b"a"], "quote": ['a"b'], "slash": ["a/b"], "unicode": ["\u00e9"],
    "newline": ["a\n"], "comma": ["a,b"], "nested": [["a"]],
}


def test_bad_tags_raise_naming_the_tag_and_write_nothing(q):
    cases = {name: (lambda t=t: q.enqueue("t", tags=t)) for name, t in BAD_TAGS.items()}
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: live_total(q)) == {}
    many = {name: (lambda t=t: q.enqueue_many([{"queue": "t", "tags": ["ok"]},
                                               {"queue": "t", "tags": t}]))
            for name, t in BAD_TAGS.items()}
    assert refusals(many, leaseq.InvalidArgument, unchanged=lambda: live_total(q)) == {}
    with pytest.raises(leaseq.InvalidArgument, match="'a b'"):
        q.enqueue("t", tags=["ok", "a b"])
    with pytest.raises(leaseq.InvalidArgument, match="17 tags"):
        q.enqueue("t", tags=BAD_TAGS["17_tags"])
    assert live_total(q) == 0


def test_a_task_and_its_options_carry_tags_the_calls_replacing_the_tasks(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="tt", tags=["task", "eu"])
    def work(n: int) -> int:
        return n

    @app.task(queue="tt")
    def plain(n: int) -> int:
        return n

    try:
        own = work.enqueue(n=1).id
        replaced = work.options(tags=["call"]).enqueue(n=2).id
        cleared = work.options(tags=[]).enqueue(n=3).id
        kept = work.options(priority=3).enqueue(n=4).id
        untagged = plain.enqueue(n=5).id
        [many] = work.enqueue_many([{"n": 6}])
        assert [q.get(i).tags for i in (own, replaced, cleared, kept, untagged, many.id)] == [
            ("task", "eu"), ("call",), (), ("task", "eu"), (), ("task", "eu")]
        with pytest.raises(leaseq.InvalidArgument):
            work.options(tags=["no good"]).enqueue(n=7)
        with pytest.raises(leaseq.InvalidArgument):
            app.task(tags="bare")(lambda: None)
        assert live_total(q) == 6
    finally:
        app.close()


def test_a_chains_steps_carry_their_own_tags(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)

    @app.task(queue="flow", tags=["step"])
    def add(x: int, y: int = 1) -> int:
        return x + y

    try:
        leaseq.chain(add.s(1), add.options(tags=["second"]).s(), add.s()).enqueue()
        seen = []
        while jobs := q.dequeue("flow", worker_id="w"):
            for job in jobs:
                seen.append(job.tags)
                q.ack(job, add.fn(**job.payload))
        assert seen == [("step",), ("second",), ("step",)]
        assert [j.tags for j in q.jobs("flow", tag="second")] == [("second",)]
    finally:
        app.close()


def test_the_async_client_round_trips_tags(q, url, prefix):
    async def main() -> tuple[leaseq.Job, list[int], list[int]]:
        async with leaseq.connect_async(url, table_prefix=prefix,
                                        reclaim_interval=None) as aq:
            one = await aq.enqueue("a", tags=["x"])
            more = await aq.enqueue_many([{"queue": "a", "tags": ["y"]}])
            [job] = await aq.dequeue("a", worker_id="w")
            await aq.ack(job)
            with pytest.raises(leaseq.InvalidArgument):
                await aq.enqueue("a", tags="x")
            found = [j.id for j in await aq.jobs("a", tag="y")]
            return job, [one.id, more[0].id], found

    job, ids, found = asyncio.run(main())
    assert (job.id, job.tags) == (ids[0], ("x",))
    assert [q.get(i).tags for i in ids] == [("x",), ("y",)]
    assert found == [ids[1]]
