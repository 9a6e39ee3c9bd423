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
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import leaseq
from tests.helpers import new_prefix

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "redis-sentinel"
BASE = int(os.environ.get("LEASEQ_TEST_SENTINEL_PORT", "6390"))
SERVICE = "leaseq"  # the service scripts/redis-sentinel has the Sentinel monitor


class Topology:
    """A primary on ``port``, replicas on ``port + 1`` and ``port + 2``, a Sentinel on
    ``port + 100``, under ``dir`` (``scripts/redis-sentinel``)."""

    def __init__(self, directory: Path, port: int) -> None:
        self.dir = directory
        self.port = port
        self.sentinel = port + 100

    def url(self, tail: str = "", scheme: str = "redis+sentinel", auth: str = "") -> str:
        return f"{scheme}://{auth}127.0.0.1:{self.sentinel}/{SERVICE}{tail}"

    def start(self) -> None:
        done = subprocess.run([str(SCRIPT), "start", str(self.dir), str(self.port)],
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
     "Invalid value for 'socket_timeout'"),
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
