"""The Redis backend on a Redis Cluster (``redis+cluster://``), where each queue's keys
share one slot and the global keys another, so operations that touch several run as one
script per slot (backends/redis/ops.py). The conformance suite runs on the cluster too
(tests/conformance/conftest.py); here is what only the cluster has to prove:

- the URL form, and refusals of what a cluster cannot do;
- a crash between the per-slot calls of enqueue and prune leaves nothing a reader takes
  for a job;
- push wake-ups reach a listener on another node than the queue's;
- the multi-process races of tests/test_concurrency.py (unique keys, a 4-process drain, a
  stale holder) on the cluster;
- two ``leaseq worker`` processes drain queues on all three masters, one killed midway:
  nothing lost, no job run twice at once.

The test app at the bottom is what those worker processes import.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import leaseq
from tests._processes import append_event
from tests.conftest import require
from tests.helpers import REDIS_CLUSTER_URL, drop_tables, new_prefix, redis_cluster, wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def backend() -> str:
    """Overrides conftest's ``backend``: every test here that takes ``q`` runs on the
    cluster only."""
    require("redis_cluster")
    return "redis_cluster"


def node_of(cluster: Any, key: str) -> str:
    """The name (host:port) of the primary that holds ``key``'s slot."""
    return str(cluster.get_node_from_key(key).name)


def queues_on_every_node(prefix: str, per_node: int = 1) -> list[str]:
    """Queue names ``q0``, ``q1``, ... chosen so that each primary holds ``per_node``
    of their slots (the slot depends on the prefix, which is random)."""
    from leaseq.backends.redis.keys import Keys

    cluster = redis_cluster()
    try:
        primaries = {node.name for node in cluster.get_primaries()}
        assert len(primaries) == 3, f"the test cluster has 3 masters, not {primaries}"
        chosen: dict[str, list[str]] = {name: [] for name in primaries}
        n = 0
        while any(len(names) < per_node for names in chosen.values()):
            queue = f"q{n}"
            names = chosen[node_of(cluster, Keys(prefix).settings(queue))]
            if len(names) < per_node:
                names.append(queue)
            n += 1
    finally:
        cluster.close()
    return sorted(queue for names in chosen.values() for queue in names)


# -- the URL ------------------------------------------------------------------------------


def test_a_cluster_url_names_one_node_and_only_database_0(prefix: str) -> None:
    require("redis_cluster")
    host = REDIS_CLUSTER_URL.split("://", 1)[1].split("/")[0]
    with pytest.raises(leaseq.ConfigurationError, match="only database 0"):
        leaseq.connect(f"redis+cluster://{host}/3", table_prefix=prefix)
    with leaseq.connect(f"redis+cluster://{host}/0", table_prefix=prefix) as q:
        job = q.enqueue("a", {"n": 1})
        assert q.get(job.id).payload == {"n": 1}
        assert q.backend == "redis"
    drop_tables("redis_cluster", prefix)


def test_a_plain_redis_url_to_a_cluster_node_fails_loudly_on_other_slots(
    prefix: str,
) -> None:
    """Without ``+cluster`` the client talks to one node as if it were a single server:
    its scripts span slots and the keys of most queues live elsewhere, and the error says
    to use the cluster URL."""
    require("redis_cluster")
    host = REDIS_CLUSTER_URL.split("://", 1)[1].split("/")[0]
    with leaseq.connect(f"redis://{host}/0", table_prefix=prefix) as q, pytest.raises(
        leaseq.ConfigurationError, match="redis\\+cluster://"
    ):
        for queue in queues_on_every_node(prefix):
            q.enqueue(queue)


def test_a_url_may_name_several_nodes_and_the_first_that_answers_serves(
    prefix: str,
) -> None:
    """A cluster URL listing a dead node first still works, sync and async, and the
    wake-up listener moves on to the next node (tested below with the same URL)."""
    require("redis_cluster")
    host = REDIS_CLUSTER_URL.split("://", 1)[1].split("/")[0]
    url = f"redis+cluster://127.0.0.1:1,{host}"
    try:
        with leaseq.connect(url, table_prefix=prefix, connect_timeout=2) as q:
            job = q.enqueue("a")

        async def read() -> str:
            async with leaseq.connect_async(url, table_prefix=prefix) as aq:
                return (await aq.get(job.id)).state

        assert asyncio.run(read()) == "available"
    finally:
        drop_tables("redis_cluster", prefix)


