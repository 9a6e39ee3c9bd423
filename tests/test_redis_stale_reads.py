"""No stale reads after a Redis Sentinel failover (issue 32, item 4; design §64).

A Sentinel client's pooled connections outlive a failover when nothing closes them: the
old primary of a manual (or partitioned) failover stays a writable primary for about
10 s before the Sentinel turns it into a replica, and a primary demoted by hand keeps its
clients. Reads on those connections would answer from the old primary's data: a job
the new primary has completed still "running". Each test starts its own primary, two
replicas and a Sentinel on loopback (``scripts/redis-sentinel``, through
``tests/test_redis_sentinel.Topology``; ports ``LEASEQ_TEST_STALE_PORT``, 6530 by
default: data nodes 6530-6532, the Sentinel on 6630) and stops them after.

- ``test_no_stale_live_job_across_a_double_failover``: two reader processes (one sync,
  one async client, several threads or tasks each, so their pools hold connections to
  the primary) read ``get``, ``jobs`` and ``stats`` without pause while the Sentinel fails
  over twice (A -> B -> C, ``SENTINEL FAILOVER``); after each failover the test completes
  jobs on the new primary. No read that starts more than ``CONFIRM_EVERY`` + ``SLACK``
  after the Sentinel named the new primary reports a job completed there as live.
- ``test_a_primary_demoted_under_open_connections_is_never_read``: the primary is made a
  replica by hand (its clients survive) of a node that refuses to resync it, so it keeps
  its old data; the Sentinel still names it. A write's ``READONLY`` closes all of that
  client's connections (the next read is refused, not stale); a client that only reads
  is refused within ``CONFIRM_EVERY`` + ``SLACK``; once the Sentinel names the new
  primary, both read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis

import leaseq
from leaseq.backends.redis.sentinel import CONFIRM_BACKOFF, CONFIRM_EVERY, Schedule
from tests.helpers import new_prefix, wait_for
from tests.test_redis_sentinel import SERVICE, Topology

ROOT = Path(__file__).resolve().parent.parent
BASE = int(os.environ.get("LEASEQ_TEST_STALE_PORT", "6530"))
QUEUE = "stale"
LIVE = {"scheduled", "available", "running", "dead"}
SLACK = 1.0
"""Seconds a confirmation of the primary may take beyond ``CONFIRM_EVERY`` on a loaded
machine (it takes a millisecond on an idle one). Without the checks, reads stay stale
for the ~10 s until the Sentinel reconfigures the old primary."""
JOBS, BATCH = 24, 8  # jobs held running; completed per failover
READERS = 3  # threads (tasks) per reader process, and its pool_size


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[Topology]:
    topo = Topology(tmp_path / "sentinel", BASE)
    topo.start()
    try:
        yield topo
    finally:
        topo.stop()


# -- the reader processes ----------------------------------------------------------------


def log_read(out: Any, lock: threading.Lock, **fields: Any) -> None:
    with lock:
        out.write(json.dumps(fields) + "\n")
        out.flush()


def said(kind: str, got: Any) -> dict[str, Any]:
    """What one read's answer ``got`` says: the live jobs it reports, or how many run."""
    if kind == "get":
        return {"op": kind, "live": [got.id] if got.state in LIVE else []}
    if kind == "jobs":
        return {"op": kind, "live": [job.id for job in got if job.state in LIVE]}
    stats = got.get(QUEUE)
    return {"op": kind, "running": stats.running if stats else 0}


KINDS = ("get", "jobs", "stats")


