"""Replicated writes on Redis: ``wait_replicas``, ``wait_timeout`` and ``wait_aof`` in the URL
(backends/redis/durability.py). Every write is followed by ``WAIT`` on the connection that
made it; too few replicas in time raise ``NotReplicated`` after the write was made.

A private primary (port 6480) with one replica (6481), started here by pid, proves that a
call returns only once the replica has its write, and, with the replica frozen (SIGSTOP),
that the call raises within about ``wait_timeout`` while the write stays on the primary.
On the shared 3-master Redis Cluster (no replicas), ``wait_replicas=1`` must fail on the
node that took the write: the ``WAIT`` went where the write did. The failover chaos test
with a Sentinel is in tests/chaos/test_redis_failover.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

import leaseq
from leaseq.backends.redis.keys import Keys
from tests.conftest import require
from tests.helpers import (
    REDIS_CLUSTER_URL,
    drop_tables,
    new_prefix,
    redis_cluster,
    running,
    wait_for,
)

PRIMARY, REPLICA = 6480, 6481
TIMEOUT_MS = 300


def redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (CI=true)")
        pytest.skip("redis-server is not installed")
    return path


def start_node(binary: str, folder: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """A redis-server on loopback ``port`` without persistence, data in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "redis.log", "wb")  # noqa: SIM115 - the process owns it
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder), "--daemonize", "no", *extra],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    return process


