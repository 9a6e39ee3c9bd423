"""What only the Redis backend has to prove (the shared semantics are in tests/conformance).

Covered: the key schema (one Cluster slot per queue, the Lua and Python views of it
agree), scripts re-registered after ``NOSCRIPT``, time from the server and not the
client, lease tokens that stay fresh when the server loses its last writes, the id cache
after ids are reused, scripts that work in bounded rounds, times before 1970 and far in
the future, start-up checks (version, eviction-policy warning, CONFIG disabled), error
translation, the missing extra, and a ``kill -9`` of the server in the middle of a drain.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import REDIS_URL, drop_tables, new_prefix, wait_for

redis = pytest.importorskip("redis")

from leaseq.backends.redis import driver  # noqa: E402  (needs redis-py)
from leaseq.backends.redis.keys import QUEUE_PARTS, Keys  # noqa: E402
from leaseq.backends.redis.lua import SCRIPTS  # noqa: E402


@pytest.fixture
def prefix() -> Iterator[str]:
    require("redis")
    name = new_prefix()
    try:
        yield name
    finally:
        drop_tables("redis", name)


@pytest.fixture
def rq(prefix: str) -> Iterator[leaseq.Queue]:
    queue = leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None)
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture
def server() -> Iterator[Any]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def server_now(client: Any) -> datetime:
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds, timezone.utc) + timedelta(microseconds=micros)


# -- the key schema ------------------------------------------------------------------------


def test_lua_and_python_name_the_queue_keys_in_the_same_order() -> None:
    text = SCRIPTS["claim"].text
    found = re.search(r"local PARTS = \{(.*?)\}", text, re.DOTALL)
    assert found
    parts = re.findall(r"'([a-z]+)'", found[1])
    assert parts == [part.rstrip(":") for part in QUEUE_PARTS]


def test_one_queues_keys_share_one_cluster_slot() -> None:
    from redis.crc import key_slot

    keys = Keys("leaseq_")
    for queue in ("emails", "a", "x" * 200, "Q.-_9"):
        names = [*keys.queue(queue), keys.job(queue, 42), keys.job(queue, 2**62)]
        assert len({key_slot(name.encode()) for name in names}) == 1, names
    assert len({key_slot(k.encode()) for k in (keys.ids, keys.index, keys.queues)}) == 1


def test_key_names_refuse_what_validation_refuses() -> None:
    keys = Keys("leaseq_")
    for bad in ("{x}", "a:b", "*", "", "a b", "x" * 201):
        with pytest.raises(leaseq.InvalidQueueName):
            keys.queue(bad)
    with pytest.raises(leaseq.ConfigurationError):
        Keys("{bad}")


def test_every_script_documents_its_keys_and_arguments() -> None:
    from importlib import resources

    folder = resources.files("leaseq.backends.redis").joinpath("scripts")
    for name in SCRIPTS:
        own = folder.joinpath(f"{name}.lua").read_text("utf-8")
        assert own.startswith((f"-- {name}", "-- pause / resume")), name
        assert "KEYS" in own and "Returns:" in own, name


def test_scripts_are_registered_again_after_noscript(rq: leaseq.Queue, server: Any,
                                                    prefix: str) -> None:
    job_id = rq.enqueue("q").id
    server.script_flush()
    assert rq.get(job_id).state == "available"
    server.script_flush()

    async def body() -> str:
        async with leaseq.connect_async(REDIS_URL, table_prefix=prefix) as aq:
            return (await aq.get(job_id)).state

    assert asyncio.run(body()) == "available"
    server.script_flush()
    rq.migrate()  # loads every script up front
    assert all(server.script_exists(*[s.sha for s in SCRIPTS.values()]))


# -- time, fencing, ids ----------------------------------------------------------------------


def test_times_come_from_the_server_not_the_client(
    rq: leaseq.Queue, server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 0.0)  # a client clock stuck in 1970
    job_id = rq.enqueue("q").id
    info = rq.get(job_id)
    monkeypatch.undo()
    assert abs(info.created_at - server_now(server)) < timedelta(seconds=5)
    assert info.state == "available"


def test_lease_tokens_stay_fresh_when_the_server_loses_its_last_writes(
    rq: leaseq.Queue, prefix: str
) -> None:
    job_id = rq.enqueue("q").id
    pattern = Keys(prefix).pattern()
    with redis.Redis.from_url(REDIS_URL) as raw:  # DUMP payloads are bytes
        snapshot = {key: raw.dump(key) for key in raw.scan_iter(match=pattern, count=1000)}
        [first] = rq.dequeue("q", worker_id="A")
        # The server "crashes" and comes back without the claim: every key as before it.
        for key in raw.scan_iter(match=pattern, count=1000):
            raw.delete(key)
        for key, value in snapshot.items():
            raw.restore(key, 0, value, replace=True)
    assert rq.get(job_id).state == "available"
    [second] = rq.dequeue("q", worker_id="B")
    assert second.attempts == first.attempts == 1
    assert second.lease_token > first.lease_token
    with pytest.raises(leaseq.LeaseLost):
        rq.ack(first)
    rq.ack(second)
    assert rq.get(job_id).worker_id == "B"


def test_tokens_increase_strictly_per_job(rq: leaseq.Queue) -> None:
    job_id = rq.enqueue("q").id
    tokens = []
    for _ in range(20):
        [job] = rq.dequeue("q")
        tokens.append(job.lease_token)
        rq.release(job)
    assert tokens == sorted(set(tokens)) and len(tokens) == 20
    assert rq.get(job_id).attempts == 0


def test_a_client_finds_jobs_again_after_the_data_was_flushed_and_ids_reused(
    rq: leaseq.Queue, prefix: str
) -> None:
    old = rq.enqueue("a").id  # this client now remembers: old -> queue "a"
    drop_tables("redis", prefix)  # as FLUSHDB or a restart without persistence would
    with leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None) as other:
        new = other.enqueue("b", {"n": 2}).id
    assert new == old
    info = rq.get(new)
    assert (info.queue, info.payload) == ("b", {"n": 2})
    assert rq.cancel(new) == "cancelled"


# -- bounded rounds and odd times ----------------------------------------------------------


def test_reclaim_kick_and_prune_work_past_one_round(rq: leaseq.Queue) -> None:
    n = 2500
    rq.enqueue_many([{"queue": "q", "max_attempts": 1}] * n)
    assert len(rq.dequeue("q", lease=0.05, limit=n)) == n
    time.sleep(0.1)
    assert rq.reclaim(limit=2100) == 2100
    assert rq.reclaim(limit=10_000) == 400
    assert rq.stats()["q"].dead == n
    assert rq.kick("q", limit=2200) == 2200
    assert rq.kick("q", limit=10_000) == 300
    for job in rq.dequeue("q", limit=n):
        rq.ack(job)
    time.sleep(0.01)
    assert rq.prune(older_than=0) == n
    assert "q" not in rq.stats()


def test_a_burst_of_due_jobs_fills_a_big_dequeue(rq: leaseq.Queue) -> None:
    n = 1500
    ids = [r.id for r in rq.enqueue_many([{"queue": "q", "delay": 0.2}] * n)]
    time.sleep(0.3)
    assert [j.id for j in rq.dequeue("q", limit=n)] == ids


def test_times_before_1970_and_far_ahead_are_exact_and_ordered(rq: leaseq.Queue) -> None:
    utc = timezone.utc
    at = [datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=utc), datetime(1960, 5, 1, 12, 0, 0, 7, tzinfo=utc),
          datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=utc),
          datetime(1970, 1, 1, tzinfo=utc), datetime(2001, 1, 1, 0, 0, 0, 3, tzinfo=utc)]
    ids = [rq.enqueue("q", run_at=when).id for when in reversed(at)]
    assert [rq.get(i).available_at for i in ids] == list(reversed(at))
    assert [j.id for j in rq.dequeue("q", limit=10)] == list(reversed(ids))
    far = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc)
    later = rq.enqueue("q", run_at=far).id
    assert (rq.get(later).state, rq.get(later).available_at) == ("scheduled", far)
    assert rq.dequeue("q") == []


# -- start-up checks and errors ------------------------------------------------------------


def test_eviction_policy_other_than_noeviction_logs_a_warning(
    server: Any, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    old = server.config_get("maxmemory-policy")["maxmemory-policy"]
    # With maxmemory unset nothing is ever evicted, so this is harmless to other users.
    server.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="leaseq"):
            leaseq.connect(REDIS_URL, table_prefix=prefix).close()

            async def body() -> None:
                async with leaseq.connect_async(REDIS_URL, table_prefix=prefix) as aq:
                    await aq.stats()

            asyncio.run(body())
    finally:
        server.config_set("maxmemory-policy", old)
    warnings = [r for r in caplog.records
                if r.name == "leaseq" and r.levelno == logging.WARNING
                and "maxmemory-policy allkeys-lru" in r.getMessage()]
    assert len(warnings) == 2, caplog.records


def test_noeviction_logs_nothing(server: Any, prefix: str,
                                 caplog: pytest.LogCaptureFixture) -> None:
    if server.config_get("maxmemory-policy")["maxmemory-policy"] != "noeviction":
        pytest.skip("the test server is not configured with noeviction")
    with caplog.at_level(logging.INFO, logger="leaseq"):
        leaseq.connect(REDIS_URL, table_prefix=prefix).close()
    assert not [r for r in caplog.records if r.name == "leaseq"]


def fake_server(monkeypatch: pytest.MonkeyPatch, replies: dict[str, Any]) -> None:
    """Answers the named commands itself (an exception is raised) and passes the rest."""
    real = driver.SyncRunner.command

    def command(self: Any, *args: Any) -> Any:
        if args[0] in replies:
            reply = replies[args[0]]
            if isinstance(reply, Exception):
                raise reply
            return reply
        return real(self, *args)

    monkeypatch.setattr(driver.SyncRunner, "command", command)


def test_config_get_disabled_is_tolerated(monkeypatch: pytest.MonkeyPatch, prefix: str,
                                          caplog: pytest.LogCaptureFixture) -> None:
    fake_server(monkeypatch, {"CONFIG GET": redis.ResponseError("unknown command 'CONFIG'")})
    with caplog.at_level(logging.INFO, logger="leaseq"), \
            leaseq.connect(REDIS_URL, table_prefix=prefix) as q:
        q.enqueue("q")
    assert any("could not read maxmemory-policy" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_server_older_than_6_2_is_refused(monkeypatch: pytest.MonkeyPatch,
                                            prefix: str) -> None:
    fake_server(monkeypatch, {"INFO": {"redis_version": "6.0.16"}})
    with pytest.raises(leaseq.ConfigurationError, match=r"6\.0\.16.*6\.2"):
        leaseq.connect(REDIS_URL, table_prefix=prefix)


def test_unreachable_server_is_backend_unavailable() -> None:
    with pytest.raises(leaseq.BackendUnavailable) as info:
        leaseq.connect("redis://127.0.0.1:1/0", connect_timeout=2)
    assert not isinstance(info.value, leaseq.AuthenticationFailed)

    async def body() -> None:
        async with leaseq.connect_async("redis://127.0.0.1:1/0", connect_timeout=2) as aq:
            await aq.enqueue("q")

    with pytest.raises(leaseq.BackendUnavailable):
        asyncio.run(body())


def test_wrong_credentials_are_authentication_failed() -> None:
    require("redis")
    with pytest.raises(leaseq.AuthenticationFailed):
        leaseq.connect("redis://no_such_user_leaseq:wrong@127.0.0.1:6379/0")


def test_a_database_number_out_of_range_is_a_configuration_error() -> None:
    require("redis")
    with pytest.raises(leaseq.ConfigurationError):
        leaseq.connect("redis://127.0.0.1:6379/100000")


def test_missing_driver_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # as if leaseq[redis] were absent
    monkeypatch.delitem(sys.modules, "leaseq.backends.redis.driver", raising=False)
    with pytest.raises(leaseq.ConfigurationError, match=r"leaseq\[redis\]"):
        leaseq.connect(REDIS_URL)


# -- a server restart in the middle of a drain ---------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test's own, persisting every write (``appendfsync always``),
    that the test can ``kill -9`` and start again on the same port and files."""

    def __init__(self, folder: Path, *options: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("needs the redis-server binary")
        self.binary, self.folder, self.port = binary, folder, free_port()
        self.options = options
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)

        def up() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        try:
            wait_for(up, timeout=10, message="the private redis-server")
        finally:
            client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()  # SIGKILL: no shutdown, no final fsync
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    try:
        yield server
    finally:
        server.kill()


