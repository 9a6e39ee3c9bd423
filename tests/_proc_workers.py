"""Child-process bodies for tests/test_concurrency.py.

They live in an importable module because the tests start children with the ``spawn``
method: each child imports this module afresh and builds its own ``leaseq`` client, exactly
as separate worker processes in production would. Every body reports an unexpected
exception to the parent as ``("error", who, traceback)`` on its result queue before exiting.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from collections.abc import Callable
from typing import Any

import leaseq
from leaseq import Job, LeaseLost

# The barrier and the events are multiprocessing objects; typed loosely here on purpose.
Sync = Any


def _report_errors(who: str, results: Sync, body: Callable[[], None]) -> None:
    try:
        body()
    except BaseException:
        results.put(("error", who, traceback.format_exc()))
        raise


# -- (a) draining with nack, release, heartbeat, abandonment and zombie acks -------------


def drain(
    url: str, prefix: str, index: int, seed: int, queue: str, log_path: str, lease: float,
    barrier: Sync, stop: Sync, results: Sync,
) -> None:
    """Work ``queue`` until ``stop`` is set, logging every lease and every fenced call.

    Per dequeued job (random, seeded): ~5 % are abandoned (no call at all, so the lease
    expires and the job is reclaimed) and later acked, nacked, released or heartbeated by
    the zombie still holding the old token;
    ~10 % are nacked with delay 0, ~10 % released, the rest acked; ~10 % heartbeat first.

    Log lines (JSON): ``event`` is ``start`` for a dequeue and ``<op>_ok`` or
    ``<op>_stale`` (LeaseLost) for ack/nack/release/heartbeat; ``t0``/``t1`` are
    ``time.monotonic()`` just before and just after the call (one clock for all processes
    on Linux), ``value`` what the call returned.
    """

    def body() -> None:
        rng = random.Random(seed)
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=0, pool_size=2)
        zombies: list[tuple[float, Job]] = []
        with open(log_path, "a", buffering=1) as log:

            def record(event: str, job: Job, t0: float, t1: float, **extra: Any) -> None:
                line = {"event": event, "id": job.id, "token": job.lease_token,
                        "proc": index, "t0": t0, "t1": t1, **extra}
                log.write(json.dumps(line) + "\n")

            def fenced(op: str, job: Job, call: Callable[[], Any]) -> None:
                t0 = time.monotonic()
                try:
                    value = call()
                except LeaseLost:
                    record(f"{op}_stale", job, t0, time.monotonic())
                    return
                if hasattr(value, "timestamp"):
                    value = value.timestamp()
                record(f"{op}_ok", job, t0, time.monotonic(), value=value)

            def ack(job: Job) -> None:
                fenced("ack", job, lambda: q.ack(job, result={"proc": index,
                                                              "token": job.lease_token}))

            q.stats()  # open the connection before the start line
            barrier.wait(timeout=60)
            while not stop.is_set():
                now = time.monotonic()
                due = [job for at, job in zombies if at <= now]
                zombies[:] = [(at, job) for at, job in zombies if at > now]
                for job in due:
                    # A zombie wakes up: its calls get LeaseLost once the job was reclaimed.
                    op = rng.choice(["ack", "ack", "nack", "release", "heartbeat"])
                    if op == "ack":
                        ack(job)
                    elif op == "nack":
                        fenced("nack", job, lambda job=job: q.nack(job, error="late", delay=0))
                    elif op == "release":
                        fenced("release", job, lambda job=job: q.release(job))
                    else:
                        fenced("heartbeat", job, lambda job=job: q.heartbeat(job, extend=lease))
                t0 = time.monotonic()
                jobs = q.dequeue(queue, worker_id=f"p{index}", lease=lease,
                                 limit=rng.randint(1, 4))
                t1 = time.monotonic()
                if not jobs:
                    time.sleep(0.005)  # an idle worker's poll interval
                    continue
                for job in jobs:
                    record("start", job, t0, t1, attempts=job.attempts,
                           lease_until=job.lease_until.timestamp())
                for job in jobs:
                    roll = rng.random()
                    if roll < 0.05 and job.attempts <= 3:
                        zombies.append((time.monotonic() + rng.uniform(0.2, 1.5), job))
                        continue
                    if rng.random() < 0.1:
                        fenced("heartbeat", job, lambda job=job: q.heartbeat(job, extend=lease))
                    if roll < 0.15:
                        fenced("nack", job, lambda job=job: q.nack(job, error="flaky", delay=0))
                    elif roll < 0.25:
                        fenced("release", job, lambda job=job: q.release(job))
                    else:
                        ack(job)
        q.close()
        results.put(("done", index))

    _report_errors(f"drain-{index} (seed {seed})", results, body)


# -- (b) racing producers on one unique key ------------------------------------------


def race_unique(
    url: str, prefix: str, index: int, queue: str, keys: list[str], barrier: Sync,
    results: Sync,
) -> None:
    """For each key: wait for all racers, then enqueue it (odd racers through
    ``enqueue``, even ones through ``enqueue_many``) and report ``(key, id, created)``."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        q.stats()  # connect before the race, so the racers start level
        for key in keys:
            barrier.wait(timeout=60)
            payload = {"by": index, "key": key}
            if index % 2:
                r = q.enqueue(queue, payload, unique_key=key)
            else:
                [r] = q.enqueue_many([{"queue": queue, "payload": payload, "unique_key": key}])
            results.put(("enqueued", index, key, r.id, r.created))
        q.close()

    _report_errors(f"racer-{index}", results, body)