def stop_nodes(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)  # a frozen one cannot act on SIGKILL's
            process.kill()
        process.wait(10)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A primary on 6480 and its replica on 6481, in sync."""
    binary = redis_server()
    root = tmp_path_factory.mktemp("redis-wait")
    # No delay before a full sync (Redis waits 5 s for more replicas by default).
    processes = [start_node(binary, root / "primary", PRIMARY,
                            "--repl-diskless-sync-delay", "0")]
    try:
        processes.append(start_node(binary, root / "replica", REPLICA,
                                    "--replicaof", "127.0.0.1", str(PRIMARY)))
        primary = redis.Redis(port=PRIMARY, decode_responses=True)
        replica = redis.Redis(port=REPLICA, decode_responses=True)

        def linked() -> bool:
            for process, name in zip(processes, ("primary", "replica"), strict=True):
                if process.poll() is not None:  # e.g. its port was taken
                    log = (root / name / "redis.log").read_text()[-500:]
                    raise AssertionError(f"the {name} redis-server exited: {log}")
            try:
                return (replica.info("replication").get("master_link_status") == "up"
                        and primary.info("replication").get("connected_slaves") == 1)
            except redis.ConnectionError:
                return False

        wait_for(linked, timeout=20, message="the replica to sync with the primary")
        yield {"primary": primary, "replica": replica, "replica_pid": processes[1].pid,
               "url": f"redis://127.0.0.1:{PRIMARY}/0"}
        primary.close()
        replica.close()
    finally:
        stop_nodes(processes)


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The process ``pid`` stopped (SIGSTOP) for the block: a replica that stays
    connected but confirms nothing."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def opts(prefix: str, **more: Any) -> leaseq.Settings:
    return leaseq.Settings(table_prefix=prefix, **more)


def waited(url: str, replicas: int = 1, timeout: int = TIMEOUT_MS) -> str:
    return f"{url}?wait_replicas={replicas}&wait_timeout={timeout}"


# -- the options --------------------------------------------------------------------------


@pytest.mark.parametrize("query, why", [
    ("wait_replicas=-1", "wait_replicas"),
    ("wait_replicas=one", "wait_replicas"),
    ("wait_replicas=1&wait_timeout=1.5", "wait_timeout"),
    ("wait_replicas=1&wait_timeout=", "wait_timeout"),
    ("wait_aof=2", "wait_aof"),
    ("wait_timeout=100", "wait_timeout"),
])
def test_bad_option_values_are_refused_by_name(query: str, why: str) -> None:
    # Refused before any connection: no server needed, the port is never dialled.
    with pytest.raises(leaseq.ConfigurationError, match=why):
        leaseq.Queue(f"redis://127.0.0.1:1/0?{query}")
    with pytest.raises(leaseq.ConfigurationError, match=why):
        leaseq.AsyncQueue(f"redis+cluster://127.0.0.1:1?{query}")
    with pytest.raises(leaseq.ConfigurationError, match=why):
        leaseq.Queue(f"redis+sentinel://127.0.0.1:1/leaseq?{query}")


def test_the_options_leave_the_url_and_default_to_one_second() -> None:
    from leaseq.backends.redis.durability import Durability, split_options

    assert split_options("redis://h:1/0?wait_replicas=2") == (
        "redis://h:1/0", Durability(2, 1000, False))
    assert split_options("redis+sentinel://s:1/svc/2?client_name=x&wait_replicas=1"
                         "&wait_timeout=50&socket_timeout=3") == (
        "redis+sentinel://s:1/svc/2?client_name=x&socket_timeout=3", Durability(1, 50))
    assert split_options("redis://h:1/0?wait_aof=1") == ("redis://h:1/0",
                                                         Durability(0, 1000, True))
    assert split_options("redis://h:1/0?wait_replicas=0") == ("redis://h:1/0", None)
    assert split_options("redis://h:1/0?client_name=x") == ("redis://h:1/0?client_name=x",
                                                            None)


def test_the_options_are_not_handed_to_redis_py(pair: dict[str, Any]) -> None:
    """Other query arguments still reach redis-py; ours do not (it would fail on them
    with a TypeError). ``wait_replicas=0`` waits for nothing, as without it."""
    prefix = new_prefix()
    url = f"{pair['url']}?client_name=waiter&wait_replicas=0&wait_timeout=50"
    with leaseq.Queue(url, opts(prefix)) as q:
        q.enqueue("w", 1)
        names = [c["name"] for c in pair["primary"].client_list()]
        assert "waiter" in names


def test_wait_aof_needs_redis_7_2(pair: dict[str, Any]) -> None:
    version = tuple(int(p) for p in pair["primary"].info("server")["redis_version"]
                    .split(".")[:2])
    url = f"{pair['url']}?wait_aof=1"
    if version >= (7, 2):
        pytest.skip("this server has WAITAOF; the refusal concerns older ones")
    with pytest.raises(leaseq.ConfigurationError, match=r"wait_aof=1 needs WAITAOF"):
        leaseq.Queue(url)

    async def first_call() -> None:
        async with leaseq.AsyncQueue(url) as aq:
            await aq.stats()

    with pytest.raises(leaseq.ConfigurationError, match=r"wait_aof=1 needs WAITAOF"):
        asyncio.run(first_call())


# -- a primary and a replica --------------------------------------------------------------


def test_a_write_returns_once_the_replica_has_it(pair: dict[str, Any]) -> None:
    prefix = new_prefix()
    keys = Keys(prefix)
    replica = pair["replica"]
    # A healthy replica answers in a millisecond; 5 s only spares a busy machine's stalls.
    with leaseq.Queue(waited(pair["url"], timeout=5000), opts(prefix)) as q:
        for n in range(20):
            job_id = q.enqueue("w", n).id
            # Read on the replica at once: WAIT returned, so it has the job.
            assert replica.hget(keys.job("w", job_id), "payload") == str(n)
        job = q.dequeue("w")[0]
        assert replica.hget(keys.job("w", job.id), "state") == "running"
        q.ack(job, "done")
        assert replica.hget(keys.job("w", job.id), "state") == "completed"
        q.configure_queue("w", max_attempts=7)
        assert replica.hget(keys.settings("w"), "max_attempts") == "7"
        # A server that forgot the scripts (NOSCRIPT): EVAL in the same pipeline.
        pair["primary"].script_flush()
        job_id = q.enqueue("w", "again").id
        assert replica.hget(keys.job("w", job_id), "payload") == '"again"'


def test_a_frozen_replica_makes_the_write_raise_not_replicated(pair: dict[str, Any]) -> None:
    prefix = new_prefix()
    keys = Keys(prefix)
    with leaseq.Queue(waited(pair["url"]), opts(prefix)) as q:
        q.enqueue("w", "warm")  # scripts loaded, pool connected
        with frozen(pair["replica_pid"]):
            began = time.monotonic()
            with pytest.raises(leaseq.NotReplicated) as raised:
                q.enqueue("w", "lonely", unique_key="k1")
            took = time.monotonic() - began
            error = raised.value
            assert (error.acknowledged, error.wanted) == (0, 1)
            assert "WAS made on the Redis primary" in str(error)
            assert "unique_key can be retried safely" in str(error)
            assert TIMEOUT_MS / 1000 * 0.9 <= took < TIMEOUT_MS / 1000 + 2
            [result] = error.result
            # The job is on the primary, not on the (frozen) replica...
            assert pair["primary"].hget(keys.job("w", result.id), "payload") == '"lonely"'
            # ...and the advised retry returns the same job.
            with pytest.raises(leaseq.NotReplicated) as again:
                q.enqueue("w", "lonely", unique_key="k1")
            assert again.value.result[0].id == result.id
            assert again.value.result[0].created is False
        # The replica thawed: it catches up, and a write succeeds again.
        q.enqueue("w", "after")
        assert pair["replica"].hget(keys.job("w", result.id), "payload") == '"lonely"'


def test_an_ack_retried_after_not_replicated_succeeds(pair: dict[str, Any]) -> None:
    prefix = new_prefix()
    with leaseq.Queue(waited(pair["url"]), opts(prefix)) as q:
        job_id = q.enqueue("w", 1).id
        job = q.dequeue("w")[0]
        with frozen(pair["replica_pid"]):
            with pytest.raises(leaseq.NotReplicated):
                q.ack(job, "r")
            with pytest.raises(leaseq.NotReplicated):
                q.ack(job, "r")  # no LeaseLost: the repeated ack is a no-op success
        assert q.get(job_id).state == "completed"
        assert q.stats()["w"].completed == 1


def test_async_client(pair: dict[str, Any]) -> None:
    prefix = new_prefix()
    keys = Keys(prefix)

    async def main() -> None:
        async with leaseq.AsyncQueue(waited(pair["url"]), opts(prefix)) as aq:
            job_id = (await aq.enqueue("w", 1)).id
            assert pair["replica"].hget(keys.job("w", job_id), "payload") == "1"
            with frozen(pair["replica_pid"]):
                began = time.monotonic()
                with pytest.raises(leaseq.NotReplicated) as raised:
                    await aq.enqueue("w", 2)
                assert time.monotonic() - began >= TIMEOUT_MS / 1000 * 0.9
                [result] = raised.value.result
                assert pair["primary"].hget(keys.job("w", result.id), "payload") == "2"
                # Concurrent enqueues share a group commit: each caller gets its own.
                many = await asyncio.gather(*(aq.enqueue("w", n) for n in range(5)),
                                            return_exceptions=True)
                assert all(isinstance(e, leaseq.NotReplicated) for e in many)
                ids = {e.result[0].id for e in many}  # type: ignore[union-attr]
                assert len(ids) == 5
            assert (await aq.stats())["w"].available == 7

    asyncio.run(main())


def test_the_worker_carries_on_through_not_replicated(
    pair: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Claims, acks and failures all raise NotReplicated while the replica is frozen:
    the worker logs each and carries on with what the primary answered; every job ends
    completed or retried as its handler said, none is lost or crashes the worker."""
    prefix = new_prefix()
    url = waited(pair["url"], timeout=100)
    app = leaseq.App(url, table_prefix=prefix)
    ran: list[int] = []

    @app.task(queue="w", name="job")
    def job(n: int) -> int:
        ran.append(n)
        if n % 3 == 0 and leaseq.current_job().job.attempts == 1:  # type: ignore[union-attr]
            raise RuntimeError("fails once")
        return n

    with leaseq.Queue(pair["url"], opts(prefix)) as plain:
        with frozen(pair["replica_pid"]), caplog.at_level(logging.WARNING, "leaseq"), \
                running(app, concurrency=2, poll_interval=0.05) as worker:
            for n in range(6):
                plain.enqueue("w", {"n": n}, kind="job")
            wait_for(lambda: plain.stats()["w"].completed == 6, timeout=30,
                     message="6 jobs completed with the replica frozen")
            assert worker.processed >= 6
        stats = plain.stats()["w"]
        assert (stats.completed, stats.dead, stats.available, stats.running) == (6, 0, 0, 0)
    assert sorted(ran) == [0, 0, 1, 2, 3, 3, 4, 5]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "not replicated in time" in said
    assert "ack of" in said and "claim" in said


