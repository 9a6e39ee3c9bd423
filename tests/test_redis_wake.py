"""Redis wake-ups: the scripts PUBLISH a queue's name on ``<prefix>:wake`` when they make
its jobs due now, and ``listen_redis`` turns those messages into worker wake-ups (the
Redis counterpart of PostgreSQL LISTEN/NOTIFY, see _listen.py).

Absence is checked without sleeping: after the operations under test the test publishes a
marker of its own, and since one channel's messages arrive in order, whatever the
operations published has arrived once the marker has.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest

import leaseq
from tests.helpers import REDIS_URL, wait_for

redis = pytest.importorskip("redis")

from leaseq.backends.redis import listen as listen_module  # noqa: E402
from leaseq.backends.redis.keys import Keys  # noqa: E402  (needs redis-py)
from leaseq.backends.redis.listen import REDIS_CLIENT_NAME  # noqa: E402
from leaseq.backends.redis.listen import listen as listen_redis  # noqa: E402
from tests import test_redis_backend as redis_backend_tests  # noqa: E402
from tests.test_redis_backend import PrivateRedis  # noqa: E402  (a redis-server of our own)

T = TypeVar("T")


# The fixtures of tests/test_redis_backend.py, shared by assignment (an import of the names
# would read, to ruff, as each test's argument redefining it).
prefix = redis_backend_tests.prefix
rq = redis_backend_tests.rq


class Channel:
    """A plain redis-py subscriber to one prefix's wake channel."""

    def __init__(self, prefix: str, url: str = REDIS_URL) -> None:
        self.name = Keys(prefix).wake
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.pubsub = self.client.pubsub()
        self.pubsub.subscribe(self.name)
        # Subscribed only once the server confirms: a publish before that would be lost.
        wait_for(lambda: self.next("subscribe"), message="the SUBSCRIBE confirmation")

    def next(self, kind: str) -> Any:
        message = self.pubsub.get_message(timeout=0.1)
        return message if message is not None and message["type"] == kind else None

    def published(self) -> list[str]:
        """The queue names published since the last call, in order."""
        marker = f"marker-{secrets.token_hex(4)}"
        self.client.publish(self.name, marker)
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = self.next("message")
            if message is None:
                continue
            if message["data"] == marker:
                return seen
            seen.append(message["data"])
        raise AssertionError(f"our own marker never came back on {self.name}")

    def close(self) -> None:
        self.pubsub.close()
        self.client.close()


@pytest.fixture
def channel(prefix: str) -> Iterator[Channel]:
    subscriber = Channel(prefix)
    try:
        yield subscriber
    finally:
        subscriber.close()


# -- what publishes ----------------------------------------------------------------------------


def test_the_channel_is_named_after_the_prefix() -> None:
    assert Keys("leaseq_").wake == "leaseq_:wake"
    with pytest.raises(leaseq.ConfigurationError):
        Keys("{bad}")


def test_enqueue_of_due_jobs_publishes_once_per_queue_per_call(
    rq: leaseq.Queue, channel: Channel
) -> None:
    rq.enqueue("a")
    assert channel.published() == ["a"]
    rq.enqueue_many([{"queue": "a"}] * 1000 + [{"queue": "b"}] * 5 + [{"queue": "a"}])
    assert sorted(channel.published()) == ["a", "b"]
    rq.enqueue("a", run_at=datetime.now(timezone.utc) - timedelta(hours=1))  # due already
    assert channel.published() == ["a"]
    rq.enqueue_many([{"queue": "a", "delay": 3600}, {"queue": "b"}])
    # a: the queue's first scheduled job, so sleepers re-arm for it (next test)
    assert sorted(channel.published()) == ["a", "b"]


def test_jobs_not_due_yet_publish_only_when_they_become_the_earliest(
    rq: leaseq.Queue, channel: Channel
) -> None:
    # An idle worker sleeps until the earliest scheduled job (next_due): a job due sooner
    # must wake it to re-arm; one due later changes nothing it waits for.
    rq.enqueue("a", delay=3600)
    assert channel.published() == ["a"]
    rq.enqueue("a", run_at=datetime.now(timezone.utc) + timedelta(days=1))
    rq.enqueue_many([{"queue": "a", "delay": 7200}] * 50)
    assert channel.published() == []
    rq.enqueue("a", delay=60)
    assert channel.published() == ["a"]
    rq.enqueue("a", unique_key="k")
    assert channel.published() == ["a"]
    assert not rq.enqueue("a", unique_key="k").created  # a twin writes nothing
    assert channel.published() == []


