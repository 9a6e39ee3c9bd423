"""The Redis backend behind Sentinel (``redis+sentinel://``): a primary with two replicas
and one Sentinel on loopback, started by ``scripts/redis-sentinel`` for this module (ports
``LEASEQ_TEST_SENTINEL_PORT``, 6390 by default: data nodes 6390-6392, Sentinel 6490; the
failover tests start their own on the next three ports, Sentinel 6493).

- the URL form: what is refused, and why;
- round trips, sync and async, on the database the URL names; passwords;
- a failover followed without a restart (``test_failover_...``): a ``leaseq worker``
  process drains jobs, the primary is SIGKILLed mid-drain, the Sentinel promotes a
  replica; producers keep enqueueing, the same worker runs what was enqueued after the
  failover, its push listener finds the new primary, a ``Queue.wait`` across the
  failover returns, and the dashboard answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import leaseq
from tests._processes import append_event
from tests.helpers import new_prefix, wait_for

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "redis-sentinel"
BASE = int(os.environ.get("LEASEQ_TEST_SENTINEL_PORT", "6390"))
SERVICE = "leaseq"  # the service scripts/redis-sentinel has the Sentinel monitor


class Topology:
    """A primary on ``port``, replicas on ``port + 1`` and ``port + 2``, a Sentinel on
    ``port + 100``, under ``dir`` (``scripts/redis-sentinel``)."""

    def __init__(self, directory: Path, port: int, tls: bool = False) -> None:
        self.dir = directory
        self.port = port
        self.sentinel = port + 100
        self.tls = tls

    def url(self, tail: str = "", scheme: str = "redis+sentinel", auth: str = "") -> str:
        return f"{scheme}://{auth}127.0.0.1:{self.sentinel}/{SERVICE}{tail}"

    def start(self) -> None:
        done = subprocess.run([str(SCRIPT), "start", str(self.dir), str(self.port),
                               *(["--tls"] if self.tls else [])],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            self.stop()
            why = f"scripts/redis-sentinel start failed: {done.stderr.strip()}"
            if os.environ.get("CI"):
                pytest.fail(why)
            pytest.skip(why)

    def stop(self) -> None:
        subprocess.run([str(SCRIPT), "stop", str(self.dir)], timeout=60, check=False)

    def primary(self) -> int:
        """The port of the primary the Sentinel names now."""
        import redis

        with redis.Redis(port=self.sentinel, socket_timeout=2) as sentinel:
            _, port = sentinel.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def node(self, port: int) -> Any:
        import redis

        return redis.Redis(port=port, socket_timeout=5, decode_responses=True)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    topo = Topology(tmp_path_factory.mktemp("sentinel"), BASE)
    topo.start()
    try:
        yield topo
    finally:
        topo.stop()


# -- the URL ------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "says"), [
    ("redis+sentinel://127.0.0.1:26379", "names no service"),
    ("redis+sentinel://127.0.0.1:26379/", "names no service"),
    ("redis+sentinel:///leaseq", "names no Sentinel"),
    ("redis+sentinel://127.0.0.1:nope/leaseq", "bad Sentinel address '127.0.0.1:nope'"),
    ("redis+sentinel://127.0.0.1:26379,127.0.0.1:99999/leaseq",
     "bad Sentinel address '127.0.0.1:99999'"),
    ("redis+sentinel://127.0.0.1:26379/leaseq/x", "the database must be a number, not 'x'"),
    ("redis+sentinel://127.0.0.1:26379/leaseq?socket_timeout=soon",
     r"bad Redis Sentinel URL .*socket_timeout"),
    ("redis+sentinel://127.0.0.1:26379/leaseq?client_name=x&bogus=1",
     "unknown query parameter 'bogus'"),
])
def test_a_malformed_sentinel_url_is_refused_saying_why(url: str, says: str) -> None:
    for connect in (leaseq.connect, leaseq.connect_async):
        with pytest.raises(leaseq.ConfigurationError, match=says) as caught:
            connect(url)
        assert "redis+sentinel://" in str(caught.value)  # names the URL it refuses


def test_the_password_in_a_url_error_is_never_shown() -> None:
    with pytest.raises(leaseq.ConfigurationError) as caught:
        leaseq.connect("redis+sentinel://:hunter2@127.0.0.1:26379/leaseq/x"
                       "?sentinel_password=swordfish")
    assert "hunter2" not in str(caught.value) and "swordfish" not in str(caught.value)


def test_an_unknown_service_is_a_configuration_error(topology: Topology) -> None:
    url = topology.url().replace(f"/{SERVICE}", "/nosuch")
    with pytest.raises(leaseq.ConfigurationError, match="monitor no service 'nosuch'"):
        leaseq.connect(url)

    async def first_call() -> None:
        aq = leaseq.connect_async(url)
        try:
            with pytest.raises(leaseq.ConfigurationError, match="no service 'nosuch'"):
                await aq.stats()
        finally:
            await aq.close()

    asyncio.run(first_call())


def test_no_sentinel_reachable_is_backend_unavailable(topology: Topology) -> None:
    # Two Sentinels named, neither listening (ports next to the test topology's).
    url = f"redis+sentinel://127.0.0.1:{BASE + 97},127.0.0.1:{BASE + 98}/{SERVICE}"
    with pytest.raises(leaseq.BackendUnavailable, match="is unreachable") as caught:
        leaseq.connect(url, connect_timeout=2)
    assert f"127.0.0.1:{BASE + 97}" in str(caught.value)
    assert f"127.0.0.1:{BASE + 98}" in str(caught.value)


# -- round trips ----------------------------------------------------------------------------


def test_sync_round_trip_on_the_database_the_url_names(topology: Topology) -> None:
    prefix = new_prefix()
    # A Sentinel that is not there, then the real one: the first that answers serves.
    url = (f"redis+sentinel://127.0.0.1:{BASE + 97},127.0.0.1:{topology.sentinel}"
           f"/{SERVICE}/3")
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()
        enqueued = q.enqueue("mail", {"to": "a"})
        [job] = q.dequeue(["mail"], worker_id="w")
        assert job.id == enqueued.id and job.payload == {"to": "a"}
        q.ack(job, result={"sent": True})
        assert q.wait(job.id, timeout=5) == {"sent": True}
    assert _keys(topology, 3, prefix), "nothing written to database 3"
    assert not _keys(topology, 0, prefix), "written to database 0 instead"


def _keys(topology: Topology, db: int, prefix: str) -> list[str]:
    import redis

    with redis.Redis(port=topology.primary(), db=db, decode_responses=True) as node:
        return list(node.scan_iter(match=f"*{prefix}*"))


def test_async_round_trip(topology: Topology) -> None:
    prefix = new_prefix()

    async def main() -> None:
        async with leaseq.connect_async(topology.url(), table_prefix=prefix) as aq:
            await aq.migrate()
            enqueued = await aq.enqueue("mail", {"to": "b"})
            [job] = await aq.dequeue(["mail"], worker_id="w")
            assert job.id == enqueued.id
            await aq.ack(job, result=7)
            assert await aq.wait(job.id, timeout=5) == 7

    asyncio.run(main())


def test_the_pool_blocks_for_a_free_connection_as_on_redis_urls(topology: Topology) -> None:
    """``pool_size`` connections at most, and a caller beyond them waits for one (a plain
    Sentinel pool of redis-py would fail it at once)."""
    prefix = new_prefix()
    url = topology.url("?client_name=sentinel_pool_test")
    errors: list[BaseException] = []
    with leaseq.connect(url, table_prefix=prefix, pool_size=2, connect_timeout=10) as q:

        def produce(worker: int) -> None:
            try:
                for n in range(40):
                    q.enqueue("pool", {"w": worker, "n": n})
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        with topology.node(topology.primary()) as primary:
            peak = 0
            while any(thread.is_alive() for thread in threads):
                clients = primary.client_list()
                peak = max(peak, sum(c["name"] == "sentinel_pool_test" for c in clients))
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert q.stats()["pool"].available == 8 * 40
    assert 1 <= peak <= 2


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Topology]:
    """A topology of the test's own (ports ``BASE + 3`` on), for tests that change it."""
    topo = Topology(tmp_path / "sentinel", BASE + 3)
    topo.start()
    try:
        yield topo
    finally:
        topo.stop()


