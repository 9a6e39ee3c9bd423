"""Finding jobs by kind and unique key.

``jobs(kind=..., unique_key=...)`` lists the live and historical jobs of one task name
and/or one unique key, exact matches only (case, trailing spaces and non-ASCII text
count), in id order, combined with the queue and state filters and paged with ``after``
as every listing is. A value enqueue would refuse is refused here with the same
exception; a value no job holds finds nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

import leaseq
from tests.conformance._util import make_dead, take

T = TypeVar("T")


def ids(jobs: list[leaseq.JobInfo]) -> list[int]:
    return [j.id for j in jobs]


def all_pages(q: leaseq.Queue, limit: int, **filters: Any) -> list[int]:
    """Every id ``jobs(**filters)`` lists, read ``limit`` at a time."""
    seen: list[int] = []
    after = 0
    while page := q.jobs(limit=limit, after=after, **filters):
        assert len(page) <= limit
        seen += ids(page)
        after = page[-1].id
    return seen


def test_finds_jobs_of_one_kind_live_and_historical(q: leaseq.Queue) -> None:
    first = q.enqueue("a", kind="email").id
    q.enqueue("a", kind="sms")
    q.enqueue("a")
    other_queue = q.enqueue("b", kind="email").id
    q.enqueue("a", kind="Email")  # exact: case counts
    q.enqueue("a", kind="email ")  # exact: a trailing space counts
    q.enqueue("a", kind="emai")
    done = q.enqueue("a", kind="email").id
    q.ack(take(q, "a", expect=first))  # first job now in history
    assert q.get(first).state == "completed"

    assert ids(q.jobs(kind="email")) == [first, other_queue, done]
    assert ids(q.jobs("a", kind="email")) == [first, done]
    assert ids(q.jobs("b", kind="email")) == [other_queue]
    assert [j.kind for j in q.jobs(kind="email ")] == ["email "]
    assert [j.kind for j in q.jobs(kind="Email")] == ["Email"]


def test_finds_jobs_by_unique_key_across_live_and_history(q: leaseq.Queue) -> None:
    completed = q.enqueue("a", unique_key="k").id
    q.ack(take(q, "a", expect=completed))
    cancelled = q.enqueue("a", unique_key="k").id  # the key is free again
    assert q.cancel(cancelled) == "cancelled"
    live = q.enqueue("a", unique_key="k").id
    other_queue = q.enqueue("b", unique_key="k").id
    for lookalike in ("K", "k ", " k", "kk"):
        q.enqueue("a", unique_key=lookalike)
    q.enqueue("a")

    assert ids(q.jobs("a", unique_key="k")) == [completed, cancelled, live]
    assert ids(q.jobs(unique_key="k")) == [completed, cancelled, live, other_queue]
    assert ids(q.jobs("b", unique_key="k")) == [other_queue]
    found = q.jobs("a", unique_key="k", state="completed")
    assert ids(found) == [completed] and found[0].unique_key == "k"
    assert ids(q.jobs("a", unique_key="k", state="cancelled")) == [cancelled]
    assert ids(q.jobs("a", unique_key="k", state="available")) == [live]
    assert [j.unique_key for j in q.jobs("a", unique_key="k ")] == ["k "]


def test_filters_combine_with_queue_and_state(q: leaseq.Queue) -> None:
    scheduled = q.enqueue("a", kind="t", unique_key="s", delay=3600).id
    available = q.enqueue("a", kind="t", unique_key="v").id
    running = q.enqueue("r", kind="t", unique_key="v").id
    take(q, "r", expect=running)
    dead = make_dead(q, "d", kind="t", unique_key="v")
    q.enqueue("a", kind="u", unique_key="v", delay=3600)

    assert ids(q.jobs(kind="t")) == [scheduled, available, running, dead]
    assert ids(q.jobs(kind="t", state="scheduled")) == [scheduled]
    assert ids(q.jobs(kind="t", state="available")) == [available]
    assert ids(q.jobs(kind="t", state="running")) == [running]
    assert ids(q.jobs(kind="t", state="dead")) == [dead]
    assert ids(q.jobs("a", kind="t")) == [scheduled, available]
    assert ids(q.jobs("a", kind="t", unique_key="v")) == [available]
    assert ids(q.jobs(kind="t", unique_key="v")) == [available, running, dead]
    assert ids(q.jobs("d", unique_key="v", state="dead")) == [dead]
    assert ids(q.jobs("d", unique_key="v", kind="t", state="dead")) == [dead]
    assert ids(q.jobs("r", unique_key="v", state="running")) == [running]
    assert ids(q.jobs("a", unique_key="s", state="scheduled")) == [scheduled]
    assert ids(q.jobs("a", unique_key="s", state="available")) == []


def test_pages_with_after(q: leaseq.Queue) -> None:
    wanted: list[int] = []
    for n in range(9):
        job_id = q.enqueue("a" if n % 2 else "b", kind="x" if n % 3 else "y",
                           unique_key=f"k{n}").id
        if n % 3:
            wanted.append(job_id)
    # Some of them in history, so that pages straddle live and historical jobs.
    for job in q.dequeue("a", limit=2):
        q.ack(job)
    assert all_pages(q, 2, kind="x") == wanted
    assert all_pages(q, 1, kind="x") == wanted
    assert ids(q.jobs(kind="x", after=wanted[2], limit=2)) == wanted[3:5]

    # One key, many history rows (a recurring job): paged on the unique-key lookup.
    keyed = []
    for _ in range(5):
        job_id = q.enqueue("c", unique_key="daily").id
        q.ack(take(q, "c", expect=job_id))
        keyed.append(job_id)
    keyed.append(q.enqueue("c", unique_key="daily").id)
    assert all_pages(q, 2, queue="c", unique_key="daily") == keyed
    assert all_pages(q, 1, unique_key="daily") == keyed
    assert ids(q.jobs("c", unique_key="daily", after=keyed[3])) == keyed[4:]


def test_finds_a_match_past_many_other_jobs(q: leaseq.Queue) -> None:
    q.enqueue_many([{"queue": "a", "kind": "bulk", "payload": n} for n in range(1100)])
    needle = q.enqueue("a", kind="needle", unique_key="n").id
    assert ids(q.jobs(kind="needle")) == [needle]
    assert ids(q.jobs(unique_key="n")) == [needle]
    assert ids(q.jobs("a", unique_key="n")) == [needle]
    assert len(q.jobs(kind="bulk", limit=1000)) == 1000


def test_matches_non_ascii_text_exactly(q: leaseq.Queue) -> None:
    kind, key = "письмо", "ключ-✓-🙂"
    job_id = q.enqueue("a", kind=kind, unique_key=key).id
    q.enqueue("a", kind=kind + " ", unique_key=key + " ")
    assert ids(q.jobs(kind=kind)) == [job_id]
    assert ids(q.jobs("a", unique_key=key)) == [job_id]
    q.ack(take(q, "a", expect=job_id))
    assert ids(q.jobs("a", unique_key=key, kind=kind)) == [job_id]
    assert q.jobs("a", unique_key=key)[0].state == "completed"


def test_no_match_is_an_empty_list(q: leaseq.Queue) -> None:
    q.enqueue("a", kind="t", unique_key="k")
    assert q.jobs(kind="nope") == []
    assert q.jobs(unique_key="nope") == []
    assert q.jobs("a", unique_key="nope") == []
    assert q.jobs("b", unique_key="k") == []
    assert q.jobs("b", kind="t") == []
    assert q.jobs(kind="t", unique_key="nope") == []
    assert q.jobs("a", kind="t", unique_key="k", state="dead") == []


BAD_TEXT = [
    pytest.param("", id="empty"),
    pytest.param(1, id="not-a-string"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("\ud800", id="lone-surrogate"),
    pytest.param(b"k", id="bytes"),
]


def _refusal(call: Callable[[], object]) -> type[BaseException]:
    with pytest.raises(leaseq.LeaseqError) as caught:
        call()
    return caught.type


@pytest.mark.parametrize("value", [*BAD_TEXT, pytest.param("x" * 201, id="too-long")])
def test_bad_kind_raises_what_enqueue_raises(q: leaseq.Queue, value: Any) -> None:
    raised = _refusal(lambda: q.jobs(kind=value))
    assert issubclass(raised, leaseq.InvalidArgument)
    assert raised is _refusal(lambda: q.enqueue("a", kind=value))
    assert q.jobs() == []


@pytest.mark.parametrize("value", [*BAD_TEXT, pytest.param("x" * 256, id="too-long")])
def test_bad_unique_key_raises_what_enqueue_raises(q: leaseq.Queue, value: Any) -> None:
    raised = _refusal(lambda: q.jobs("a", unique_key=value))
    assert issubclass(raised, leaseq.InvalidArgument)
    assert raised is _refusal(lambda: q.enqueue("a", unique_key=value))
    assert q.jobs() == []


def test_longest_values_enqueue_takes_are_found(q: leaseq.Queue) -> None:
    kind, key = "k" * 200, "u" * 255
    job_id = q.enqueue("a", kind=kind, unique_key=key).id
    assert ids(q.jobs("a", kind=kind, unique_key=key)) == [job_id]


# -- the asyncio client -------------------------------------------------------------------


def run(url: str, prefix: str, body: Callable[[leaseq.AsyncQueue], Awaitable[T]]) -> T:
    """``await body(aq)`` on a fresh AsyncQueue over the test's tables."""

    async def main() -> T:
        async with leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None) as aq:
            return await body(aq)

    return asyncio.run(main())


