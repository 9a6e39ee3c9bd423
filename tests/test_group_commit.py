"""Group commit: concurrent ``enqueue`` calls of one client share a transaction, and each
caller still gets exactly what a lone enqueue would have given it.

Every test runs on each backend (memory writes directly and is there as the reference).
Where a test needs its callers in one batch for certain, ``holding`` keeps the first write
waiting until the others have queued up behind it, so the batch is not left to timing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

import leaseq
from leaseq._core.job import EnqueueResult
from leaseq.backends.base import NewJob
from tests.helpers import MYSQL_URL, POSTGRES_URL, SQL_BACKENDS, wait_for

CTX = multiprocessing.get_context("spawn")
THREADS = 32


class Batches:
    """Wraps a client's grouped write: records each batch's size, and can hold the first
    write until ``hold_until`` callers wait behind it."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.sizes: list[int] = []
        self.hold_until = 0
        self._write = group._write
        self._first = True

    def pending(self) -> int:
        return len(self.group._pending)

    def _should_hold(self) -> bool:
        first, self._first = self._first, False
        return first and self.hold_until > 0

    def write(self, jobs: list[NewJob]) -> list[EnqueueResult]:
        if self._should_hold():
            wait_for(lambda: self.pending() >= self.hold_until, timeout=20,
                     interval=0.005, message=f"{self.hold_until} callers queued")
        self.sizes.append(len(jobs))
        return self._write(jobs)  # type: ignore[no-any-return]


@contextmanager
def batches(q: leaseq.Queue, hold_until: int = 0) -> Iterator[Batches]:
    if q._group is None:  # memory: every enqueue writes directly
        yield Batches(type("NoGroup", (), {"_write": None, "_pending": ()})())
        return
    b = Batches(q._group)
    b.hold_until = hold_until
    q._group._write = b.write
    try:
        yield b
    finally:
        q._group._write = b._write


def grouped(q: leaseq.Queue | leaseq.AsyncQueue) -> bool:
    return q._group is not None