def read_sync(url: str, prefix: str, ids: list[int], log: Path, stop: Path) -> None:
    """``READERS`` threads reading through one sync client until ``stop`` exists: in
    turn one job (``get``), the queue's jobs, the counts."""
    lock = threading.Lock()
    with open(log, "a") as out, leaseq.connect(url, table_prefix=prefix, pool_size=READERS,
                                               reclaim_interval=None) as q:

        def read(kind: str, turn: int) -> Any:
            if kind == "get":
                return q.get(ids[turn % len(ids)])
            return q.jobs(QUEUE, limit=1000) if kind == "jobs" else q.stats()

        def loop(turn: int) -> None:
            while not stop.exists():
                kind, started = KINDS[turn % 3], time.monotonic()
                try:
                    event = said(kind, read(kind, turn // 3))
                except leaseq.LeaseqError as exc:
                    event = {"op": "error", "error": str(exc)[:200]}
                log_read(out, lock, t0=started, t1=time.monotonic(), **event)
                turn += 1

        threads = [threading.Thread(target=loop, args=(n,)) for n in range(READERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def read_async(url: str, prefix: str, ids: list[int], log: Path, stop: Path) -> None:
    """``read_sync`` with one async client and ``READERS`` tasks."""
    lock = threading.Lock()

    async def main() -> None:
        with open(log, "a") as out:
            async with leaseq.connect_async(url, table_prefix=prefix, pool_size=READERS,
                                            reclaim_interval=None) as aq:

                async def read(kind: str, turn: int) -> Any:
                    if kind == "get":
                        return await aq.get(ids[turn % len(ids)])
                    if kind == "jobs":
                        return await aq.jobs(QUEUE, limit=1000)
                    return await aq.stats()

                async def loop(turn: int) -> None:
                    while not stop.exists():
                        kind, started = KINDS[turn % 3], time.monotonic()
                        try:
                            event = said(kind, await read(kind, turn // 3))
                        except leaseq.LeaseqError as exc:
                            event = {"op": "error", "error": str(exc)[:200]}
                        log_read(out, lock, t0=started, t1=time.monotonic(), **event)
                        turn += 1

                await asyncio.gather(*(loop(n) for n in range(READERS)))

    asyncio.run(main())


def spawn_reader(kind: str, url: str, prefix: str, ids: list[int], log: Path,
                 stop: Path) -> subprocess.Popen[bytes]:
    code = ("import json, sys; from pathlib import Path; "
            "from tests.test_redis_stale_reads import read_sync, read_async; "
            f"read_{kind}(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), "
            "Path(sys.argv[4]), Path(sys.argv[5]))")
    with open(log.with_suffix(".out"), "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-c", code, url, prefix, json.dumps(ids), str(log), str(stop)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}, stdout=sink,
            stderr=subprocess.STDOUT)


def reads(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


# -- the failovers -------------------------------------------------------------------------


def fail_over(topology: Topology) -> tuple[int, float]:
    """``SENTINEL FAILOVER``, retried while the Sentinel has no replica ready (the last
    failover's still resyncing); the new primary's port, and when the Sentinel was first
    seen to have switched to it (time.monotonic(), which every process on the machine
    shares). Switched: its ``SENTINEL MASTERS`` names it, as clients ask (redis-py), at
    the end of the failover (``+switch-master``); ``GET-MASTER-ADDR-BY-NAME`` names the
    promoted replica a second or so earlier, while the other replicas are reconfigured."""
    old = topology.primary()
    deadline = time.monotonic() + 30
    with topology.node(topology.sentinel) as sentinel:
        while True:
            try:
                sentinel.execute_command("SENTINEL", "FAILOVER", SERVICE)
                break
            except redis.ResponseError as exc:  # NOGOODSLAVE, INPROG
                assert time.monotonic() < deadline, f"no failover: {exc}"
                time.sleep(0.1)
        new = wait_for(lambda: (port := int(sentinel.sentinel_master(SERVICE)["port"])) != old
                       and port, timeout=30, interval=0.01,
                       message="the Sentinel to switch to a new primary")
    seen = time.monotonic()
    with topology.node(new) as node:
        assert node.execute_command("ROLE")[0] == "master"
    return new, seen


def stale(events: list[dict[str, Any]], done: dict[int, float],
          named: dict[int, float]) -> list[dict[str, Any]]:
    """The reads that report live a job completed before they started, on a primary the
    Sentinel had named more than ``CONFIRM_EVERY`` + ``SLACK`` before (``named``: job ->
    when the Sentinel named the primary that completed it)."""
    out = []
    for event in events:
        known = {j for j, at in done.items()
                 if at < event["t0"] and event["t0"] > named[j] + CONFIRM_EVERY + SLACK}
        if event["op"] in ("get", "jobs"):
            if known & set(event["live"]):
                out.append(event)
        elif event["op"] == "stats" and event["running"] > JOBS - len(known):
            out.append(event)
    return out


# Serial (tests/conftest.py): each takes 15-20 s of a private topology, and a busy machine
# would stretch the confirmations whose timing they check.
@pytest.mark.serial
def test_no_stale_live_job_across_a_double_failover(topology: Topology,
                                                    tmp_path: Path) -> None:
    url, prefix = topology.url(), new_prefix()
    with leaseq.connect(url, table_prefix=prefix) as q:
        q.migrate()
        q.enqueue_many([{"queue": QUEUE, "payload": {"n": n}} for n in range(JOBS)])
        held = q.dequeue(QUEUE, worker_id="holder", lease=600, limit=JOBS)
    assert len(held) == JOBS
    with topology.node(topology.primary()) as primary:
        assert primary.execute_command("WAIT", 2, 5000) == 2  # the replicas hold them
    ids = [job.id for job in held]
    stop = tmp_path / "stop"
    logs = {kind: tmp_path / f"{kind}.jsonl" for kind in ("sync", "async")}
    named_url = topology.url("?client_name=stale_reader")  # to count their connections
    readers = [spawn_reader(kind, named_url, prefix, ids, log, stop)
               for kind, log in logs.items()]
    done: dict[int, float] = {}
    named: dict[int, float] = {}
    seen: list[tuple[int, float]] = []
    try:
        for log in logs.values():
            wait_for(lambda log=log: len(reads(log)) >= 4 * READERS, timeout=30,
                     message=f"{log.stem} reads before the failover")
        # The readers' pools hold several connections to the primary as it is replaced.
        wait_for(lambda: clients(topology, BASE, "stale_reader") >= 4, timeout=10,
                 message="the readers' pooled connections")
        for batch in (held[:BATCH], held[BATCH:2 * BATCH]):
            port, at = fail_over(topology)
            seen.append((port, at))
            with leaseq.connect(f"redis://127.0.0.1:{port}/0", table_prefix=prefix) as new:
                for job in batch:
                    new.ack(job)
                    done[job.id], named[job.id] = time.monotonic(), at
            with topology.node(port) as node:  # the next failover's replica has them
                assert node.execute_command("WAIT", 1, 5000) >= 1
            # Each reader gets, lists and counts several times after the window.
            after = max(done.values()) + CONFIRM_EVERY + SLACK
            for log in logs.values():
                wait_for(lambda log=log, after=after: sum(
                    e["t0"] > after and e["op"] != "error" for e in reads(log)) >= 30,
                    timeout=30, message=f"{log.stem} reads after failing over to {port}")
    finally:
        stop.touch()
        for proc in readers:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    assert [proc.returncode for proc in readers] == [0, 0], [
        log.with_suffix(".out").read_text()[-2000:] for log in logs.values()]
    ports = [BASE, *(port for port, _ in seen)]
    assert len(set(ports)) == 3, f"failed over {ports}: not A -> B -> C"
    with leaseq.connect(f"redis://127.0.0.1:{ports[-1]}/0", table_prefix=prefix) as final:
        assert all(final.get(j).state == "completed" for j in done)  # no failover lost any
    report = []
    for kind, log in logs.items():
        events = reads(log)
        bad = stale(events, done, named)
        assert not bad, (f"{kind}: {len(bad)} stale reads after failing over {ports}, "
                         f"first {bad[0]}")
        # How long after the latest switch stale answers were still seen (allowed up to
        # CONFIRM_EVERY + SLACK): each read against the switch before it.
        late = [e["t0"] - at for e in events
                for at in [max((a for _, a in seen if a < e["t0"]), default=None)]
                if at is not None and stale([e], done, dict.fromkeys(named, -1e9))]
        report.append(f"{kind}: {len(events)} reads, "
                      f"{sum(e['op'] == 'error' for e in events)} errors, last stale answer "
                      f"{max(late, default=0.0):.2f} s after the switch")
    print(f"\nfailed over {' -> '.join(map(str, ports))}; " + "; ".join(report))


# -- a primary demoted under open connections ---------------------------------------------


def warm(client: Any, n: int) -> None:
    """``n`` concurrent reads, so that the client's pool holds ``n`` connections."""
    barrier = threading.Barrier(n)

    def read() -> None:
        barrier.wait(10)
        client.stats()

    threads = [threading.Thread(target=read) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)


def clients(topology: Topology, port: int, name: str) -> int:
    with topology.node(port) as node:
        return sum(c.get("name") == name for c in node.client_list())


def demote_by_hand(topology: Topology, old: int, new: int) -> None:
    """``new`` becomes the primary; ``old`` its replica, which ``new`` refuses to resync
    (ACL changes are not replicated), so ``old`` keeps serving its own data. REPLICAOF
    closes no client: every connection to ``old`` survives."""
    with topology.node(new) as node:
        node.execute_command("REPLICAOF", "NO", "ONE")
        node.execute_command("ACL", "SETUSER", "default", "-psync", "-sync", "-replconf")
        node.client_kill_filter(_type="replica")
    with topology.node(old) as node:
        node.execute_command("REPLICAOF", "127.0.0.1", str(new))
        wait_for(lambda: node.execute_command("ROLE")[0] == "slave", timeout=10)


def tell_sentinel(topology: Topology, new: int) -> None:
    with topology.node(topology.sentinel) as sentinel:
        sentinel.execute_command("SENTINEL", "REMOVE", SERVICE)
        sentinel.execute_command("SENTINEL", "MONITOR", SERVICE, "127.0.0.1", str(new), 1)
    wait_for(lambda: topology.primary() == new, timeout=10)


@pytest.mark.serial
def test_a_primary_demoted_under_open_connections_is_never_read(topology: Topology) -> None:
    old, new = BASE, BASE + 1
    prefix = new_prefix()
    url = topology.url("?client_name=stale_demoted")
    writer = leaseq.connect(url, table_prefix=prefix, pool_size=3)
    reader = leaseq.connect(url, table_prefix=prefix, pool_size=3)
    loop = asyncio.new_event_loop()  # the async client's, for the whole test
    areader = leaseq.connect_async(url, table_prefix=prefix, pool_size=3)
    try:
        writer.migrate()
        writer.enqueue_many([{"queue": QUEUE, "payload": {"n": n}} for n in range(2)])
        held = writer.dequeue(QUEUE, worker_id="holder", lease=600, limit=2)
        with topology.node(old) as node:
            assert node.execute_command("WAIT", 2, 5000) == 2
        warm(writer, 3)
        warm(reader, 3)

        async def warm_async() -> None:
            await asyncio.gather(*(areader.stats() for _ in range(3)))

        loop.run_until_complete(warm_async())
        assert clients(topology, old, "stale_demoted") >= 6

        demote_by_hand(topology, old, new)
        demoted = time.monotonic()
        with leaseq.connect(f"redis://127.0.0.1:{new}/0", table_prefix=prefix) as on_new:
            for job in held:
                on_new.ack(job)
        # The old primary still says they run (a plain URL may read a replica).
        with leaseq.connect(f"redis://127.0.0.1:{old}/0", table_prefix=prefix) as on_old:
            assert {on_old.get(j.id).state for j in held} == {"running"}

        # A write meets READONLY: every connection of that client to the old primary
        # closes, so its next read asks the Sentinels, which still name the old primary,
        # and is refused (BackendUnavailable): never the old data.
        with pytest.raises(leaseq.BackendUnavailable, match=r"slave|replica"):
            writer.enqueue(QUEUE, {"n": 2}, unique_key="two")
        try:
            state = writer.get(held[0].id).state
        except leaseq.BackendUnavailable as exc:
            assert "is a replica" in str(exc)
        else:
            pytest.fail(f"{state!r} read from the old primary right after its READONLY")

        # A client that only reads has no READONLY to meet: its pool confirms the primary
        # about once a second and is refused from then on.
        refused = False
        while not refused:
            started = time.monotonic()
            try:
                state = reader.get(held[0].id).state
            except leaseq.BackendUnavailable as exc:
                assert "replica" in str(exc)
                refused = True
                continue
            assert state == "completed" or started < demoted + CONFIRM_EVERY + SLACK, (
                f"{state!r} from the old primary {started - demoted:.2f} s after it was "
                "demoted")
        # The async client likewise (its READONLY path is test_redis_sentinel's).
        while True:
            started = time.monotonic()
            try:
                state = loop.run_until_complete(areader.get(held[0].id)).state
            except leaseq.BackendUnavailable as exc:
                assert "replica" in str(exc)
                break
            assert state == "completed" or started < demoted + CONFIRM_EVERY + SLACK

        # Once the Sentinel names the new primary, every client reads it.
        tell_sentinel(topology, new)
        for client in (writer.get, reader.get):
            assert {client(j.id).state for j in held} == {"completed"}
        assert {loop.run_until_complete(areader.get(j.id)).state
                for j in held} == {"completed"}
        assert clients(topology, old, "stale_demoted") == 0
    finally:
        writer.close()
        reader.close()
        with contextlib.suppress(Exception):
            loop.run_until_complete(areader.close())
        loop.close()


# -- the schedule of confirmations (no server) ---------------------------------------------


def test_a_pool_confirms_once_a_period_and_backs_off_while_no_sentinel_answers() -> None:
    now = [100.0]
    schedule = Schedule(clock=lambda: now[0])
    assert not schedule.due()  # a new pool: each new connection asks the Sentinels anyway
    now[0] += CONFIRM_EVERY
    # Eight threads taking connections at once: one of them confirms.
    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(lambda _: schedule.due(), range(8))) == 1
    now[0] += CONFIRM_EVERY / 2
    assert not schedule.due()
    now[0] += CONFIRM_EVERY / 2
    assert schedule.due()
    pauses = []
    for _ in range(8):  # no Sentinel answers: 2, 4, 8, 16, then 30 s
        schedule.answered(False)
        pauses.append(schedule.next - now[0])
        now[0] = schedule.next
        assert schedule.due()
    assert pauses == [2.0, 4.0, 8.0, 16.0, *[CONFIRM_BACKOFF] * 4]
    schedule.answered(True)
    now[0] += CONFIRM_EVERY
    assert schedule.due()
