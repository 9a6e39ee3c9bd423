"""Chains and groups (issue 15 part 5, docs/workflows.md): ``Backend.start_flow``,
``complete_step`` and ``get_flow`` on every backend.

A step's follow-up is created in the same transaction (one script on Redis) as the step's
fenced completion, so: a stale ack creates nothing; the chain's next step gets the result
as its first argument; a group's callback is enqueued once, by whichever member completes
last, with every result in member order, however many members complete at once.

The jobs are driven by hand (``dequeue`` and ``ack``) so that each test picks the order
and the interleaving; tests/test_flows_kill.py runs them with worker processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import leaseq
import leaseq.testing
from tests.conformance._util import take
from tests.helpers import ENGINES

QUEUE = "flows"


@dataclasses.dataclass
class Pair:
    """A typed result (docs/typed-payloads.md): stored as JSON, rebuilt on both sides."""

    left: int
    right: int


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.App]:
    """An app on ``q``'s tables with a few tasks on the queue ``flows``."""
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)

    @app.task(queue=QUEUE, name="add")
    def add(x: int, y: int = 1) -> int:
        return x + y

    @app.task(queue=QUEUE, name="collect")
    def collect(results: list[Any], tag: str = "") -> dict[str, Any]:
        return {"tag": tag, "results": results}

    @app.task(queue=QUEUE, name="pair")
    def pair(x: int) -> Pair:
        return Pair(x, x + 1)

    @app.task(queue=QUEUE, name="swap")
    def swap(p: Pair) -> Pair:
        assert isinstance(p, Pair)
        return Pair(p.right, p.left)

    @app.task(queue="other", name="nothing")
    def nothing() -> None:
        return None

    try:
        yield app
    finally:
        app.close()


def run(app: leaseq.App, job: leaseq.Job) -> Any:
    """What a worker would return for ``job``."""
    return app.tasks[job.kind].fn(**job.payload)  # type: ignore[index]


def drain(app: leaseq.App, q: leaseq.Queue) -> int:
    """Runs and acks every job of the queue until none is left; how many ran."""
    n = 0
    while jobs := q.dequeue(QUEUE, worker_id="w", limit=10):
        for job in jobs:
            q.ack(job, run(app, job))
            n += 1
    return n


def jobs_of(q: leaseq.Queue, kind: str) -> list[leaseq.JobInfo]:
    return q.jobs(kind=kind, limit=1000)


def test_a_chain_passes_each_result_as_the_next_steps_first_argument(app, q):
    add = app.tasks["add"]
    flow = leaseq.chain(add.s(1), add.s(), add.s(y=10)).enqueue()
    assert flow.kind == "chain" and flow.size == 3 and len(flow.job_ids) == 1
    assert flow.state().remaining == 3 and flow.state().job_id == flow.job_ids[0]
    assert drain(app, q) == 3
    steps = jobs_of(q, "add")
    assert [s.payload for s in steps] == [{"x": 1}, {"x": 2}, {"x": 3, "y": 10}]
    assert [s.result for s in steps] == [2, 3, 13]
    state = flow.state()
    assert (state.remaining, state.step, state.job_id) == (0, 2, steps[-1].id)
    assert flow.wait(timeout=10) == 13


def test_a_stale_ack_creates_no_follow_up_and_a_repeated_ack_creates_no_second(app, q):
    add = app.tasks["add"]
    flow = leaseq.chain(add.s(1), add.s()).enqueue()
    stale = take(q, QUEUE, expect=flow.job_ids[0])
    q.release(stale)  # the lease is gone: as if the worker died and the job came back
    fresh = take(q, QUEUE, expect=flow.job_ids[0])
    with pytest.raises(leaseq.LeaseLost):
        q.ack(stale, 2)
    assert q.ack_many([(stale, 2)]) == [False]
    assert len(jobs_of(q, "add")) == 1 and flow.state().remaining == 2
    q.ack(fresh, 2)
    q.ack(fresh, 2)  # a retried ack of the same lease: a success that does nothing
    assert q.ack_many([(fresh, 2)]) == [True]
    steps = jobs_of(q, "add")
    assert len(steps) == 2 and steps[1].payload == {"x": 2}
    assert flow.state().remaining == 1 and flow.state().job_id == steps[1].id