def test_an_unreachable_cluster_is_backend_unavailable(prefix: str) -> None:
    with pytest.raises(leaseq.BackendUnavailable, match=r"127\.0\.0\.1:1"):
        leaseq.connect("redis+cluster://127.0.0.1:1", table_prefix=prefix, connect_timeout=2)


def test_a_batch_of_5000_jobs_over_two_queues_gets_ids_in_batch_order(
    q: leaseq.Queue,
) -> None:
    """One id allocation and one script per queue, however long the batch."""
    results = q.enqueue_many([{"queue": "odd" if i % 2 else "even", "payload": {"i": i}}
                              for i in range(5000)])
    ids = [r.id for r in results]
    assert all(r.created for r in results)
    assert ids == sorted(set(ids))
    stats = q.stats()
    assert (stats["odd"].available, stats["even"].available) == (2500, 2500)
    assert q.get(ids[4999]).payload == {"i": 4999}


# -- crashes between the per-slot calls ----------------------------------------------------


def test_ids_allocated_by_an_enqueue_that_died_before_writing_are_no_jobs(
    q: leaseq.Queue, prefix: str
) -> None:
    """allocate.lua (the ``{P}`` slot) has run, enqueue.lua (the queue's slot) has not:
    what a producer killed in between leaves behind."""
    from leaseq.backends.redis.ops import Call

    backend = q._backend  # type: ignore[attr-defined]
    keys = backend.ops.k
    first = int(backend.runner.execute(Call("allocate", (keys.ids, keys.index, keys.queues,
                                                        keys.server),
                                            ["orphans", "orphans"])))
    for job_id in (first, first + 1):
        with pytest.raises(leaseq.JobNotFound):
            q.get(job_id)
        with pytest.raises(leaseq.JobNotFound):
            q.cancel(job_id)
    assert q.dequeue("orphans", limit=10) == []
    assert q.jobs() == []
    assert "orphans" not in q.stats()
    later = q.enqueue("orphans")
    assert later.id > first + 1  # the dead producer's ids are never handed out again
    assert [j.id for j in q.dequeue("orphans", limit=10)] == [later.id]


def test_twins_and_refusals_leave_no_index_entries(q: leaseq.Queue) -> None:
    """Ids handed out for jobs that turned out twins, or that max_jobs refused, are taken
    out of the id index again."""
    cluster = redis_cluster()
    try:
        index = q._backend.ops.k.index  # type: ignore[attr-defined]
        first = q.enqueue("u", unique_key="k")
        again = q.enqueue_many([{"queue": "u", "unique_key": "k"},
                                {"queue": "v", "unique_key": "k"},
                                {"queue": "v", "unique_key": "k"}])
        assert again[0] == leaseq.EnqueueResult(first.id, False)
        assert again[1].created and again[2] == leaseq.EnqueueResult(again[1].id, False)
        q.configure_queue("capped", max_jobs=1)
        q.enqueue("capped")
        with pytest.raises(leaseq.QueueFull):
            q.enqueue_many([{"queue": "capped"}, {"queue": "v"}])
        with pytest.raises(leaseq.QueueFull):
            q.enqueue("capped")
        indexed = {int(i): name for i, name in cluster.hgetall(index).items()}
        live = {j.id: j.queue for j in q.jobs(limit=100)}
        assert indexed == live
    finally:
        cluster.close()


