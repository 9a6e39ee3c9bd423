"""Real OS processes against one database: the guarantees that only show under races.

Each test runs once per shared backend (sqlite, postgres, mysql, redis) on fresh tables
(or Redis keys): the ``q`` fixture migrates them once in this process and drops them at
the end; every child process (``spawn`` start method, see ``tests/_proc_workers.py``)
builds its own client with ``leaseq.connect(url, table_prefix=prefix)``. For SQLite all
processes share one file.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue as stdlib_queue
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import leaseq
from tests import _proc_workers as workers
from tests.conftest import require
from tests.helpers import SQL_BACKENDS, wait_for

CTX = multiprocessing.get_context("spawn")
BASE_SEED = int(os.environ.get("LEASEQ_TEST_SEED", "20240611"))


@pytest.fixture(params=[*SQL_BACKENDS, "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's ``backend`` here: only backends real processes can share."""
    name: str = request.param
    require(name)
    return name


@contextmanager
def spawned(*procs: Any) -> Iterator[None]:
    """Start the processes; on the way out join them, or (after a failure here) stop
    them at once rather than leave them waiting on a barrier."""
    for p in procs:
        p.start()
    try:
        yield
    except BaseException:
        for p in procs:
            p.terminate()
        raise
    finally:
        for p in procs:
            p.join(timeout=15)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


def take(results: Any, kind: str, timeout: float = 30.0) -> tuple[Any, ...]:
    """The next message from a child; a child's traceback fails the test."""
    try:
        msg = results.get(timeout=timeout)
    except stdlib_queue.Empty:
        raise AssertionError(f"no {kind!r} message from a child within {timeout} s") from None
    if msg[0] == "error":
        raise AssertionError(f"child {msg[1]} failed:\n{msg[2]}")
    assert msg[0] == kind, msg
    return tuple(msg)


def race(
    target: Callable[..., None], kind: str, args: Callable[[int], tuple[Any, ...]], *,
    racers: int, replies: int, parties: int | None = None,
    meanwhile: Callable[[Any], None] | None = None,
    each: Callable[[tuple[Any, ...]], None] | None = None, timeout: float = 60.0,
) -> list[tuple[Any, ...]]:
    """Runs ``racers`` processes of ``target(*args(i), barrier, results)``, released
    together by one barrier of ``parties`` (the racers; more when ``meanwhile(barrier)``
    takes part from here), takes ``replies`` messages of ``kind`` (``each`` sees every
    one as it comes), checks that every racer exited cleanly and returns the messages
    without their kind and racer number."""
    barrier, results = CTX.Barrier(parties or racers), CTX.Queue()
    procs = [CTX.Process(target=target, name=f"{kind}-{i}", args=(*args(i), barrier, results))
             for i in range(racers)]
    messages: list[tuple[Any, ...]] = []
    with spawned(*procs):
        if meanwhile is not None:
            meanwhile(barrier)
        for _ in range(replies):
            message = take(results, kind, timeout=timeout)
            if each is not None:
                each(message)
            messages.append(message[2:])
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return messages


def live_total(stats: dict[str, leaseq.QueueStats]) -> int:
    return sum(s.available + s.scheduled + s.running + s.dead for s in stats.values())


# -- (a) four processes drain 2,000 jobs --------------------------------------------------

JOBS = 2000
WORKERS = 4
LEASE = 0.5
EPS = 0.005  # seconds of slack between two readings of the database clock