def test_the_urls_password_is_the_data_nodes_and_sentinel_password_the_sentinels(
    fresh: Topology,
) -> None:
    with fresh.node(fresh.sentinel) as sentinel:
        # The Sentinel must reach the data nodes once they want a password.
        sentinel.execute_command("SENTINEL", "SET", SERVICE, "auth-pass", "data-pw")
    for port in (fresh.port, fresh.port + 1, fresh.port + 2):
        with fresh.node(port) as node:
            node.config_set("masterauth", "data-pw")
            node.config_set("requirepass", "data-pw")
    with fresh.node(fresh.sentinel) as sentinel:
        sentinel.execute_command("ACL", "SETUSER", "default", "on", ">sentinel-pw")

    prefix = new_prefix()
    good = fresh.url("?sentinel_password=sentinel-pw", auth=":data-pw@")
    with leaseq.connect(good, table_prefix=prefix) as q:
        assert q.get(q.enqueue("auth", {"x": 1}).id).state == "available"
    with pytest.raises(leaseq.AuthenticationFailed, match="sentinel_password=") as caught:
        leaseq.connect(fresh.url(auth=":data-pw@"))
    assert "data-pw" not in str(caught.value)
    with pytest.raises(leaseq.AuthenticationFailed):
        leaseq.connect(fresh.url("?sentinel_password=sentinel-pw", auth=":wrong@"))