# -- the cluster --------------------------------------------------------------------------


def test_on_the_cluster_the_wait_goes_to_the_node_that_took_the_write() -> None:
    """The test cluster's masters have no replicas: ``WAIT 1`` can only fail, and it
    must fail on the node that owns the queue's slot (where the claim's write went, and
    only there), within about ``wait_timeout``; sync and async. ``wait_replicas=0``
    writes as usual."""
    require("redis_cluster")
    prefix = new_prefix()
    cluster = redis_cluster()
    try:
        owner = {queue: str(cluster.get_node_from_key(Keys(prefix).settings(queue)).name)
                 for queue in ("a", "b", "c", "d", "e", "f")}
    finally:
        cluster.close()
    assert len(set(owner.values())) >= 2, "the queues should land on several masters"
    try:
        with leaseq.Queue(waited(REDIS_CLUSTER_URL, replicas=0), opts(prefix)) as plain:
            ids = {queue: plain.enqueue(queue, 1).id for queue in owner}
            # No inline reclaim: on replica-less nodes each of its writes waits too.
            quick = opts(prefix, reclaim_interval=None)
            with leaseq.Queue(waited(REDIS_CLUSTER_URL, timeout=100), quick) as q:
                for queue in list(owner)[:3]:
                    began = time.monotonic()
                    with pytest.raises(leaseq.NotReplicated) as raised:
                        q.dequeue(queue)
                    assert time.monotonic() - began >= 0.09
                    # One node named, the queue's: the claim wrote there alone.
                    assert f"primary at {owner[queue]}, but only 0 of 1" in str(raised.value)
                    assert [job.id for job in raised.value.result] == [ids[queue]]

            async def main() -> None:
                async with leaseq.AsyncQueue(waited(REDIS_CLUSTER_URL, timeout=100),
                                             quick) as aq:
                    for queue in list(owner)[3:]:
                        with pytest.raises(leaseq.NotReplicated) as raised:
                            await aq.dequeue(queue)
                        assert f"primary at {owner[queue]}, but" in str(raised.value)
                        assert [job.id for job in raised.value.result] == [ids[queue]]

            asyncio.run(main())
            assert all(s.running == 1 for s in plain.stats().values())
            # wait_replicas=0: no WAIT, writes as usual.
            again = [plain.enqueue(queue, 2).id for queue in owner]
            jobs = plain.dequeue(list(owner), limit=10)
            assert sorted(j.id for j in jobs) == sorted(again)
            assert plain.ack_many(jobs) == [True] * len(jobs)
    finally:
        drop_tables("redis_cluster", prefix)