def test_a_group_runs_its_callback_once_with_results_in_member_order(app, q):
    add = app.tasks["add"]
    flow = leaseq.group(*(add.s(i, 0) for i in range(5))).then(
        app.tasks["collect"].s(tag="t")).enqueue()
    members = {job.id: job for job in q.dequeue(QUEUE, worker_id="w", limit=10)}
    assert sorted(members) == sorted(flow.job_ids)
    for job_id in reversed(flow.job_ids):  # the last member completes first
        assert q.ack_many([(members[job_id], run(app, members[job_id]))]) == [True]
        if job_id != flow.job_ids[0]:
            assert jobs_of(q, "collect") == []  # not before every member completed
    [callback] = jobs_of(q, "collect")
    assert callback.payload == {"results": [0, 1, 2, 3, 4], "tag": "t"}
    assert flow.state().job_id == callback.id and flow.state().remaining == 0
    assert drain(app, q) == 1
    assert flow.wait(timeout=10) == {"tag": "t", "results": [0, 1, 2, 3, 4]}


def test_a_group_without_then_waits_for_the_member_results_in_order(app, q):
    add = app.tasks["add"]
    flow = leaseq.group(add.s(5, 0), add.s(6, 0), add.s(7)).enqueue()
    assert drain(app, q) == 3
    assert flow.state().remaining == 0 and flow.state().job_id is None
    assert flow.wait(timeout=10) == [5, 6, 8]