# -- a failover, followed without a restart ------------------------------------------------


app = leaseq.App(
    os.environ.get("LEASEQ_TEST_URL", "memory://sentinel-tests"),
    table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
    # Longer than the outage, heartbeats missed during it included: the jobs a worker
    # holds across the failover are its own still when the new primary answers.
    lease=30.0,
)


@app.task(queue="work", name="mark")
def mark(n: int) -> int:
    append_event(event="ran", n=n, pid=os.getpid(), at=time.time())
    return n


@app.task(queue="gate", name="gate")
def gate(path: str) -> str:
    """Holds its job until the file ``path`` exists (the test creates it)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return "opened"


def ran(log: Path) -> dict[int, float]:
    """n -> when a handler first ran ``mark(n)``, from the worker's event log."""
    out: dict[int, float] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            out.setdefault(event["n"], event["at"])
    return out


def test_failover_is_followed_without_a_restart(fresh: Topology, tmp_path: Path) -> None:
    """A ``leaseq worker`` process on the Sentinel URL drains jobs; the primary is
    SIGKILLed mid-drain and the Sentinel promotes a replica. Detection is slowed to 4 s
    so that the outage (about 6 s) outlasts every client's own retries (about 3 s)."""
    from leaseq.backends.redis.keys import Keys
    from leaseq.dashboard import create_app, running

    url, prefix, log = fresh.url(), new_prefix(), tmp_path / "events.jsonl"
    opened = tmp_path / "gate-open"
    with fresh.node(fresh.sentinel) as sentinel:
        sentinel.execute_command("SENTINEL", "SET", SERVICE, "down-after-milliseconds", "4000")
    q = leaseq.connect(url, table_prefix=prefix)
    worker: subprocess.Popen[str] | None = None
    stop = threading.Event()
    producer: threading.Thread | None = None
    try:
        q.migrate()
        gate_id = q.enqueue("gate", {"path": str(opened)}, kind="gate").id
        q.enqueue_many([{"queue": "work", "kind": "mark", "payload": {"n": n}}
                        for n in range(40)])
        old = fresh.primary()
        with fresh.node(old) as primary:
            assert primary.execute_command("WAIT", 2, 5000) == 2  # both replicas have them

        env = {**os.environ, "LEASEQ_TEST_URL": url, "LEASEQ_TEST_PREFIX": prefix,
               "LEASEQ_TEST_LOG": str(log), "PYTHONPATH": str(ROOT)}
        with open(tmp_path / "worker.log", "w") as out:
            # A 30 s poll interval: a job picked up sooner was woken by the push listener.
            worker = subprocess.Popen(
                [sys.executable, "-m", "leaseq.cli", "worker", "tests.test_redis_sentinel:app",
                 "--concurrency", "2", "--poll-interval", "30", "--reclaim-interval", "1",
                 "--grace", "2"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)

        # A result wait that spans the failover, from a client of its own.
        waited: dict[str, Any] = {}

        def wait_gate() -> None:
            with leaseq.connect(url, table_prefix=prefix) as waiter:
                try:
                    waited["result"] = waiter.wait(gate_id, timeout=60)
                except BaseException as exc:  # reported below
                    waited["error"] = exc
                waited["at"] = time.time()

        waiter_thread = threading.Thread(target=wait_gate, daemon=True)
        waiter_thread.start()

        # Producers keep enqueueing through the failover, retrying what fails (a unique
        # key makes a retry of an enqueue that did land harmless).
        returned: dict[int, float] = {}
        refused = [0]

        def produce() -> None:
            with leaseq.connect(url, table_prefix=prefix) as producer_q:
                n = 1000
                while not stop.is_set():
                    try:
                        producer_q.enqueue("work", {"n": n}, kind="mark", unique_key=f"p{n}")
                    except leaseq.BackendUnavailable:
                        refused[0] += 1
                        time.sleep(0.05)
                        continue
                    returned[n] = time.time()
                    n += 1
                    time.sleep(0.05)

        with running(create_app(url, table_prefix=prefix)) as dashboard:
            assert httpx.get(f"{dashboard}/", timeout=10).status_code == 200
            wait_for(lambda: len(ran(log)) >= 10, timeout=20, message="the drain under way")
            producer = threading.Thread(target=produce)
            producer.start()
            wait_for(lambda: len(returned) >= 3, timeout=10, message="producers under way")

            with fresh.node(old) as primary:
                assert primary.execute_command("WAIT", 2, 5000) == 2  # the gate's claim too
            pid = int((fresh.dir / str(old) / "redis.pid").read_text())
            os.kill(pid, signal.SIGKILL)  # mid-drain
            killed = time.time()

            new = wait_for(lambda: (port := fresh.primary()) != old and port, timeout=20,
                           interval=0.1, message="the Sentinel to promote a replica")
            promoted = time.time()
            wait_for(lambda: sum(at > promoted + 1 for at in returned.values()) >= 10,
                     timeout=20, message="enqueues returning after the failover")
            stop.set()
            producer.join(10)
            final = dict(returned)

            # Every enqueue that returned after the kill went to the new primary: the same
            # worker process runs each one.
            since_kill = sorted(n for n, at in final.items() if at > killed)
            wait_for(lambda: set(since_kill) <= set(ran(log)), timeout=20,
                     message="the worker to run every job enqueued after the kill")
            assert worker.poll() is None, "the worker exited"
            # Every job of the first batch ran too (they were on both replicas).
            wait_for(lambda: set(range(40)) <= set(ran(log)), timeout=10,
                     message="the worker to run the whole first batch")

            # The push listener found the new primary: with a 30 s poll interval, a job
            # enqueued to an idle worker runs at once.
            channel = Keys(prefix).wake
            with fresh.node(new) as primary:
                wait_for(lambda: primary.pubsub_numsub(channel)[0][1] >= 1, timeout=40,
                         interval=0.1, message="the listener subscribed on the new primary")
            probe_sent = time.time()
            probe = q.enqueue("work", {"n": 99999}, kind="mark")
            wait_for(lambda: 99999 in ran(log), timeout=5, message="the probe job to run")
            pickup = ran(log)[99999] - probe_sent

            # The result wait that began before the failover returns once the gate opens.
            opened.touch()
            gate_opened = time.time()
            waiter_thread.join(30)
            assert waited.get("result") == "opened", waited

            # The dashboard, started before the failover, reads the new primary.
            page = wait_for(
                lambda: (r := httpx.get(f"{dashboard}/jobs/{probe.id}", timeout=10))
                .status_code == 200 and r, timeout=10, interval=0.2,
                message="a dashboard page")
            assert "mark" in page.text
    finally:
        stop.set()
        opened.touch()  # a failed test's waiter and gate job end too
        if producer is not None:
            producer.join(10)
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)
        q.close()
    assert pickup < 2.0, f"the probe waited {pickup:.2f} s: no push wake-up"
    print(f"\noutage {promoted - killed:.1f} s (kill to promotion seen), {refused[0]} "
          f"enqueues refused meanwhile, {len(since_kill)} enqueued after the kill all ran; "
          f"probe picked up in {pickup * 1000:.0f} ms; result wait returned "
          f"{waited['at'] - gate_opened:.2f} s after the gate opened")