def test_a_producer_filling_a_queue_mid_batch_gets_a_refusal_naming_what_was_written(
    q: leaseq.Queue, url: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one gap of a multi-queue ``enqueue_many`` on a cluster: its dry run found room,
    then another producer filled the capped queue before its write. The earlier queue's
    job stays (it may already run), the refusal lists it, and no index entry is left for
    the refused job."""
    q.configure_queue("cap", max_jobs=1)
    backend = q._backend  # type: ignore[attr-defined]
    execute = backend.runner.execute
    with leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) as other:

        def racing(call: Any) -> Any:
            if call.name == "allocate":  # after the dry run, before the writes
                other.enqueue("cap")
            return execute(call)

        monkeypatch.setattr(backend.runner, "execute", racing)
        with pytest.raises(leaseq.QueueFull, match="were enqueued already") as refused:
            q.enqueue_many([{"queue": "free"}, {"queue": "cap"}])
    monkeypatch.undo()
    [free] = q.jobs("free")
    assert str([free.id]) in str(refused.value)
    assert len(q.jobs("cap")) == 1  # only the racing producer's job
    cluster = redis_cluster()
    try:
        indexed = {int(i) for i in cluster.hgetall(backend.ops.k.index)}
    finally:
        cluster.close()
    assert indexed == {j.id for j in q.jobs()}


def test_a_prune_that_died_before_its_index_write_leaves_no_job_behind(
    q: leaseq.Queue,
) -> None:
    """prune.lua (the queue's slot) deleted the job; the id index (``{P}`` slot) still
    names it: readers find no job."""
    from leaseq.backends.redis.ops import Call

    job = q.enqueue("p")
    [held] = q.dequeue("p")
    q.ack(held)
    backend = q._backend  # type: ignore[attr-defined]
    gone = backend.runner.execute(Call("prune", backend.ops.k.queue("p"), (0, 1000)))
    assert [int(i) for i in gone[0::2]] == [job.id] and gone[1::2] == [""]  # id, no key
    with pytest.raises(leaseq.JobNotFound):
        q.get(job.id)
    assert q.jobs() == []
    assert q.prune(older_than=0) == 0  # nothing more to prune; the stale entry harms nothing


# -- push wake-ups across nodes ------------------------------------------------------------


@pytest.mark.parametrize("first", ["", "127.0.0.1:1,"], ids=["one node", "dead node first"])
def test_a_publish_on_any_node_wakes_a_listener_on_another(prefix: str, first: str) -> None:
    """The listener subscribes on the first node the URL names that answers; jobs of
    queues on each of the three primaries wake it (classic pub/sub is cluster-wide)."""
    require("redis_cluster")
    from leaseq.backends.redis.listen import listen as listen_redis

    host = REDIS_CLUSTER_URL.split("://", 1)[1].split("/")[0]
    listen_url = f"redis+cluster://{first}{host}"
    queues = queues_on_every_node(prefix)
    woken: list[float] = []
    stop = threading.Event()

    async def listen() -> None:
        await listen_redis(listen_url, prefix, queues, lambda: woken.append(1),
                           stop.is_set)

    thread = threading.Thread(target=lambda: asyncio.run(listen()), daemon=True)
    thread.start()
    q = leaseq.connect(REDIS_CLUSTER_URL, table_prefix=prefix, reclaim_interval=None)
    try:
        wait_for(lambda: woken, message="the wake-up after SUBSCRIBE")
        for queue in queues:
            before = len(woken)
            q.enqueue(queue)
            wait_for(lambda before=before: len(woken) > before, timeout=5,
                     message=f"the wake-up for queue {queue}")
    finally:
        stop.set()
        thread.join(10)
        q.close()
        drop_tables("redis_cluster", prefix)
    assert not thread.is_alive()


# -- the multi-process races of test_concurrency.py, on the cluster ------------------------
# Shared by assignment: with this module's ``backend`` fixture their ``q``, ``url`` and
# ``prefix`` are the cluster's.

from tests import test_concurrency as _concurrency  # noqa: E402

test_four_processes_drain_2000_jobs_exactly_once = (
    _concurrency.test_four_processes_drain_2000_jobs_exactly_once)
test_racing_producers_create_one_job_per_unique_key = (
    _concurrency.test_racing_producers_create_one_job_per_unique_key)
test_racing_batches_with_crossing_unique_keys = (
    _concurrency.test_racing_batches_with_crossing_unique_keys)
test_stale_holder_in_another_process_changes_nothing = (
    _concurrency.test_stale_holder_in_another_process_changes_nothing)


# -- two worker processes over queues on all three primaries -------------------------------

JOBS_PER_QUEUE = 40


log_event = append_event  # one JSON line a call, as in every process test


app = leaseq.App(
    os.environ.get("LEASEQ_TEST_URL", "memory://cluster-tests"),
    table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
    lease=1.0,
)


def _handler(seconds: float, n: int) -> None:
    job = leaseq.current_job()
    assert job is not None
    log_event(event="start", job=job.job.id, token=job.job.lease_token, pid=os.getpid(),
              at=time.monotonic())
    time.sleep(seconds)
    log_event(event="end", job=job.job.id, token=job.job.lease_token, pid=os.getpid(),
              at=time.monotonic())


for _queue in filter(None, os.environ.get("LEASEQ_TEST_QUEUES", "").split(",")):
    app.task(queue=_queue, name=f"hold_{_queue}")(_handler)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[dict[str, Any]]:
    require("redis_cluster")
    prefix = new_prefix()
    procs: list[subprocess.Popen[str]] = []
    try:
        yield {"prefix": prefix, "procs": procs, "log": tmp_path / "events.jsonl",
               "tmp": tmp_path}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        drop_tables("redis_cluster", prefix)


def test_two_worker_processes_drain_queues_on_three_masters_one_killed_midway(
    fleet: dict[str, Any],
) -> None:
    prefix, log = fleet["prefix"], fleet["log"]
    queues = queues_on_every_node(prefix, per_node=2)
    env = {**os.environ, "LEASEQ_TEST_URL": REDIS_CLUSTER_URL, "LEASEQ_TEST_PREFIX": prefix,
           "LEASEQ_TEST_LOG": str(log), "LEASEQ_TEST_QUEUES": ",".join(queues),
           "PYTHONPATH": str(ROOT)}

    def start(n: int) -> subprocess.Popen[str]:
        with open(fleet["tmp"] / f"worker{n}.log", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leaseq.cli", "worker", "tests.test_redis_cluster:app",
                 "--concurrency", "4", "--poll-interval", "0.2", "--reclaim-interval", "0.3",
                 "--grace", "5"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        fleet["procs"].append(proc)
        return proc

    def events(kind: str) -> list[dict[str, Any]]:
        if not log.exists():
            return []
        rows = [json.loads(line) for line in log.read_text().splitlines() if line]
        return [row for row in rows if row["event"] == kind]

    q = leaseq.connect(REDIS_CLUSTER_URL, table_prefix=prefix, reclaim_interval=None)
    try:
        ids = [r.id for r in q.enqueue_many(
            [{"queue": queue, "kind": f"hold_{queue}", "payload": {"seconds": 0.05, "n": i}}
             for i in range(JOBS_PER_QUEUE) for queue in queues])]
        victim, survivor = start(0), start(1)
        # Killed once it is draining too (a slow start under load would otherwise leave it
        # holding nothing, and the test would prove no reclaim).
        def victim_mid_job() -> bool:
            # A quarter done, and the victim inside a handler right now: killed between
            # two claims (a loaded machine stretches those gaps) it would hold nothing,
            # and the test would prove no reclaim.
            ended = {(e["job"], e["token"]) for e in events("end")}
            running = [e for e in events("start") if e["pid"] == victim.pid
                       and (e["job"], e["token"]) not in ended]
            return len(ended) >= len(ids) // 4 and bool(running)

        wait_for(victim_mid_job, timeout=60, interval=0.01,
                 message="a quarter done, the victim inside a handler")
        victim.kill()  # mid-drain: its running jobs come back when their leases expire
        victim.wait(10)
        killed_at = time.monotonic()

        def drained() -> bool:
            stats = q.stats()
            return sum(s.completed for s in stats.values()) == len(ids)

        wait_for(drained, timeout=60, interval=0.1, message="every job completed")
        infos = {job_id: q.get(job_id) for job_id in ids}
    finally:
        q.close()
    assert all(info.state == "completed" for info in infos.values())
    assert {pid for pid in (e["pid"] for e in events("end"))} <= {victim.pid, survivor.pid}
    assert survivor.poll() is None, "the survivor died"

    # Nothing run twice at once: per job, the runs (start to end, or to the kill for a run
    # the victim never ended) do not overlap, and each lease token ran once.
    runs: dict[int, list[tuple[float, float, int]]] = {}
    ends = {(e["job"], e["token"]): e["at"] for e in events("end")}
    for start_event in events("start"):
        key = (start_event["job"], start_event["token"])
        until = ends.get(key, killed_at)
        runs.setdefault(start_event["job"], []).append((start_event["at"], until,
                                                        start_event["token"]))
    assert sorted(runs) == sorted(ids), "a job never ran"
    for job_id, spans in runs.items():
        spans.sort()
        tokens = [token for _, _, token in spans]
        assert len(set(tokens)) == len(tokens), f"job {job_id} ran twice under one lease"
        for (_, end, _), (begin, _, _) in itertools.pairwise(spans):
            assert end <= begin, f"job {job_id} ran twice at once: {spans}"
        completed_runs = [s for s in spans if (job_id, s[2]) in ends]
        assert completed_runs, f"job {job_id} never finished a run"
        # A lease the victim took but never started a handler on (killed in between, or
        # leased ahead) counts an attempt with no run: at most one such, as there is one kill.
        assert len(spans) <= infos[job_id].attempts <= len(spans) + 1
    # Claimed by the victim and then by the survivor: run twice, or leased ahead by the
    # victim and never started there (one run, two attempts).
    reclaimed = [job_id for job_id in ids if infos[job_id].attempts > 1]
    assert reclaimed, "the victim held no job when it was killed: nothing was reclaimed"