def test_release_and_nack_publish_when_the_job_is_due_now(
    rq: leaseq.Queue, channel: Channel
) -> None:
    rq.enqueue("a", max_attempts=2)
    channel.published()
    [job] = rq.dequeue("a")
    assert channel.published() == []  # claims make nothing available
    assert rq.release(job) == "available"
    assert channel.published() == ["a"]
    [job] = rq.dequeue("a")
    assert rq.release(job, delay=3600) == "scheduled"
    assert channel.published() == ["a"]  # the queue's earliest scheduled job now
    rq.retry(job.id)
    assert channel.published() == ["a"]
    [job] = rq.dequeue("a")
    assert rq.nack(job, "boom", delay=0) == "available"
    assert channel.published() == ["a"]
    [job] = rq.dequeue("a")
    assert rq.nack(job, "boom", delay=0) == "dead"  # attempts used up
    assert channel.published() == []


def test_kick_and_retry_of_dead_jobs_publish(rq: leaseq.Queue, channel: Channel) -> None:
    rq.enqueue_many([{"queue": "a"}] * 4)
    channel.published()
    for job in rq.dequeue("a", limit=4):
        rq.bury(job, reason="look at me")
    assert channel.published() == []  # burials make nothing available
    assert rq.kick("a", limit=2) == 2
    assert channel.published() == ["a"]  # two jobs, one message
    first, second = (job.id for job in rq.jobs("a", state="dead"))
    rq.retry(first)
    assert channel.published() == ["a"]
    assert rq.cancel(second) == "cancelled"
    assert rq.kick("a") == 0
    rq.ack(*rq.dequeue("a"))
    rq.discard(rq.jobs("a", state="available")[0].id)
    assert channel.published() == []  # nor do cancels, empty kicks, acks and discards


def test_a_paused_queue_publishes_on_resume_only(rq: leaseq.Queue, channel: Channel) -> None:
    rq.pause("a")
    rq.enqueue("a")
    rq.enqueue_many([{"queue": "a"}, {"queue": "b"}])
    assert channel.published() == ["b"]  # claims skip a paused queue: no one to wake
    rq.resume("a")
    assert channel.published() == ["a"]
    rq.resume("a")  # not paused: nothing changed
    rq.pause("a")
    assert channel.published() == []


def test_reclaim_publishes_when_it_gives_jobs_back(rq: leaseq.Queue, channel: Channel) -> None:
    rq.enqueue_many([{"queue": "a"}, {"queue": "a"}, {"queue": "b"}])
    channel.published()
    assert len(rq.dequeue(["a", "b"], lease=0.05, limit=3)) == 3  # one lease_until
    back = [0]

    def all_back() -> bool:
        back[0] += rq.reclaim()
        return back[0] == 3

    wait_for(all_back, message="the three expired leases reclaimed")
    assert sorted(channel.published()) == ["a", "b"]  # one call gave all three back
    assert rq.reclaim() == 0
    assert channel.published() == []


def test_the_publish_is_a_hint_a_user_denied_the_channel_still_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis 7 users get no channel by default (acl-pubsub-default resetchannels). The
    scripts PUBLISH through redis.pcall, so a refused PUBLISH fails nothing: with
    redis.call the script would stop half-way, after its writes. The listener says once
    what to grant, and the worker polls."""
    server = PrivateRedis(tmp_path)
    try:
        with redis.Redis(port=server.port) as admin:
            admin.execute_command("ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all",
                                  "resetchannels")
        url = f"redis://nochannels:pw@127.0.0.1:{server.port}/0"
        with leaseq.connect(url, reclaim_interval=None) as q:
            q.enqueue_many([{"queue": "a"}, {"queue": "b"}])
            [job] = q.dequeue("a")
            assert q.release(job) == "available"
            [job] = q.dequeue("a")
            assert q.nack(job, "boom", delay=0) == "available"
            q.pause("b")
            q.resume("b")
            stats = q.stats()
            assert (stats["a"].available, stats["b"].available) == (1, 1)

        def refused() -> list[str]:
            return [r.getMessage() for r in caplog.records if "may not SUBSCRIBE" in r.getMessage()]

        async def body() -> None:
            wakes = Wakes()
            task = asyncio.create_task(listen_redis(url, "leaseq_", ["a"], wakes, lambda: False))
            try:
                await until(lambda: asyncio.sleep(0, refused()), message="the ACL warning")
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert wakes.count == 0

        with caplog.at_level(logging.DEBUG, logger="leaseq.worker"):
            asyncio.run(body())
        [warning] = refused()
        assert "&leaseq_:wake" in warning
    finally:
        server.kill()


# -- listen_redis ------------------------------------------------------------------------------


class Wakes:
    """A ``wake`` callback that counts, and lets a test wait for a count."""

    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    async def reach(self, n: int, timeout: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.count < n:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AssertionError(f"{self.count} wake-ups after {timeout} s, wanted {n}")
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except asyncio.TimeoutError:
                continue


async def until(condition: Callable[[], Awaitable[T | None]], timeout: float = 10.0,
                message: str = "condition") -> T:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        await asyncio.sleep(0.02)


def named(name: str) -> list[dict[str, Any]]:
    """The server's clients called ``name`` that are subscribed to something."""
    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        return [c for c in client.client_list()
                if c.get("name") == name and int(c.get("sub", 0)) > 0]