def test_a_demoted_primary_answering_readonly_leads_to_the_new_one(fresh: Topology) -> None:
    """A client whose pooled connection still reaches the old primary after it became a
    replica gets READONLY: the connection is dropped and the next one asks the
    Sentinels. The switch is made by hand so that the old connections survive it (a
    Sentinel failover would kill them, hiding the READONLY)."""
    from leaseq.backends.redis.keys import Keys

    prefix = new_prefix()
    old, new, other = fresh.port, fresh.port + 1, fresh.port + 2
    loop = asyncio.new_event_loop()  # the async client's, across the switch
    aq = leaseq.connect_async(fresh.url(), table_prefix=prefix, pool_size=1)
    with leaseq.connect(fresh.url(), table_prefix=prefix, pool_size=1) as q:
        first = q.enqueue("ro", {"n": 1}).id
        loop.run_until_complete(aq.enqueue("ro", {"n": 10}))  # its connection is open
        with fresh.node(new) as node:
            node.execute_command("REPLICAOF", "NO", "ONE")
        for port in (old, other):
            with fresh.node(port) as node:
                node.execute_command("REPLICAOF", "127.0.0.1", str(new))
        with fresh.node(fresh.sentinel) as sentinel:
            sentinel.execute_command("SENTINEL", "REMOVE", SERVICE)
            sentinel.execute_command("SENTINEL", "MONITOR", SERVICE, "127.0.0.1", str(new), 1)
        with fresh.node(new) as node:  # the first job came over with the resync
            wait_for(lambda: node.info("replication")["role"] == "master", timeout=10)
        with fresh.node(old) as node:
            wait_for(lambda: node.info("replication").get("master_link_status") == "up",
                     timeout=10, message="the old primary to follow the new one")

        # A write on the old connection is refused without running; its outcome is
        # reported unknown, as for any dropped connection (a unique key makes the
        # retry safe), and the retry goes to the new primary.
        with pytest.raises(leaseq.BackendUnavailable, match=r"slave|replica"):
            q.enqueue("ro", {"n": 2}, unique_key="two")
        second = q.enqueue("ro", {"n": 2}, unique_key="two").id
        assert fresh.primary() == new
        with fresh.node(new) as node:
            assert node.exists(Keys(prefix).job("ro", second))
        assert q.get(first).state == "available"
        assert q.get(second).payload == {"n": 2}

        async def async_client_follows() -> int:
            with pytest.raises(leaseq.BackendUnavailable, match=r"slave|replica"):
                await aq.enqueue("ro", {"n": 3}, unique_key="three")
            return (await aq.enqueue("ro", {"n": 3}, unique_key="three")).id

        try:
            third = loop.run_until_complete(async_client_follows())
        finally:
            loop.run_until_complete(aq.close())
            loop.close()
        with fresh.node(new) as node:
            assert node.exists(Keys(prefix).job("ro", third))


def test_rediss_sentinel_speaks_tls_to_the_sentinels_and_the_data_nodes(
    tmp_path: Path,
) -> None:
    """Every port of this topology speaks TLS only (``scripts/redis-sentinel --tls``)."""
    topo = Topology(tmp_path / "tls", BASE + 6, tls=True)
    topo.start()
    try:
        ca = topo.dir / "tls" / "ca.crt"
        url = topo.url(f"?ssl_ca_certs={ca}", scheme="rediss+sentinel")
        prefix = new_prefix()
        with leaseq.connect(url, table_prefix=prefix) as q:
            job_id = q.enqueue("tls", {"n": 1}).id

        async def read() -> str:
            async with leaseq.connect_async(url, table_prefix=prefix) as aq:
                return (await aq.get(job_id)).state

        assert asyncio.run(read()) == "available"
        # Without the CA the certificate is refused, by the Sentinel first.
        with pytest.raises(leaseq.BackendUnavailable, match="certificate verify failed"):
            leaseq.connect(topo.url(scheme="rediss+sentinel"), connect_timeout=3)
        # And plain text gets nowhere.
        with pytest.raises(leaseq.BackendUnavailable):
            leaseq.connect(topo.url(), connect_timeout=3)
    finally:
        topo.stop()