def test_four_processes_drain_2000_jobs_exactly_once(
    q: leaseq.Queue, url: str, prefix: str, tmp_path: Path
) -> None:
    seeds = [BASE_SEED + i for i in range(WORKERS)]
    print(f"drain seeds: {seeds} (set LEASEQ_TEST_SEED to change the base)")
    queue = "drain"
    ids: list[int] = []
    for start in range(0, JOBS, 500):
        batch = [{"queue": queue, "payload": {"n": n}, "max_attempts": 50}
                 for n in range(start, start + 500)]
        ids += [r.id for r in q.enqueue_many(batch)]
    assert len(set(ids)) == JOBS

    barrier, stop, results = CTX.Barrier(WORKERS + 1), CTX.Event(), CTX.Queue()
    logs = [tmp_path / f"drain-{i}.jsonl" for i in range(WORKERS)]
    procs = [
        CTX.Process(target=workers.drain, name=f"drain-{i}", args=(
            url, prefix, i, seeds[i], queue, str(logs[i]), LEASE, barrier, stop, results))
        for i in range(WORKERS)
    ]
    with spawned(*procs):
        barrier.wait(timeout=60)
        started = time.monotonic()

        def drained() -> bool:
            for p in procs:
                if p.exitcode is not None:
                    take(results, "done", timeout=1)  # surfaces the child's traceback
                    raise AssertionError(f"{p.name} exited early ({p.exitcode}); seeds {seeds}")
            stats = q.stats()
            return stats[queue].completed == JOBS and live_total(stats) == 0

        try:
            wait_for(drained, timeout=45, interval=0.1, message=f"the drain (seeds {seeds})")
        finally:
            stop.set()
        for _ in procs:
            take(results, "done")
        elapsed = time.monotonic() - started
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    print(f"drained {JOBS} jobs with {WORKERS} processes in {elapsed:.1f} s")

    events: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for log in logs:
        for line in log.read_text().splitlines():
            event = json.loads(line)
            events[event["id"]].append(event)
    try:
        check_drain_history(q, ids, events)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n(seeds {seeds})") from exc

    stats = q.stats()[queue]
    assert (stats.completed, stats.cancelled, stats.discarded) == (JOBS, 0, 0)
    assert live_total(q.stats()) == 0


def check_drain_history(
    q: leaseq.Queue, ids: list[int], events: dict[int, list[dict[str, Any]]]
) -> None:
    """The invariants behind "never concurrent" and "exactly-once recording", checked
    from the processes' logs and the database's history."""
    assert set(events) == set(ids), "a logged job was never enqueued, or one never dequeued"
    counts: dict[str, int] = defaultdict(int)
    for job_id in ids:
        evs = events[job_id]
        for e in evs:
            counts[e["event"]] += 1
        starts = sorted((e for e in evs if e["event"] == "start"), key=lambda e: e["token"])
        tokens = [s["token"] for s in starts]
        assert len(set(tokens)) == len(tokens), (
            f"job {job_id}: one lease token issued to two dequeues: {starts}")
        ok = [e for e in evs if e["event"].endswith("_ok")]
        acks = [e for e in ok if e["event"] == "ack_ok"]
        assert len(acks) == 1, f"job {job_id}: {len(acks)} acks accepted: {acks}"
        [ack] = acks

        # Every accepted fenced call held the newest token at that moment: the token was
        # issued, and no dequeue with a newer token had finished before the call began.
        for e in ok:
            assert e["token"] in tokens, f"job {job_id}: accepted unissued token {e}"
            newer = [s for s in starts if s["token"] > e["token"]]
            early = [s for s in newer if s["t1"] <= e["t0"]]
            assert not early, (
                f"job {job_id}: {e['event']} with token {e['token']} accepted after a newer "
                f"lease had been issued: {e} vs {early}")
        assert ack["token"] == tokens[-1], (
            f"job {job_id}: dequeued again after its ack was accepted: {ack} then {starts}")

        # Leases follow each other: token order is dequeue order, and a lease that ended
        # without nack or release was not re-issued before it expired (database clock).
        releases_before = 0
        for n, nxt in enumerate(starts):
            prev = starts[n - 1] if n else None
            assert nxt["attempts"] == n + 1 - releases_before, (
                f"job {job_id}: attempts {nxt['attempts']} at dequeue {n + 1} with "
                f"{releases_before} releases before: {starts}")
            if prev is not None:
                assert nxt["t1"] > prev["t0"], (
                    f"job {job_id}: token {nxt['token']} issued before token "
                    f"{prev['token']}: {prev} / {nxt}")
                handed_back = [e for e in ok if e["token"] == prev["token"]
                               and e["event"] in ("nack_ok", "release_ok")]
                if not handed_back:
                    lease_end = max([prev["lease_until"]] + [
                        e["value"] for e in ok
                        if e["token"] == prev["token"] and e["event"] == "heartbeat_ok"])
                    claimed_at = nxt["lease_until"] - LEASE
                    assert claimed_at >= lease_end - EPS, (
                        f"job {job_id}: token {nxt['token']} issued at {claimed_at:.3f} "
                        f"while token {prev['token']} was valid until {lease_end:.3f}")
            releases_before += sum(1 for e in ok if e["event"] == "release_ok"
                                   and e["token"] == (nxt["token"]))

        info = q.get(job_id)
        assert info.state == "completed", f"job {job_id} is {info.state}"
        assert info.result == {"proc": ack["proc"], "token": ack["token"]}, (
            f"job {job_id}: history holds result {info.result}, the accepted ack was {ack}")
        assert info.attempts == len(starts) - releases_before, (
            f"job {job_id}: history says {info.attempts} attempts; {len(starts)} dequeues, "
            f"{releases_before} releases")
    print("drain events:", dict(sorted(counts.items())))
    # The mix really happened (the seeds are fixed, so these are not luck).
    for event in ("nack_ok", "release_ok", "heartbeat_ok",
                  "ack_stale", "nack_stale", "release_stale", "heartbeat_stale"):
        assert counts[event] > 0, f"no {event} in the run: {dict(counts)}"