# -- (c) a stale holder and the fresh one ---------------------------------------------


def _outcome(call: Callable[[], Any]) -> str:
    try:
        call()
    except leaseq.LeaseqError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


def stale_holder(
    url: str, prefix: str, queue: str, lease: float, rounds: int, go: Sync, results: Sync,
) -> None:
    """Dequeue one job with a short lease, report it, then freeze. Each time ``go`` is
    set (``rounds`` times; the parent clears it before it reads the report), try every
    fenced call with the old job and report each outcome."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        [job] = q.dequeue(queue, worker_id="A", lease=lease)
        results.put(("leased", "A", job))
        for n in range(rounds):
            if not go.wait(timeout=60):
                raise TimeoutError("the parent never released holder A")
            go.clear()
            outcomes = {
                "ack": _outcome(lambda: q.ack(job, result={"by": "A"})),
                "nack": _outcome(lambda: q.nack(job, error="A failed", delay=0)),
                "heartbeat": _outcome(lambda: q.heartbeat(job, extend=60)),
                "release": _outcome(lambda: q.release(job)),
                "bury": _outcome(lambda: q.bury(job, reason="A buries")),
            }
            results.put(("outcomes", n, outcomes))
        q.close()

    _report_errors("holder A", results, body)


def fresh_holder(
    url: str, prefix: str, queue: str, lease: float, go: Sync, results: Sync,
) -> None:
    """Dequeue (the parent starts this once the job is available again), report the job,
    and ack it when ``go`` is set."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        [job] = q.dequeue(queue, worker_id="B", lease=lease)
        results.put(("leased", "B", job))
        if not go.wait(timeout=60):
            raise TimeoutError("the parent never released holder B")
        q.ack(job, result={"by": "B"})
        results.put(("acked", "B", job.lease_token))
        q.close()

    _report_errors("holder B", results, body)


def race_batches(
    url: str, prefix: str, index: int, seed: int, queue: str, rounds: int, keys: int,
    barrier: Sync, results: Sync,
) -> None:
    """Each round: wait for all racers, then ``enqueue_many`` the round's ``keys`` unique
    keys in an order of this racer's own, plus one plain job, and report the keys in that
    order (None for the plain job) with ``[(id, created), ...]``. The racers' different
    orders make the databases' locks cross."""

    def body() -> None:
        rng = random.Random(seed)
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        q.stats()
        for r in range(rounds):
            names = [f"r{r}-k{k}" for k in range(keys)]
            rng.shuffle(names)
            items: list[dict[str, Any]] = [
                {"queue": queue, "payload": {"by": index}, "unique_key": key} for key in names
            ]
            plain = {"queue": queue, "payload": {"plain": index}}
            items.insert(rng.randrange(len(items) + 1), plain)
            barrier.wait(timeout=60)
            out = q.enqueue_many(items)
            results.put(("batch", index, r, [item.get("unique_key") for item in items],
                         [(res.id, res.created) for res in out]))
        q.close()

    _report_errors(f"batch-racer-{index} (seed {seed})", results, body)