def test_a_full_server_refuses_writes_and_half_writes_nothing(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
    try:
        with leaseq.connect(server.url, reclaim_interval=None) as q:
            payload = "x" * 100_000
            written = 0
            with pytest.raises(leaseq.BackendError, match="out of memory"):
                for _ in range(1000):
                    q.enqueue_many([{"queue": "q", "payload": payload}] * 3)
                    written += 3
            assert written < 3000
            assert q.stats()["q"].available == written  # the refused batch wrote nothing
            [job] = q.dequeue("q")  # claims, acks and reads still work when full
            q.ack(job)
    finally:
        server.kill()


def test_a_short_restart_is_bridged_for_idempotent_calls_only(
    private_redis: PrivateRedis,
) -> None:
    with leaseq.connect(private_redis.url, reclaim_interval=None) as q:
        job_id = q.enqueue("q", {"n": 1}).id
        private_redis.kill()
        with pytest.raises(leaseq.BackendUnavailable):
            q.enqueue("q", {"n": 2})  # it may or may not have run: never sent twice
        restart = threading.Timer(0.3, private_redis.start)
        restart.start()
        try:
            assert q.get(job_id).payload == {"n": 1}  # read again on a fresh connection
            [job] = q.dequeue("q")  # and the scripts are loaded again (NOSCRIPT)
            q.ack(job)
        finally:
            restart.join()
        assert q.get(job_id).state == "completed"


def test_a_server_killed_mid_drain_loses_nothing_under_appendfsync_always(
    private_redis: PrivateRedis,
) -> None:
    """With ``appendfsync always`` every acknowledged write survives ``kill -9``. The
    outage outlasts the clients' reconnect window, so workers see ``BackendUnavailable``;
    after the restart the drain goes on, leases lost with the outage are reclaimed, and
    every job is completed exactly once."""
    url, jobs, workers = private_redis.url, 400, 4
    done, lock = threading.Event(), threading.Lock()
    acked: list[int] = []
    outages = [0]

    def work(n: int) -> None:
        with leaseq.connect(url, reclaim_interval=0, pool_size=2) as q:
            while not done.is_set():
                try:
                    batch = q.dequeue("drain", worker_id=f"w{n}", lease=0.5, limit=4)
                    for job in batch:
                        time.sleep(0.002)  # the work
                        try:
                            q.ack(job, result=n)
                        except leaseq.LeaseLost:
                            continue
                        with lock:
                            acked.append(job.id)
                    if not batch:
                        time.sleep(0.01)
                except leaseq.BackendUnavailable:
                    with lock:
                        outages[0] += 1
                    time.sleep(0.05)

    with leaseq.connect(url) as q:
        ids = {r.id for r in q.enqueue_many([{"queue": "drain", "payload": i}
                                             for i in range(jobs)])}
    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= jobs // 3, timeout=30, message="a third drained")
        private_redis.kill()
        time.sleep(driver.RECONNECTS * 0.6)  # longer than the reconnect window (~3.2 s)
        private_redis.start()
        with leaseq.connect(url) as q:
            def drained() -> bool:
                s = q.stats().get("drain")
                return s is not None and s.completed == jobs and s.running == 0
            wait_for(drained, timeout=60, interval=0.1, message="the drain after restart")
            done.set()
            for t in threads:
                t.join(10)
            assert len(acked) == len(set(acked)), "one job acknowledged twice"
            assert set(acked) <= ids
            assert all(q.get(i).state == "completed" for i in ids)
            stats = q.stats()["drain"]
            assert (stats.available, stats.scheduled, stats.dead, stats.completed) == (
                0, 0, 0, jobs)
        assert outages[0] > 0, "the workers never noticed the outage"
    finally:
        done.set()
        for t in threads:
            t.join(10)


def test_scripts_flushed_over_and_over_never_fail_a_call(private_redis: PrivateRedis) -> None:
    """A ``SCRIPT FLUSH`` (another tool, a restart, a failover) between a ``SCRIPT LOAD``
    and the ``EVALSHA`` after it used to fail the call with ``NOSCRIPT`` (a soak producer
    died of it, issue 23): the script is now sent with ``EVAL``, which leaves no window."""
    stop = threading.Event()
    flushes = [0]

    def flush() -> None:
        client = redis.Redis(port=private_redis.port)
        while not stop.is_set():
            client.script_flush()
            flushes[0] += 1

    flusher = threading.Thread(target=flush)
    with leaseq.connect(private_redis.url, reclaim_interval=None) as q:
        flusher.start()
        try:
            for i in range(100):
                q.enqueue("q", {"i": i})
        finally:
            stop.set()
            flusher.join()
        assert flushes[0] > 20
        assert q.stats()["q"].available == 100


def test_remembered_queues_share_one_string_per_name() -> None:
    """The id → queue memory holds up to ``Located.SIZE`` jobs; each entry must not keep
    its own copy of the queue name decoded from its reply (issue 23's soak: ~4 MiB more
    per worker once full)."""
    from leaseq.backends.redis.ops import Located

    located = Located()
    for job_id in range(1, 1001):
        located.put(job_id, "".join(["mail", "-", "eu"]))  # a new str each time
    names = {id(located.get(job_id)) for job_id in range(1, 1001)}
    assert len(names) == 1 and located.get(500) == "mail-eu"
    bounded = Located()
    for job_id in range(Located.SIZE * 3 + 10):
        bounded.put(job_id, "q")
        assert len(bounded) <= Located.SIZE
    newest = Located.SIZE * 3 + 9
    assert bounded.get(9) is None
    assert all(bounded.get(newest - back) == "q" for back in range(Located.SIZE // 2))


def test_a_worker_forgets_the_jobs_it_completed(rq: leaseq.Queue, prefix: str) -> None:
    """A worker's id → queue memory holds its jobs in flight, not every job it ever ran:
    completed ids are forgotten, one at a time and in batches (issue 23's soak traced a
    one-off 5 MiB RSS step to the rebuild of a memory always full)."""
    rq.enqueue_many([{"queue": "q", "payload": {"i": i}} for i in range(30)])
    claimer = leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None)
    try:
        located = claimer._backend.ops.located  # type: ignore[attr-defined]
        [one] = claimer.dequeue(["q"], lease=30)
        assert located.get(one.id) == "q"
        claimer.ack(one)
        assert located.get(one.id) is None
        jobs = claimer.dequeue(["q"], lease=30, limit=29)
        assert len(jobs) == 29 and len(located) == 29
        claimer.ack_many(jobs)
        assert len(located) == 0
        assert rq.stats()["q"].completed == 30
    finally:
        claimer.close()