def test_async_finds_by_kind_and_unique_key(q: leaseq.Queue, url: str, prefix: str) -> None:
    done = q.enqueue("a", kind="t", unique_key="k").id
    q.ack(take(q, "a", expect=done))
    live = q.enqueue("a", kind="t", unique_key="k").id
    other = q.enqueue("b", kind="t").id
    q.enqueue("a", kind="u", unique_key="j")

    async def body(aq: leaseq.AsyncQueue) -> dict[str, list[int]]:
        return {
            "kind": ids(await aq.jobs(kind="t")),
            "key": ids(await aq.jobs("a", unique_key="k")),
            "history": ids(await aq.jobs("a", unique_key="k", state="completed")),
            "page": ids(await aq.jobs(kind="t", after=done, limit=1)),
            "both": ids(await aq.jobs(kind="t", unique_key="k", state="available")),
            "none": ids(await aq.jobs(kind="t", unique_key="j")),
        }

    assert run(url, prefix, body) == {
        "kind": [done, live, other], "key": [done, live], "history": [done],
        "page": [live], "both": [live], "none": [],
    }
    assert ids(q.jobs(kind="t")) == [done, live, other]


def test_async_refuses_bad_filters_as_sync_does(q: leaseq.Queue, url: str, prefix: str) -> None:
    async def body(aq: leaseq.AsyncQueue) -> list[type[BaseException]]:
        raised = []
        for filters in ({"kind": ""}, {"unique_key": "x" * 256}, {"kind": 5}):
            with pytest.raises(leaseq.LeaseqError) as caught:
                await aq.jobs(**filters)  # type: ignore[arg-type]
            raised.append(caught.type)
        return raised

    assert run(url, prefix, body) == [leaseq.InvalidArgument] * 3