# -- (e) racing producers against max_jobs and the unique_for window ----------------------


def race_capped(
    url: str, prefix: str, index: int, queue: str, rounds: int, barrier: Sync, results: Sync,
) -> None:
    """Each round: wait for all racers, then try one enqueue (odd racers a batch of two)
    and report ``("capped", index, created_ids, full)``."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        q.stats()
        for _ in range(rounds):
            barrier.wait(timeout=60)
            try:
                if index % 2:
                    done = q.enqueue_many([{"queue": queue}, {"queue": queue}])
                else:
                    done = [q.enqueue(queue)]
                results.put(("capped", index, [r.id for r in done], False))
            except leaseq.QueueFull:
                results.put(("capped", index, [], True))
        q.close()

    _report_errors(f"capped-{index}", results, body)


def race_unique_for(
    url: str, prefix: str, index: int, queue: str, keys: list[str], barrier: Sync,
    results: Sync,
) -> None:
    """For each key: wait for all racers, then enqueue it with a 60 s ``unique_for`` window
    and report ``("windowed", index, key, id, created)``."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        q.stats()
        for key in keys:
            barrier.wait(timeout=60)
            r = q.enqueue(queue, {"by": index}, unique_key=key, unique_for=60)
            results.put(("windowed", index, key, r.id, r.created))
        q.close()

    _report_errors(f"windowed-{index}", results, body)


# -- (f) racing producers of one global unique key, each in a queue of its own -----------


def race_global_key(
    url: str, prefix: str, index: int, keys: list[str], barrier: Sync, results: Sync,
) -> None:
    """For each key: wait for all racers, then enqueue it with ``unique_scope="global"``
    in queue ``g<index>`` (odd racers in a batch with a plain job) and report
    ``("global", index, key, id, created)``."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        q.stats()
        queue = f"g{index}"
        for key in keys:
            barrier.wait(timeout=60)
            if index % 2:
                r = q.enqueue_many([{"queue": queue, "unique_key": key,
                                     "unique_scope": "global"}, {"queue": queue}])[0]
            else:
                r = q.enqueue(queue, {"by": index}, unique_key=key, unique_scope="global")
            results.put(("global", index, key, r.id, r.created))
        q.close()

    _report_errors(f"global-{index}", results, body)


# -- (g) racing producers, each creating queues of its own, against max_queues -----------


def race_new_queues(
    url: str, prefix: str, index: int, rounds: int, barrier: Sync, results: Sync,
) -> None:
    """Each round: wait for all racers, then enqueue into a queue of its own not used
    before (odd racers: a batch into two new queues) and report
    ``("queues", index, queues_written, refused)``."""

    def body() -> None:
        q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)
        q.stats()
        for n in range(rounds):
            barrier.wait(timeout=60)
            names = [f"r{index}-{n}"] + ([f"r{index}-{n}b"] if index % 2 else [])
            try:
                q.enqueue_many([{"queue": name} for name in names])
                results.put(("queues", index, names, False))
            except leaseq.TooManyQueues:
                results.put(("queues", index, [], True))
        q.close()

    _report_errors(f"queues-{index}", results, body)


def race_new_flow_queues(
    url: str, prefix: str, index: int, rounds: int, barrier: Sync, results: Sync,
) -> None:
    """``race_new_queues`` with chains: each round, a chain whose first step goes to the
    counted queue "first" and whose later step names a queue of its own not used before;
    reports ``("flows", index, queues_counted, refused)``."""

    def body() -> None:
        app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None, pool_size=1)

        @app.task(queue="first", name="step")
        def step(x: int = 0) -> int:
            return x

        app.queue.stats()
        for n in range(rounds):
            barrier.wait(timeout=60)
            name = f"f{index}-{n}"
            try:
                leaseq.chain(step.s(1), step.options(queue=name).s()).enqueue()
                results.put(("flows", index, [name], False))
            except leaseq.TooManyQueues:
                results.put(("flows", index, [], True))
        app.close()

    _report_errors(f"flows-{index}", results, body)