def test_listen_redis_wakes_for_its_own_queues_only(prefix: str) -> None:
    async def body() -> None:
        wakes, stop = Wakes(), [False]
        with redis.Redis.from_url(REDIS_URL) as client:
            newest = max(int(c["id"]) for c in client.client_list())
        task = asyncio.create_task(
            listen_redis(REDIS_URL, prefix, ["mine", "also"], wakes, lambda: stop[0]))
        try:
            await wakes.reach(1)  # once subscribed: anything sent before may be waiting
            ours = [c for c in named(REDIS_CLIENT_NAME) if int(c["id"]) > newest]
            assert ours, "the listener's connection carries no leaseq-listen name"
            async with leaseq.connect_async(REDIS_URL, table_prefix=prefix) as aq:
                await aq.enqueue("other")
                # A queue's first scheduled job publishes too: sleepers re-arm for it.
                await aq.enqueue("mine", delay=3600)
                await aq.enqueue("mine")
                # In channel order: "other" was read (and ignored) before the last "mine"
                # woke it, and nothing else is sent until the next enqueue.
                await wakes.reach(3)
                assert wakes.count == 3
                await aq.enqueue_many([{"queue": "mine"}, {"queue": "also"}, {"queue": "x"}])
                await wakes.reach(5)
                await aq.enqueue("mine")
                await wakes.reach(6)
                assert wakes.count == 6
            stop[0] = True
            await asyncio.wait_for(task, 10)  # stopping() ends it without a cancel
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(body())


def test_listen_redis_comes_back_after_its_connection_is_killed(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"leaseq_wake_{secrets.token_hex(4)}"  # only this test's listener has it
    url = f"{REDIS_URL}?client_name={name}"  # the URL's name wins, as for the chaos harness

    async def body() -> None:
        wakes = Wakes()
        task = asyncio.create_task(listen_redis(url, prefix, ["mine"], wakes, lambda: False))
        try:
            await wakes.reach(1)
            [before] = await until(lambda: asyncio.to_thread(named, name), message="listener")
            with redis.Redis.from_url(REDIS_URL) as client:
                client.client_kill_filter(_id=before["id"])
            await wakes.reach(2)  # re-subscribed, and woke once for what it may have missed
            [after] = await until(lambda: asyncio.to_thread(named, name), message="relisten")
            assert after["id"] != before["id"]
            async with leaseq.connect_async(REDIS_URL, table_prefix=prefix) as aq:
                await aq.enqueue("mine")
                await wakes.reach(3)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()

    with caplog.at_level(logging.DEBUG, logger="leaseq.worker"):
        asyncio.run(body())
    assert any("subscription lost" in r.getMessage() for r in caplog.records)


def test_listen_redis_gives_up_on_a_server_that_stops_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that goes silent without closing the connection (frozen here with
    SIGSTOP; a failover or a cut network in life) is noticed by the keepalive PING, and
    the listener subscribes again once the server answers."""
    monkeypatch.setattr(listen_module, "REDIS_QUIET", 0.2)
    monkeypatch.setattr(listen_module, "REDIS_PING_TIMEOUT", 0.5)
    monkeypatch.setattr(listen_module, "REDIS_TICK", 0.05)
    server = PrivateRedis(tmp_path)
    assert server.proc is not None
    proc = server.proc

    def lost() -> bool:
        return any("subscription lost" in r.getMessage() for r in caplog.records)

    async def body() -> None:
        wakes = Wakes()
        task = asyncio.create_task(listen_redis(server.url, "leaseq_", ["q"], wakes,
                                                lambda: False))
        try:
            await wakes.reach(1)
            proc.send_signal(signal.SIGSTOP)
            try:
                await until(lambda: asyncio.sleep(0, lost()), message="the PING timeout")
            finally:
                proc.send_signal(signal.SIGCONT)
            await wakes.reach(2)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    try:
        with caplog.at_level(logging.DEBUG, logger="leaseq.worker"):
            asyncio.run(body())
    finally:
        server.kill()
    assert any("PING" in r.getMessage() for r in caplog.records)
