"""Bounded nesting: payloads, results and error details nest at most ``MAX_DEPTH`` (64)
arrays and objects deep.

Depth counts arrays and objects inside one another: a scalar is 0, ``[]``, ``[1]`` and
``{"a": 1}`` are 1, ``[[1]]`` is 2. At 64 a value goes in and comes back equal; at 65,
and at 5,000 (past where Python's ``json`` would raise ``RecursionError``), every Python
entry raises the same ``InvalidArgument``, naming the limit, and writes nothing. The SQL
routines' limit is in tests/test_sql_enqueue.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import leaseq
from leaseq._core.validate import MAX_DEPTH, encode
from tests.conformance._util import refusals, take


def nested(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    """A value ``depth`` arrays (or objects) deep around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


TOO_DEEP = {
    "65 arrays": nested(65),
    "65 objects": nested(65, kind="dict"),
    "64 arrays around an empty one": nested(64, []),
    "64 objects around an empty one": nested(64, {}, kind="dict"),
    "65 with a tuple outside": (nested(64),),
    "mixed, 65": nested(32, nested(33, "x", kind="dict")),
    "5,000 arrays": nested(5000),
    "5,000 objects": nested(5000, kind="dict"),
}
DEEPEST = {
    "64 arrays": nested(64),
    "64 objects": nested(64, kind="dict"),
    "63 arrays around an empty one": nested(63, []),
    "mixed, 64": nested(32, nested(32, "x", kind="dict")),
}


def test_the_depth_is_counted_as_documented() -> None:
    """Each value of known depth, wrapped to exactly 64 levels, passes; one more fails."""
    assert MAX_DEPTH == 64
    for value, depth in [(1, 0), ("s", 0), ([], 1), ([1], 1), ({"a": 1}, 1), ([[1]], 2),
                         ([{}], 2), ({"a": [1, [2]]}, 3)]:
        encode(nested(MAX_DEPTH - depth, value), 1 << 20)
        with pytest.raises(leaseq.InvalidArgument):
            encode(nested(MAX_DEPTH - depth + 1, value), 1 << 20)


@pytest.mark.parametrize("payload", DEEPEST.values(), ids=DEEPEST.keys())
def test_a_payload_64_deep_goes_in_and_comes_back_equal(q, payload):
    job_id = q.enqueue("q", payload).id
    assert q.get(job_id).payload == payload
    job = take(q, expect=job_id)
    assert job.payload == payload
    q.ack(job, result=payload)
    assert q.get(job_id).result == payload


def test_a_payload_deeper_than_64_is_refused_and_nothing_is_written(q):
    cases = {}
    for case, payload in TOO_DEEP.items():
        cases[f"enqueue {case}"] = lambda p=payload: q.enqueue("q", p)
        cases[f"enqueue_many {case}"] = lambda p=payload: q.enqueue_many(
            [{"queue": "q", "payload": 1}, {"queue": "q", "payload": p}])
    assert refusals(cases, leaseq.InvalidArgument, unchanged=q.stats) == {}
    assert q.stats() == {}
    with pytest.raises(leaseq.InvalidArgument, match="MAX_DEPTH=64"):
        q.enqueue("q", TOO_DEEP["5,000 arrays"])


def test_a_result_or_error_detail_deeper_than_64_is_refused_and_the_job_stays_held(q):
    job = take(q, expect=q.enqueue("q", max_attempts=5).id)
    before = q.get(job.id)
    cases = {}
    for case, value in TOO_DEEP.items():
        cases[f"ack {case}"] = lambda x=value: q.ack(job, result=x)
        cases[f"ack_many {case}"] = lambda x=value: q.ack_many([(job, x)])
        detail = {"message": "boom", "data": value}
        cases[f"nack {case}"] = lambda d=detail: q.nack(job, d)
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: q.get(job.id)) == {}
    assert q.get(job.id) == before
    deepest = {"message": "boom", "data": nested(63)}  # the detail object is level 1
    assert q.nack(job, deepest) in ("available", "scheduled")
    assert q.get(job.id).error_detail == deepest


def test_a_task_refuses_arguments_and_results_that_nest_too_deep(q, url, prefix):
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)

    @app.task(queue="t")
    def echo(data: Any) -> Any:
        return data

    try:
        # A task's payload is the object of its arguments: they start at level 2.
        job_id = echo.enqueue(nested(63)).id
        assert q.get(job_id).payload == {"data": nested(63)}
        with pytest.raises(leaseq.InvalidArgument):
            echo.enqueue(nested(64))
        with pytest.raises(leaseq.InvalidArgument):
            echo.enqueue(data=nested(5000))
        assert q.stats()["t"].available == 1
    finally:
        app.close()


def test_the_async_client_refuses_the_same(q, url, prefix):
    async def main() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix,
                                        reclaim_interval=None) as aq:
            for value in (nested(65), nested(5000, kind="dict")):
                with pytest.raises(leaseq.InvalidArgument):
                    await aq.enqueue("q", value)
                with pytest.raises(leaseq.InvalidArgument):
                    await aq.enqueue_many([{"queue": "q", "payload": value}])
            await aq.enqueue("q", nested(64))
            [job] = await aq.dequeue("q", worker_id="w")
            with pytest.raises(leaseq.InvalidArgument):
                await aq.ack(job, result=nested(65))
            with pytest.raises(leaseq.InvalidArgument):
                await aq.nack(job, {"data": nested(64)})
            await aq.ack(job, result=nested(64))

    asyncio.run(main())
    assert q.stats()["q"].completed == 1