def test_members_completing_at_once_enqueue_the_callback_exactly_once(app, q, url, prefix):
    """Every member acked at the same moment from its own client (own connection): the
    flow row's lock serialises them, so the last one sees every result."""
    add = app.tasks["add"]
    size = 12
    flow = leaseq.group(*(add.s(i, 0) for i in range(size))).then(
        app.tasks["collect"].s()).enqueue()
    members = q.dequeue(QUEUE, worker_id="w", limit=size)
    assert len(members) == size
    clients = [leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
               for _ in range(4)]
    start = threading.Barrier(len(clients))
    errors: list[BaseException] = []

    def ack(n: int) -> None:
        try:
            start.wait(10)
            for job in members[n::len(clients)]:
                clients[n].ack(job, job.payload["x"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ack, args=(n,)) for n in range(len(clients))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        for client in clients:
            client.close()
    assert not errors, errors
    [callback] = jobs_of(q, "collect")
    assert callback.payload == {"results": list(range(size))}
    assert flow.state().remaining == 0


def test_a_dead_step_stops_the_chain(app, q):
    add = app.tasks["add"]
    flow = leaseq.chain(add.options(max_attempts=1).s(1), add.s()).enqueue()
    q.nack(take(q, QUEUE, expect=flow.job_ids[0]), "boom")
    assert q.get(flow.job_ids[0]).state == "dead"
    assert len(jobs_of(q, "add")) == 1 and flow.state().remaining == 2
    with pytest.raises(leaseq.JobFailed) as failed:
        flow.wait(timeout=5)
    assert (failed.value.job_id, failed.value.state) == (flow.job_ids[0], "dead")
    with pytest.raises(TimeoutError):
        leaseq.chain(add.s(1)).enqueue().wait(timeout=0.05)  # nothing runs it


def test_signatures_are_checked_when_made(app):
    add, nothing = app.tasks["add"], app.tasks["nothing"]
    with pytest.raises(leaseq.InvalidArgument):
        add.s(1, z=3)  # no such parameter
    with pytest.raises(leaseq.InvalidArgument):
        add.s(1, 2, 3)  # too many
    with pytest.raises(leaseq.InvalidArgument):
        leaseq.chain(add.s(1), add.s(x=5)).enqueue()  # x receives the result
    with pytest.raises(leaseq.InvalidArgument):
        leaseq.chain(add.s(1), nothing.s()).enqueue()  # nothing to receive it in
    with pytest.raises(leaseq.InvalidArgument):
        leaseq.group(add.s(1)).then(nothing.s())
    with pytest.raises(leaseq.InvalidArgument):
        leaseq.chain()
    with pytest.raises(leaseq.InvalidArgument):
        add.options(unique_key="k").s(1)
    with pytest.raises(leaseq.InvalidArgument, match="unique_for"):
        add.options(unique_for=60).s(1)


def test_a_chain_moves_between_queues(app, q):
    add = app.tasks["add"]
    flow = leaseq.chain(add.s(1), add.options(queue="second").s(y=5)).enqueue()
    assert drain(app, q) == 1
    job = take(q, "second")
    assert job.payload == {"x": 2, "y": 5}
    q.ack(job, run(app, job))
    assert flow.wait(timeout=10) == 7


def test_flows_enqueue_and_wait_from_asyncio(app, q):
    add, collect = app.tasks["add"], app.tasks["collect"]

    async def main() -> tuple[Any, Any]:
        try:
            chain = await leaseq.chain(add.s(1), add.s()).enqueue_async()
            grouped = await leaseq.group(add.s(1, 0), add.s(2, 0)).then(
                collect.s()).enqueue_async()
            await asyncio.to_thread(leaseq.testing.drain, app, QUEUE)  # as a worker would
            return await chain.wait_async(timeout=10), await grouped.wait_async(timeout=10)
        finally:
            await app.async_queue.close()

    assert asyncio.run(main()) == (3, {"tag": "", "results": [1, 2]})


def test_a_full_queue_refuses_the_whole_group(app, q):
    q.configure_queue(QUEUE, max_jobs=2)
    add = app.tasks["add"]
    with pytest.raises(leaseq.QueueFull):
        leaseq.group(add.s(1), add.s(2), add.s(3)).enqueue()
    assert jobs_of(q, "add") == []


def test_prune_deletes_finished_flows_and_keeps_running_ones(app, q):
    add = app.tasks["add"]
    done = leaseq.chain(add.s(1), add.s()).enqueue()
    assert drain(app, q) == 2
    running = leaseq.chain(add.s(1), add.s()).enqueue()
    q.prune(older_than=0)
    with pytest.raises(leaseq.JobNotFound):
        done.state()
    assert running.state().remaining == 2


def test_a_flow_enqueued_in_a_callers_transaction_exists_only_if_it_commits(
    app, q, backend, url
):
    if ENGINES.get(backend, backend) not in ("sqlite", "postgres", "mysql"):
        with pytest.raises(leaseq.ConfigurationError):
            leaseq.chain(app.tasks["add"].s(1)).enqueue(conn=object())
        return
    from tests.test_transactions import open_connection

    add = app.tasks["add"]
    conn = open_connection(backend, url)
    try:
        rolled_back = leaseq.chain(add.s(1), add.s()).enqueue(conn=conn)
        conn.rollback()
        kept = leaseq.group(add.s(5, 0)).then(app.tasks["collect"].s()).enqueue(conn=conn)
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(leaseq.JobNotFound):
        rolled_back.state()
    assert [j.id for j in jobs_of(q, "add")] == list(kept.job_ids)
    assert drain(app, q) == 2
    assert kept.wait(timeout=10) == {"tag": "", "results": [5]}


def test_typed_results_cross_steps_and_come_back_typed(app, q):
    pair, swap = app.tasks["pair"], app.tasks["swap"]
    chain = leaseq.chain(pair.s(1), swap.s()).enqueue()
    grouped = leaseq.group(pair.s(5), pair.s(7)).enqueue()
    assert leaseq.testing.drain(app, QUEUE).completed == 4  # stores results as a worker does
    assert chain.wait(timeout=10) == Pair(2, 1)
    assert grouped.wait(timeout=10) == [Pair(5, 6), Pair(7, 8)]
