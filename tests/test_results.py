"""Results: ``Queue.wait``/``result``, ``EnqueueResult.wait``/``wait_async``, ``JobFailed``,
``ResultNotReady``, and the wake-ups that end a wait (docs/results.md)."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import leaseq
from leaseq import _results
from tests.helpers import running

ROOT = Path(__file__).resolve().parent.parent
PUSH = {"sqlite", "postgres", "redis"}  # backends with a listener; memory/mysql: in-process


def connect_async(q: leaseq.Queue) -> leaseq.AsyncQueue:
    """An AsyncQueue on the same database and tables as ``q``; open and close it on one
    event loop (its connections belong to the loop)."""
    return leaseq.connect_async(q.url, table_prefix=q.settings.table_prefix,
                                reclaim_interval=None)


def ack_later(q: leaseq.Queue, results: dict[int, object]) -> threading.Thread:
    """A thread that leases the jobs of ``results`` as they come and acks each with its
    result (the waiter is usually asleep by then)."""

    def work() -> None:
        left = dict(results)
        while left:
            for job in q.dequeue("r", limit=len(left), wait=5):
                q.ack(job, left.pop(job.id))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_wait_returns_the_stored_result(q: leaseq.Queue) -> None:
    r = q.enqueue("r", {"n": 1})
    other = q.enqueue("r", {"n": 2})
    thread = ack_later(q, {r.id: {"sum": 3}, other.id: [1, "two"]})
    assert r.wait(timeout=10) == {"sum": 3}
    assert q.wait(other.id, timeout=10) == [1, "two"]
    thread.join(10)
    assert q.result(r.id) == {"sum": 3}
    assert r.wait(timeout=0) == {"sum": 3}  # finished: no waiting at all


def test_a_finished_job_needs_no_listener(q: leaseq.Queue, prefix: str) -> None:
    r = q.enqueue("r", None)
    [job] = q.dequeue("r")
    q.ack(job, 42)
    assert r.wait() == 42
    assert not any(t.name == f"leaseq-results-{prefix}" for t in threading.enumerate())


def test_result_reads_without_waiting(q: leaseq.Queue) -> None:
    r = q.enqueue("r", None)
    with pytest.raises(leaseq.ResultNotReady) as info:
        q.result(r.id)
    assert (info.value.job_id, info.value.state) == (r.id, "available")
    [job] = q.dequeue("r")
    with pytest.raises(leaseq.ResultNotReady, match="running"):
        q.result(r.id)
    q.ack(job)  # no result: None
    assert q.result(r.id) is None
    with pytest.raises(leaseq.JobNotFound):
        q.result(r.id + 1000)
    with pytest.raises(leaseq.JobNotFound):
        q.wait(r.id + 1000, timeout=1)


def test_failed_jobs_raise_job_failed_with_the_last_error(q: leaseq.Queue) -> None:
    dead = q.enqueue("r", 1, max_attempts=1)
    [job] = q.dequeue("r")
    assert q.nack(job, ValueError("boom")) == "dead"
    buried = q.enqueue("r", 2)
    [job] = q.dequeue("r")
    q.bury(job, reason="needs a human")
    discarded = q.enqueue("r", 3)
    q.discard(discarded.id, reason="obsolete")
    cancelled = q.enqueue("r", 4)
    q.cancel(cancelled.id)
    expected = [(dead, "dead", "ValueError: boom"), (buried, "dead", "needs a human"),
                (discarded, "discarded", "obsolete"), (cancelled, "cancelled", "cancelled")]
    for r, state, error in expected:
        for read in (partial(r.wait, timeout=5), partial(q.result, r.id)):
            with pytest.raises(leaseq.JobFailed) as info:
                read()
            assert (info.value.job_id, info.value.state, info.value.error) == (r.id, state, error)
            assert f"job {r.id} is {state}" in str(info.value)


def test_a_failure_while_waiting_wakes_the_waiter(q: leaseq.Queue) -> None:
    r = q.enqueue("r", 1, max_attempts=1)

    def fail() -> None:
        [job] = q.dequeue("r", wait=5)
        q.nack(job, "it broke")

    threading.Thread(target=fail, daemon=True).start()
    with pytest.raises(leaseq.JobFailed, match="it broke") as info:
        r.wait(timeout=10)
    assert info.value.state == "dead"


def test_timeout(q: leaseq.Queue) -> None:
    r = q.enqueue("r", None)
    with pytest.raises(TimeoutError, match=f"job {r.id} did not finish within 0.05 s"):
        r.wait(timeout=0.05)
    with pytest.raises(TimeoutError):
        q.wait(r.id, timeout=0)
    with pytest.raises(leaseq.InvalidArgument, match="timeout"):
        q.wait(r.id, timeout=-1)


def test_wait_async(q: leaseq.Queue) -> None:
    async def main() -> None:
        async with connect_async(q) as aq:
            await waits(aq)

    async def waits(aq: leaseq.AsyncQueue) -> None:
        r = await aq.enqueue("r", "a")
        plain = q.enqueue("r", "b")
        thread = ack_later(q, {r.id: "A", plain.id: "B"})
        # An AsyncQueue's result, and a sync Queue's result awaited on this loop.
        both = await asyncio.gather(r.wait_async(timeout=10), plain.wait_async(timeout=10))
        assert list(both) == ["A", "B"]
        assert await aq.wait(r.id, timeout=1) == "A"
        assert await aq.result(plain.id) == "B"
        await asyncio.to_thread(thread.join, 10)
        with pytest.raises(leaseq.InvalidArgument, match="AsyncQueue"):
            r.wait(timeout=1)  # its connections belong to this loop
        pending = await aq.enqueue("r", "c")
        with pytest.raises(TimeoutError):
            await pending.wait_async(timeout=0.05)
        with pytest.raises(leaseq.ResultNotReady):
            await aq.result(pending.id)
        # A cancelled wait leaves nothing registered. Cancelled while it waits for a
        # wake-up; a cancel that lands mid-read and that the read swallows is the next
        # test's.
        waiting = asyncio.ensure_future(aq.wait(pending.id, timeout=60))
        deadline = time.monotonic() + 10
        while not _suspended_in(waiting, "wait_event"):
            assert time.monotonic() < deadline, "the wait never waited for a wake-up"
            await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not q._results_hub().waiting

    asyncio.run(main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is 3.11's")
def test_a_cancel_a_read_swallowed_still_ends_the_async_wait(q: leaseq.Queue) -> None:
    """A driver's asyncio.wait_for can drop a cancel on Python 3.11 (gh-86296): the read
    returns normally. The wait notices the cancel still counted on its task and ends."""

    async def main() -> None:
        async with connect_async(q) as aq:
            pending = await aq.enqueue("r", "never acked")
            reading = asyncio.Event()
            reads = 0

            async def swallowing_get(job_id: int) -> leaseq.JobInfo:
                nonlocal reads
                reads += 1
                if reads > 1:  # the first read is before the loop
                    try:
                        reading.set()
                        await asyncio.sleep(30)
                    except asyncio.CancelledError:
                        pass  # what the driver's wait_for does when its call ends then
                return await aq.get(job_id)

            hub = aq._results_hub()
            waiting = asyncio.ensure_future(
                _results.wait_async(swallowing_get, hub, pending.id, 60.0))
            await asyncio.wait_for(reading.wait(), 10)
            waiting.cancel()
            done, _ = await asyncio.wait({waiting}, timeout=10)
            assert waiting in done, "the swallowed cancel left the wait running"
            assert waiting.cancelled()
            assert not hub.waiting

    asyncio.run(main())


def _suspended_in(task: asyncio.Future[Any], name: str) -> bool:
    """True while ``task`` is suspended inside a coroutine called ``name``."""
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    while coro is not None:
        if getattr(coro, "__name__", "") == name:
            return True
        coro = getattr(coro, "cr_await", None)
    return False


def test_many_waiters_share_one_listener(q: leaseq.Queue, prefix: str) -> None:
    ids = [r.id for r in q.enqueue_many([{"queue": "r", "payload": i} for i in range(40)])]
    values: dict[int, object] = {}
    listeners: list[int] = []

    def wait_in_thread(job_id: int) -> None:
        values[job_id] = q.wait(job_id, timeout=20)

    async def wait_on_loop() -> list[object]:
        # Twenty coroutines on one job each, and five more on jobs threads wait on.
        async with connect_async(q) as aq:
            return list(await asyncio.gather(*(aq.wait(i, timeout=20)
                                               for i in ids[20:] + ids[:5])))

    threads = [threading.Thread(target=wait_in_thread, args=(i,)) for i in ids[:20]]
    for thread in threads:
        thread.start()
    hub = q._results_hub()

    def finish_all() -> None:
        while len(hub._slots) < 20:  # the registered waiters, read only
            threading.Event().wait(0.01)
        listeners.append(sum(t.name == f"leaseq-results-{prefix}" for t in threading.enumerate()))
        jobs = q.dequeue("r", limit=40)
        assert q.ack_many([(job, {"n": job.payload}) for job in jobs]) == [True] * 40

    finisher = threading.Thread(target=finish_all)
    finisher.start()
    awaited = asyncio.run(wait_on_loop())
    finisher.join(20)
    for thread in threads:
        thread.join(20)
    assert values == {i: {"n": n} for n, i in enumerate(ids[:20])}
    assert awaited == [{"n": n} for n in range(20, 40)] + [{"n": n} for n in range(5)]
    assert listeners == [1 if q.backend in PUSH else 0]  # one connection for them all


def test_close_ends_a_wait(backend: str, url: str, prefix: str) -> None:
    client = leaseq.connect(url, table_prefix=prefix)
    client.migrate()
    r = client.enqueue("r", None)
    failure: list[BaseException] = []

    def wait() -> None:
        try:
            r.wait()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    hub = client._results_hub()
    while not hub.waiting:
        threading.Event().wait(0.01)
    client.close()
    thread.join(10)
    assert [type(exc) for exc in failure] == [leaseq.ClientClosed]
    from tests.helpers import drop_tables

    drop_tables(backend, prefix)


@dataclass
class Receipt:
    order: int
    total: float


def test_tasks_decode_results_and_report_failures(url: str, prefix: str, q: leaseq.Queue) -> None:
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="t")
    def bill(order: int) -> Receipt:
        return Receipt(order, order * 1.5)

    @app.task(queue="t", max_attempts=1)
    def explode() -> None:
        raise RuntimeError("kaboom")

    @app.task(queue="t")
    def drop() -> None:
        raise leaseq.Discard("not needed")

    async def enqueue_async() -> tuple[leaseq.EnqueueResult, Receipt]:
        r = await bill.enqueue_async(order=7)
        value = await r.wait_async(timeout=15)
        await app.async_queue.close()
        return r, value

    try:
        with running(app, poll_interval=0.05):
            assert bill.enqueue(order=2).wait(timeout=15) == Receipt(2, 3.0)
            r, value = asyncio.run(enqueue_async())
            assert value == Receipt(7, 10.5)
            assert r.wait(timeout=1) == Receipt(7, 10.5)  # enqueue_async, then a sync wait
            assert q.wait(r.id) == {"order": 7, "total": 10.5}  # the stored JSON
            with pytest.raises(leaseq.JobFailed, match="RuntimeError: kaboom") as info:
                explode.enqueue().wait(timeout=15)
            assert info.value.state == "dead"
            with pytest.raises(leaseq.JobFailed) as info:
                drop.enqueue().wait(timeout=15)
            # The worker records Discard as bury, then discard: a waiter may see either.
            assert info.value.state in ("dead", "discarded")
            assert info.value.error == "not needed"
    finally:
        app.close()


def test_enqueue_results_compare_as_before() -> None:
    made = leaseq.EnqueueResult(5, True)
    bound = leaseq.EnqueueResult(5, True, waiter=_results.AsyncQueueWaiter(None))  # type: ignore[arg-type]
    assert made == bound and hash(made) == hash(bound)
    assert repr(bound) == "EnqueueResult(id=5, created=True)"
    assert pickle.loads(pickle.dumps(bound)) == made
    with pytest.raises(leaseq.InvalidArgument, match=r"queue\.wait"):
        made.wait()
    with pytest.raises(leaseq.InvalidArgument, match=r"queue\.wait"):
        asyncio.run(made.wait_async())
    failed = pickle.loads(pickle.dumps(leaseq.JobFailed(3, "dead", "boom")))
    assert (failed.job_id, failed.state, failed.error, str(failed)) == (
        3, "dead", "boom", "job 3 is dead: boom")
    assert str(leaseq.JobFailed(4, "cancelled")) == "job 4 is cancelled (no error recorded)"


def test_inline_mode_returns_the_result() -> None:
    from leaseq.testing import inline

    app = leaseq.App("memory://")

    @app.task
    def bill(order: int) -> Receipt:
        return Receipt(order, 1.0)

    with inline(app):
        assert bill.enqueue(order=1).wait() == Receipt(1, 1.0)
        assert asyncio.run(_await_inline(bill)) == Receipt(2, 1.0)


async def _await_inline(task: leaseq.Task[..., Receipt]) -> Receipt:
    result: Receipt = await (await task.enqueue_async(order=2)).wait_async()
    return result


CHILD = """
import json, sys
import leaseq
from leaseq import _results
url, prefix, ids, push = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1"
if push:
    # Reads only on a wake-up: returning at all shows the finish was pushed here.
    _results.POLL_FIRST = _results.POLL_CAP = 3600.0
q = leaseq.connect(url, table_prefix=prefix)
try:
    q.wait(ids[0], timeout=0.2)  # connects the listener, which stays for the real wait
except TimeoutError:
    pass
print("waiting", flush=True)
out = []
for job_id in ids:
    try:
        out.append(q.wait(job_id))
    except leaseq.JobFailed as exc:
        out.append([exc.state, exc.error])
print(json.dumps(out), flush=True)
"""


def test_a_waiter_in_another_process_is_woken(backend: str, q: leaseq.Queue, prefix: str) -> None:
    if backend == "memory":
        pytest.skip("memory:// is private to one process")
    done = q.enqueue("r", None)
    dead = q.enqueue("r", None, max_attempts=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, q.url, prefix, json.dumps([done.id, dead.id]),
         "1" if backend in PUSH else "0"],
        stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        jobs = {job.id: job for job in q.dequeue("r", limit=2)}
        assert q.ack_many([(jobs[done.id], {"from": "parent"})]) == [True]
        q.nack(jobs[dead.id], "parent gave up")
        out, _ = child.communicate(timeout=30)
        assert json.loads(out) == [{"from": "parent"}, ["dead", "parent gave up"]]
        assert child.returncode == 0
    finally:
        if child.poll() is None:
            child.kill()