# -- (b) eight producers race for one unique key ----------------------------------------

RACERS = 8


def test_racing_producers_create_one_job_per_unique_key(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    queue = "unique"
    # Keys whose twin is already there: running, dead, in history, and one whose running
    # twin this process completes at the very moment the racers enqueue.
    twins: dict[str, int] = {}
    held: dict[str, leaseq.Job] = {}
    for key in ("running", "dead", "completed", "completing"):
        twins[key] = q.enqueue(queue, {"setup": key}, unique_key=key).id
        [held[key]] = q.dequeue(queue, worker_id="parent", lease=300)
        assert held[key].id == twins[key]
    q.bury(held["dead"], reason="to the dead letters")
    q.ack(held["completed"])
    assert q.get(twins["completed"]).state == "completed"

    fresh = [f"fresh-{n}" for n in range(20)]
    keys = [*fresh, "running", "dead", "completed", "completing"]
    barrier, results = CTX.Barrier(RACERS + 1), CTX.Queue()
    procs = [
        CTX.Process(target=workers.race_unique, name=f"racer-{i}",
                    args=(url, prefix, i, queue, keys, barrier, results))
        for i in range(RACERS)
    ]
    seen: dict[str, list[tuple[int, int, bool]]] = defaultdict(list)
    with spawned(*procs):
        for key in keys:
            barrier.wait(timeout=60)  # all 8 racers and this process start the round
            if key == "completing":
                q.ack(held["completing"])
        for _ in range(RACERS * len(keys)):
            _, index, key, job_id, created = take(results, "enqueued", timeout=60)
            seen[key].append((index, job_id, created))
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    ids: dict[str, int] = {}
    for key in keys:
        outcomes = seen[key]
        assert len(outcomes) == RACERS, (key, outcomes)
        created = [job_id for _, job_id, c in outcomes if c]
        got = {job_id for _, job_id, _ in outcomes}
        if key == "completing":
            # Racers before the ack see the twin; after it, exactly one creates a new job
            # and the rest see that one.
            assert len(created) <= 1, f"key {key!r}: created twice: {outcomes}"
            assert got <= {twins[key], *created}, f"key {key!r}: {outcomes}"
            if created:
                ids[key] = created[0]
            continue
        assert len(got) == 1, f"key {key!r}: racers got different ids: {outcomes}"
        ids[key] = got.pop()
        want = 0 if key in ("running", "dead") else 1
        assert len(created) == want, f"key {key!r}: {len(created)} racers created it: {outcomes}"

    assert ids["running"] == twins["running"]
    assert ids["dead"] == twins["dead"]
    assert ids["completed"] != twins["completed"]  # history holds no unique key
    assert len(set(ids.values())) == len(ids)
    for key, job_id in ids.items():
        info = q.get(job_id)
        assert info.unique_key == key
        want_state = {"running": "running", "dead": "dead"}.get(key, "available")
        assert info.state == want_state, (key, info)
    assert q.get(twins["completing"]).state == "completed"
    renewed = 1 if "completing" in ids else 0
    stats = q.stats()[queue]
    assert (stats.available, stats.scheduled, stats.running, stats.dead, stats.completed) == (
        len(fresh) + 1 + renewed, 0, 1, 1, 2), stats
    # The holder's lease is untouched by the duplicates.
    assert q.get(twins["running"]).lease_until == held["running"].lease_until
    q.ack(held["running"])


def test_racing_batches_with_crossing_unique_keys(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    """8 processes ``enqueue_many`` the same 10 unique keys in different orders at once:
    the writers' locks cross (the databases see deadlocks), yet each key is created exactly
    once, every racer learns the same id for it, and nobody sees an error."""
    queue, rounds, keys = "batches", 5, 10
    seeds = [BASE_SEED + 100 + i for i in range(RACERS)]
    barrier, results = CTX.Barrier(RACERS), CTX.Queue()
    procs = [
        CTX.Process(target=workers.race_batches, name=f"batch-racer-{i}",
                    args=(url, prefix, i, seeds[i], queue, rounds, keys, barrier, results))
        for i in range(RACERS)
    ]
    seen: dict[str, list[tuple[int, int, bool]]] = defaultdict(list)
    plain: list[int] = []
    with spawned(*procs):
        for _ in range(RACERS * rounds):
            # Generous: a racer that fails only gives up after its retries (a minute).
            _, index, _, names, out = take(results, "batch", timeout=120)
            assert len(out) == len(names), (
                f"racer {index}: {len(names)} items, {len(out)} results")
            for key, (job_id, created) in zip(names, out, strict=True):
                if key is None:
                    assert created, f"racer {index}: a plain job reported as a duplicate"
                    plain.append(job_id)
                else:
                    seen[key].append((index, job_id, created))
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    assert len(seen) == rounds * keys
    for key, outcomes in seen.items():
        assert len({job_id for _, job_id, _ in outcomes}) == 1, (
            f"key {key!r}: different ids {outcomes} (seeds {seeds})")
        assert sum(1 for *_, c in outcomes if c) == 1, (
            f"key {key!r}: created {sum(1 for *_, c in outcomes if c)} times: {outcomes}")
    unique_ids = {outcomes[0][1] for outcomes in seen.values()}
    assert len(unique_ids) == rounds * keys
    assert len(set(plain)) == RACERS * rounds
    assert not unique_ids & set(plain)
    stats = q.stats()[queue]
    assert stats.available == rounds * keys + RACERS * rounds, stats
    for key, outcomes in seen.items():
        assert q.get(outcomes[0][1]).unique_key == key


# -- (c) a stale holder against the fresh one ---------------------------------------------


def test_stale_holder_in_another_process_changes_nothing(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    queue = "stale"
    job_id = q.enqueue(queue, {"n": 1}, max_attempts=5).id
    go_a, go_b, results = CTX.Event(), CTX.Event(), CTX.Queue()
    holder_a = CTX.Process(target=workers.stale_holder, name="holder-A",
                           args=(url, prefix, queue, 0.3, 2, go_a, results))
    holder_b = CTX.Process(target=workers.fresh_holder, name="holder-B",
                           args=(url, prefix, queue, 60.0, go_b, results))
    with spawned(holder_a):
        _, _, job_a = take(results, "leased", timeout=60)
        assert job_a.id == job_id
        # A is frozen holding the job; once its 0.3 s lease is over, reclaim takes it back.
        wait_for(lambda: q.reclaim() == 1, timeout=10, message="the lease to be reclaimed")
        assert q.get(job_id).state == "available"

        with spawned(holder_b):
            _, _, job_b = take(results, "leased", timeout=60)
            assert job_b.id == job_id
            assert job_b.lease_token != job_a.lease_token
            assert job_b.attempts == 2
            before = q.get(job_id)
            assert (before.state, before.worker_id, before.attempts) == ("running", "B", 2)
            assert before.lease_until == job_b.lease_until

            go_a.set()  # A wakes up and tries everything with its old job
            _, _, outcomes = take(results, "outcomes")
            for op, outcome in outcomes.items():
                assert outcome.startswith("LeaseLost:"), f"A's {op} while B holds: {outcome}"
            after = q.get(job_id)
            assert after == before, (before, after)

            go_b.set()
            _, _, token = take(results, "acked")
            assert token == job_b.lease_token

        go_a.set()  # and once more, now that the job is in history
        _, _, outcomes = take(results, "outcomes")
        for op, outcome in outcomes.items():
            assert outcome.startswith("LeaseLost:"), f"A's {op} after B acked: {outcome}"
    assert (holder_a.exitcode, holder_b.exitcode) == (0, 0)

    info = q.get(job_id)
    assert (info.state, info.result, info.worker_id, info.attempts) == (
        "completed", {"by": "B"}, "B", 2)
    stats = q.stats()[queue]
    assert (stats.completed, stats.cancelled, stats.discarded) == (1, 0, 0)
    assert live_total(q.stats()) == 0