def in_threads(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i in range(n), each in its own thread, all at once; the outcome
    (a value, or the exception it raised) of each, in order."""
    start = threading.Barrier(n)

    def run(i: int) -> Any:
        start.wait(timeout=20)
        try:
            return call(i)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


# -- every acknowledged enqueue is committed ------------------------------------------------


def test_threads_each_id_committed_when_enqueue_returns(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    """32 threads, 8 enqueues each: as each call returns, another client (its own connection)
    already sees the job; and calls did share transactions."""
    reader = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    try:
        with batches(q) as b:
            def produce(i: int) -> list[int]:
                ids = []
                for n in range(8):
                    job_id = q.enqueue("gc", {"thread": i, "n": n}).id
                    assert reader.get(job_id).payload == {"thread": i, "n": n}
                    ids.append(job_id)
                return ids

            outcomes = in_threads(THREADS, produce)
    finally:
        reader.close()
    for outcome in outcomes:
        assert isinstance(outcome, list), outcome
    ids = [job_id for outcome in outcomes for job_id in outcome]
    assert len(set(ids)) == THREADS * 8
    assert q.stats()["gc"].available == THREADS * 8
    if grouped(q):
        assert max(b.sizes) > 1, b.sizes
        assert sum(b.sizes) == THREADS * 8


def test_tasks_each_id_committed_when_enqueue_returns(url: str, prefix: str,
                                                      q: leaseq.Queue) -> None:
    async def main() -> tuple[list[int], list[int]]:
        aq = leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None)
        reader = leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None)
        sizes: list[int] = []
        if aq._group is not None:
            write = aq._group._write

            async def counting(jobs: list[NewJob]) -> list[EnqueueResult]:
                sizes.append(len(jobs))
                return await write(jobs)

            aq._group._write = counting

        async def produce(i: int) -> list[int]:
            ids = []
            for n in range(8):
                job_id = (await aq.enqueue("gc", {"task": i, "n": n})).id
                assert (await reader.get(job_id)).payload == {"task": i, "n": n}
                ids.append(job_id)
            return ids

        try:
            got = await asyncio.gather(*(produce(i) for i in range(THREADS)))
        finally:
            await aq.close()
            await reader.close()
        return [job_id for ids in got for job_id in ids], sizes

    ids, sizes = asyncio.run(main())
    assert len(set(ids)) == THREADS * 8
    assert q.stats()["gc"].available == THREADS * 8
    if grouped(q):
        assert max(sizes) > 1, sizes


def test_a_task_cancelled_while_it_waits_writes_nothing(url: str, prefix: str,
                                                        q: leaseq.Queue) -> None:
    """Three tasks: the first's write is held; the second is cancelled while it waits for
    the next batch; the third goes on. Only the first and third jobs exist."""
    if not grouped(q):
        pytest.skip("memory writes every enqueue directly: there is no batch to leave")

    async def main() -> list[Any]:
        aq = leaseq.connect_async(url, table_prefix=prefix, reclaim_interval=None)
        assert aq._group is not None
        group, write, release = aq._group, aq._group._write, asyncio.Event()

        async def held(jobs: list[NewJob]) -> list[EnqueueResult]:
            if jobs[0].payload == '"first"':
                await release.wait()
            return await write(jobs)

        group._write = held

        async def until(condition: Callable[[], bool]) -> None:
            for _ in range(2000):
                if condition():
                    return
                await asyncio.sleep(0.005)
            raise AssertionError("timed out")

        try:
            first = asyncio.ensure_future(aq.enqueue("gc", "first"))
            await until(lambda: group._writing == 1)
            second = asyncio.ensure_future(aq.enqueue("gc", "second"))
            third = asyncio.ensure_future(aq.enqueue("gc", "third"))
            await until(lambda: len(group._pending) == 2)
            second.cancel()
            await until(lambda: len(group._pending) == 1)
            release.set()
            return list(await asyncio.gather(first, second, third, return_exceptions=True))
        finally:
            await aq.close()

    first, second, third = asyncio.run(main())
    assert isinstance(second, asyncio.CancelledError)
    assert isinstance(first, leaseq.EnqueueResult) and isinstance(third, leaseq.EnqueueResult)
    assert sorted(info.payload for info in q.jobs("gc")) == ["first", "third"]


# -- per-caller semantics inside one batch --------------------------------------------------


def test_same_unique_key_in_one_batch_creates_one_job(q: leaseq.Queue) -> None:
    """The first write (another key) is held until 24 callers with the same key queue
    behind it: they go as one batch; one creates, the others get its id."""
    with batches(q, hold_until=24) as b:
        outcomes = in_threads(25, lambda i: q.enqueue(
            "gc", {"i": i}, unique_key="shared" if i else "opener"))
    assert all(isinstance(o, leaseq.EnqueueResult) for o in outcomes), outcomes
    shared = outcomes[1:]
    assert sum(o.created for o in shared) == 1, shared
    assert len({o.id for o in shared}) == 1
    if grouped(q):
        assert 24 in b.sizes, b.sizes  # whoever came first was held; the rest went together
    assert q.stats()["gc"].available == 2


def test_unique_for_inside_a_batch(q: leaseq.Queue) -> None:
    """A key whose job finished recently returns that job for every caller of the batch."""
    done = q.enqueue("gc", None, unique_key="recent")
    [job] = q.dequeue("gc")
    q.ack(job)
    with batches(q, hold_until=8):
        outcomes = in_threads(9, lambda i: q.enqueue(
            "gc", {"i": i}, unique_key="recent", unique_for=60) if i else q.enqueue("gc", 0))
    for o in outcomes[1:]:
        assert o == leaseq.EnqueueResult(done.id, False), outcomes


def test_queue_full_and_bad_input_reach_only_their_callers(q: leaseq.Queue) -> None:
    """One batch: 8 callers into a queue with room for 3, 8 into an unlimited queue, one
    with a bad payload. 3 + 8 succeed, 5 get QueueFull with nothing written for them,
    the bad one its own error."""
    q.configure_queue("capped", max_jobs=3)

    def call(i: int) -> leaseq.EnqueueResult:
        if i == 0:
            return q.enqueue("free", {"opener": True})
        if i == 1:
            return q.enqueue("free", {"bad": float("nan")})
        return q.enqueue("capped" if i % 2 else "free", {"i": i})

    with batches(q, hold_until=16) as b:
        outcomes = in_threads(18, call)
    assert isinstance(outcomes[1], leaseq.InvalidArgument | leaseq.PayloadNotSerializable), (
        outcomes[1])
    capped = [outcomes[i] for i in range(2, 18) if i % 2]
    free = [outcomes[i] for i in range(2, 18) if not i % 2]
    assert all(isinstance(o, leaseq.EnqueueResult) and o.created for o in free), free
    assert sum(isinstance(o, leaseq.EnqueueResult) for o in capped) == 3, capped
    assert sum(isinstance(o, leaseq.QueueFull) for o in capped) == 5, capped
    stats = q.stats()
    assert stats["capped"].available == 3
    assert stats["free"].available == 1 + len(free)
    if grouped(q):
        assert 16 in b.sizes, b.sizes  # the failed batch, then each job alone
        assert b.sizes.count(1) >= 16


def test_group_commit_off_writes_each_call_alone(url: str, prefix: str,
                                                 q: leaseq.Queue) -> None:
    solo = leaseq.connect(url, table_prefix=prefix, group_commit=False)
    try:
        assert solo._group is None
        outcomes = in_threads(8, lambda i: solo.enqueue("gc", {"i": i}))
    finally:
        solo.close()
    assert all(o.created for o in outcomes)
    with pytest.raises(leaseq.ConfigurationError, match="group_commit"):
        leaseq.Settings(group_commit="yes")  # type: ignore[arg-type]


# -- conn= stays in the caller's transaction ------------------------------------------------


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_conn_enqueue_rolls_back_while_others_group_commit(
    q: leaseq.Queue, backend: str, url: str
) -> None:
    own = open_connection(backend, url)
    try:
        with batches(q, hold_until=12) as b:
            def call(i: int) -> Any:
                if i == 13:
                    # Wait until a batch is under way, then enqueue in our transaction.
                    wait_for(lambda: b.sizes or b.pending() >= 12, timeout=20)
                    result = q.enqueue("mine", {"rolled": "back"}, conn=own)
                    own.rollback()
                    return result
                return q.enqueue("gc", {"i": i})

            outcomes = in_threads(14, call)
    finally:
        own.close()
    assert all(isinstance(o, leaseq.EnqueueResult) for o in outcomes), [
        o for o in outcomes if not isinstance(o, leaseq.EnqueueResult)]
    assert "mine" not in q.stats() or q.stats()["mine"].available == 0
    assert q.stats()["gc"].available == 13
    assert sum(b.sizes) == 13  # the conn= job never went through the group


def open_connection(backend: str, url: str) -> Any:
    if backend == "sqlite":
        return sqlite3.connect(url[len("sqlite:///"):], timeout=10, check_same_thread=False)
    if backend == "postgres":
        import psycopg

        return psycopg.connect(POSTGRES_URL)
    import pymysql

    parts = urlsplit(MYSQL_URL)
    return pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                           password=parts.password or "", database=parts.path.lstrip("/"),
                           autocommit=False)


# -- processes and threads -------------------------------------------------------------------

PROCESSES, PROC_THREADS, KEYS = 3, 8, 40


def produce_in_process(url: str, prefix: str, index: int, results: Any) -> None:
    """A child: PROC_THREADS threads of one client each enqueue every key (in its own
    order) and one plain job per key; reports ``(key or None, id, created)`` per call."""
    try:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
        start = threading.Barrier(PROC_THREADS)

        def thread(t: int) -> list[tuple[str | None, int, bool]]:
            start.wait(timeout=30)
            out: list[tuple[str | None, int, bool]] = []
            for k in range(KEYS):
                key = f"k{(k * 7 + t + index) % KEYS}"
                r = q.enqueue("race", {"p": index, "t": t}, unique_key=key)
                out.append((key, r.id, r.created))
                r = q.enqueue("plain", {"p": index, "t": t, "k": k})
                out.append((None, r.id, r.created))
            return out

        with ThreadPoolExecutor(PROC_THREADS) as pool:
            got = [row for rows in pool.map(thread, range(PROC_THREADS)) for row in rows]
        q.close()
        results.put(("done", index, got))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))


@pytest.mark.parametrize("backend", [*SQL_BACKENDS, "redis"], indirect=True)
def test_processes_and_threads_lose_and_duplicate_nothing(
    q: leaseq.Queue, url: str, prefix: str, backend: str
) -> None:
    results = CTX.Queue()
    procs = [CTX.Process(target=produce_in_process, args=(url, prefix, i, results))
             for i in range(PROCESSES)]
    for p in procs:
        p.start()
    rows: list[tuple[str | None, int, bool]] = []
    try:
        for _ in procs:
            msg = results.get(timeout=90)
            assert msg[0] == "done", f"child {msg[1]} failed:\n{msg[2]}"
            rows += msg[2]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    calls = PROCESSES * PROC_THREADS * KEYS
    keyed = [(key, job_id, created) for key, job_id, created in rows if key is not None]
    plain = [job_id for key, job_id, _ in rows if key is None]
    assert len(keyed) == len(plain) == calls
    # Each key: exactly one creation, and every caller got that job's id.
    created = Counter(key for key, _, c in keyed if c)
    assert created == Counter({f"k{k}": 1 for k in range(KEYS)})
    ids_by_key: dict[str, set[int]] = {}
    for key, job_id, _ in keyed:
        ids_by_key.setdefault(key, set()).add(job_id)
    assert all(len(ids) == 1 for ids in ids_by_key.values()), ids_by_key
    # Plain jobs: one each, nothing lost, nothing doubled.
    assert len(set(plain)) == calls
    stats = q.stats()
    assert stats["race"].available == KEYS
    assert stats["plain"].available == calls
    live = {info.unique_key: info.id for info in q.jobs("race", limit=1000)}
    assert live == {key: next(iter(ids)) for key, ids in ids_by_key.items()}



# -- tracing and wake-ups ---------------------------------------------------------------------


def test_one_span_per_enqueue_and_each_job_carries_its_own(q: leaseq.Queue) -> None:
    """16 traced enqueues in one batch: 16 PRODUCER spans, each job's headers holding the
    trace context of its own caller's span."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import leaseq.tracing

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    leaseq.tracing.instrument(tracer_provider=provider)
    try:
        with batches(q, hold_until=15) as b:
            outcomes = in_threads(16, lambda i: q.enqueue("gc", {"i": i}))
    finally:
        leaseq.tracing.uninstrument()
    assert all(isinstance(o, leaseq.EnqueueResult) for o in outcomes), outcomes
    if grouped(q):
        assert 15 in b.sizes, b.sizes
    spans = [s for s in exporter.get_finished_spans() if s.name == "leaseq.enqueue gc"]
    assert len(spans) == 16
    by_job = {s.attributes["messaging.message.id"]: s for s in spans}  # type: ignore[index]
    for o in outcomes:
        span = by_job[str(o.id)]
        headers = q.get(o.id).headers
        assert headers is not None
        parent = headers["traceparent"]
        assert parent.split("-")[2] == format(span.context.span_id, "016x")


def test_grouped_enqueues_fire_the_in_process_wake_up(q: leaseq.Queue) -> None:
    """Workers of this process hear of a batch's jobs as they hear of a lone enqueue's
    (``_wakeup``, which a blocking dequeue and the worker subscribe to)."""
    from leaseq import _wakeup

    heard: list[str] = []
    unsubscribe = _wakeup.subscribe(q._wake_key, heard.extend)
    try:
        with batches(q, hold_until=7) as b:
            in_threads(8, lambda i: q.enqueue(f"wake{i % 2}", {"i": i}))
    finally:
        unsubscribe()
    assert set(heard) == {"wake0", "wake1"}
    if grouped(q):
        assert b.sizes == [1, 7], b.sizes
        assert len(heard) == 3  # the lone write's queue, then the batch's two, once each
