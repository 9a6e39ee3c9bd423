"""S6, ack outcome unknown: the server commits a write and its reply never arrives.

A ``tests.netproxy.Proxy`` sits between a leaseq client and PostgreSQL, MariaDB or Redis.
It forwards the statement that commits an ack or an enqueue, swallows the server's reply,
checks through a direct client that the write did commit (while the proxied client still
waits), and cuts the connection. Then:

* a lost ack is retried (by leaseq on a fresh connection, or by the caller once leaseq
  gives up) and counts as a success: one completion, never ``LeaseLost`` for the lease
  that completed the job;
* a lost enqueue surfaces as ``BackendUnavailable``; repeated with the same
  ``unique_key`` it returns the id the lost attempt created, with ``created=False``;
  without a key, the lost attempt's job exists, so a blind repeat would duplicate it;
* a lost ``nack``, ``nack_many``, ``release`` or ``bury`` surfaces as ``OutcomeUnknown``;
  repeated by the caller with the same job it returns what the first call returned,
  a later holder's lease running meanwhile or not, and the job shows the call once.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import leaseq
from leaseq.backends import _retry as retry_policy
from leaseq.backends.mysql.driver import MysqlDialect
from leaseq.backends.postgres.driver import PostgresDialect
from leaseq.backends.redis.lua import SCRIPTS
from leaseq.errors import BackendUnavailable, OutcomeUnknown
from leaseq.worker.completer import Completer
from tests.conftest import require
from tests.helpers import POSTGRES_URL, backend_url, drop_tables, new_prefix, wait_for
from tests.netproxy import Proxy, Rule

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "s6"


@pytest.fixture(params=["postgres", "mysql", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def url(backend: str, tmp_path: Path) -> str:
    return backend_url(backend, str(tmp_path))


@pytest.fixture
def direct(backend: str, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    """A client that talks to the server without the proxy: it enqueues and checks."""
    queue = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    queue.migrate()  # on Redis this also loads every script, so EVALSHA never misses
    try:
        yield queue
    finally:
        queue.close()
        drop_tables(backend, prefix)


@pytest.fixture
def proxy(url: str) -> Iterator[Proxy]:
    with Proxy.for_url(url) as p:
        yield p


def fragment(queries: dict[str, str], name: str) -> bytes:
    """A line of query ``name``, sent as it stands (no placeholder in it), that no other
    query of the dialect holds: the bytes that say this statement is on the wire."""
    others = [text for other, text in queries.items() if other != name]
    for line in sorted(queries[name].splitlines(), key=len, reverse=True):
        line = line.strip()
        if "%(" not in line and len(line) >= 12 and not any(line in t for t in others):
            return line.encode()
    raise AssertionError(f"query {name!r} has no line of its own to match on")


def ack_commit(backend: str, prefix: str) -> dict[str, bytes]:
    """``drop_reply`` arguments that match what commits one ``ack``."""
    if backend == "postgres":
        # One autocommit statement: its reply is the commit's.
        return {"match": fragment(PostgresDialect(prefix).q, "complete_held")}
    if backend == "mysql":
        # lock_held, archive, delete_job, then COMMIT (backends/_sql/ops.py).
        return {"after": fragment(MysqlDialect(prefix).q, "archive"), "match": b"COMMIT"}
    return {"match": SCRIPTS["complete"].sha.encode()}


def enqueue_commit(backend: str, marker: str, keyed: bool) -> dict[str, bytes]:
    """``drop_reply`` arguments that match what commits an enqueue carrying ``marker``
    (a unique key or a payload value: bound parameters travel with the statement)."""
    if backend == "redis":
        return {"match": SCRIPTS["enqueue"].sha.encode()}  # one script: the commit
    if backend == "postgres" and not keyed:
        return {"match": marker.encode()}  # one autocommit INSERT
    return {"after": marker.encode(), "match": b"COMMIT"}


def history_rows(backend: str, url: str, prefix: str, job_id: int) -> int:
    """How many completions the database holds for ``job_id``."""
    if backend == "postgres":
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute(f"SELECT count(*) FROM {prefix}history WHERE id = %s",
                               (job_id,)).fetchone()
            assert row is not None
            return int(row[0])
    if backend == "mysql":
        import pymysql

        from leaseq._core.settings import Settings
        from leaseq.backends.mysql.driver import connect_args

        conn = pymysql.connect(**connect_args(url, Settings()))
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {prefix}history WHERE id = %s", (job_id,))
                return int(cur.fetchone()[0])
        finally:
            conn.close()
    return -1  # Redis keeps one hash per job; the stats count completions instead


def state_of(direct: leaseq.Queue, job_id: int) -> Callable[[], str]:
    return lambda: str(direct.get(job_id).state)


def assert_dropped(proxy: Proxy, rule: Rule, times: int, seen: list[str],
                   expect: str) -> None:
    """The rule matched and the proxy swallowed that many replies, each after the
    server had committed (``seen`` is what the direct client read meanwhile)."""
    assert rule.matched == times, f"the pattern never matched ({proxy.stats})"
    assert proxy.stats.replies_dropped == times
    assert proxy.stats.cuts == times
    assert seen == [expect] * times, seen


def assert_completed_once(backend: str, url: str, prefix: str, direct: leaseq.Queue,
                          job_id: int) -> None:
    info = direct.get(job_id)
    assert (info.state, info.attempts, info.result) == ("completed", 1, {"n": job_id})
    assert direct.stats()[QUEUE].completed == 1
    if backend != "redis":
        assert history_rows(backend, url, prefix, job_id) == 1


@pytest.fixture(params=["leaseq", "caller"])
def retries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Who retries the lost ack: leaseq itself (a repeatable operation, on a fresh
    connection), or, with leaseq's reconnect budget at 0, the caller."""
    if request.param == "caller":
        monkeypatch.setattr(retry_policy, "RECONNECTS", 0)
    return str(request.param)


def test_s6_a_lost_ack_reply_is_retried_as_success(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy, retries: str
) -> None:
    client = leaseq.connect(proxy.url_for(url), table_prefix=prefix, reclaim_interval=None)
    try:
        job_id = direct.enqueue(QUEUE, {"n": 1}).id
        [job] = client.dequeue(QUEUE)
        seen: list[str] = []
        rule = proxy.drop_reply(**ack_commit(backend, prefix),
                                then=lambda: seen.append(state_of(direct, job_id)()))
        if retries == "leaseq":
            client.ack(job, {"n": job_id})  # no error: leaseq repeated it, a success
        else:
            with pytest.raises(BackendUnavailable):
                client.ack(job, {"n": job_id})
            client.ack(job, {"n": job_id})  # the caller's retry: a success too
        assert_dropped(proxy, rule, 1, seen, "completed")
        client.ack(job, {"n": job_id})  # and any later repeat by the same lease
        assert_completed_once(backend, url, prefix, direct, job_id)
    finally:
        client.close()


def test_s6_a_lost_ack_reply_is_retried_as_success_async(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    job_id = direct.enqueue(QUEUE, {"n": 1}).id
    seen: list[str] = []

    async def scenario() -> None:
        client = leaseq.connect_async(proxy.url_for(url), table_prefix=prefix,
                                      reclaim_interval=None)
        try:
            [job] = await client.dequeue(QUEUE)
            proxy.drop_reply(**ack_commit(backend, prefix),
                             then=lambda: seen.append(state_of(direct, job_id)()))
            await client.ack(job, {"n": job_id})
            await client.ack(job, {"n": job_id})
        finally:
            await client.close()

    asyncio.run(scenario())
    assert_dropped(proxy, proxy.rules[0], 1, seen, "completed")
    assert_completed_once(backend, url, prefix, direct, job_id)


def step_commit(backend: str, prefix: str) -> dict[str, bytes]:
    """``drop_reply`` arguments that match what commits the ack of a chain's step (the
    completion and the next step's enqueue, one transaction or one script)."""
    if backend == "postgres":
        return {"after": fragment(PostgresDialect(prefix).q, "complete_held"),
                "match": b"COMMIT"}
    if backend == "mysql":
        return {"after": fragment(MysqlDialect(prefix).q, "archive"), "match": b"COMMIT"}
    return {"match": SCRIPTS["complete_step"].sha.encode()}


def test_s6_a_lost_ack_of_a_chain_step_enqueues_the_next_step_once(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=None)

    @app.task(queue=QUEUE, name="add")
    def add(x: int, y: int = 1) -> int:
        return x + y

    client = leaseq.connect(proxy.url_for(url), table_prefix=prefix, reclaim_interval=None)
    try:
        flow = leaseq.chain(add.s(1), add.s(), add.s()).enqueue()
        [job] = client.dequeue(QUEUE)
        seen: list[str] = []
        rule = proxy.drop_reply(**step_commit(backend, prefix),
                                then=lambda: seen.append(state_of(direct, job.id)()))
        client.ack(job, 2)  # leaseq repeats it: a success, and no second follow-up
        client.ack(job, 2)
        assert_dropped(proxy, rule, 1, seen, "completed")
        steps = direct.jobs(kind="add", limit=100)
        assert [(s.payload, str(s.state)) for s in steps] == [
            ({"x": 1}, "completed"), ({"x": 2}, "available")]
        assert flow.state().remaining == 2
    finally:
        client.close()
        app.close()


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_s6_a_lost_enqueue_reply_retried_with_its_unique_key_returns_the_same_id(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy, many: bool
) -> None:
    client = leaseq.connect(proxy.url_for(url), table_prefix=prefix, reclaim_interval=None)
    keys = [f"s6-{secrets.token_hex(6)}" for _ in range(3 if many else 1)]
    live: list[list[int]] = []

    def stored() -> None:
        live.append(sorted(j.id for j in direct.peek(QUEUE, limit=100)))

    def enqueue() -> list[leaseq.EnqueueResult]:
        if many:
            return client.enqueue_many([{"queue": QUEUE, "payload": {"k": k}, "unique_key": k}
                                        for k in keys])
        return [client.enqueue(QUEUE, {"k": keys[0]}, unique_key=keys[0])]

    try:
        rule = proxy.drop_reply(**enqueue_commit(backend, min(keys), keyed=True), then=stored)
        with pytest.raises(OutcomeUnknown, match="outcome is unknown") as lost:
            enqueue()  # leaseq does not repeat an enqueue by itself
        assert lost.value.operation == ("enqueue_many" if many else "enqueue")
        assert isinstance(lost.value, BackendUnavailable)
        assert rule.matched == 1, f"the pattern never matched ({proxy.stats})"
        assert proxy.stats.replies_dropped == 1
        assert len(live) == 1 and len(live[0]) == len(keys), live  # it did commit
        again = enqueue()
        assert sorted(r.id for r in again) == live[0]
        assert [r.created for r in again] == [False] * len(keys)
        assert sorted(j.id for j in direct.peek(QUEUE, limit=100)) == live[0]
        assert direct.stats()[QUEUE].available == len(keys)
    finally:
        client.close()


def test_s6_unique_for_keeps_the_repeat_safe_after_the_job_already_ran(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    """A unique key holds while its job is live; a worker may finish the job before the
    caller repeats the enqueue, and then ``unique_for`` is what still finds it."""
    client = leaseq.connect(proxy.url_for(url), table_prefix=prefix, reclaim_interval=None)
    key = f"s6-{secrets.token_hex(6)}"
    try:
        rule = proxy.drop_reply(**enqueue_commit(backend, key, keyed=True))
        with pytest.raises(BackendUnavailable, match="outcome is unknown"):
            client.enqueue(QUEUE, {"k": key}, unique_key=key, unique_for=60)
        assert rule.matched == 1, f"the pattern never matched ({proxy.stats})"
        [job] = direct.dequeue(QUEUE)  # a worker ran it meanwhile
        direct.ack(job)
        again = client.enqueue(QUEUE, {"k": key}, unique_key=key, unique_for=60)
        assert (again.id, again.created) == (job.id, False)
        assert direct.stats()[QUEUE].available == 0
    finally:
        client.close()


def test_s6_a_lost_enqueue_reply_retried_with_its_unique_key_returns_the_same_id_async(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    key = f"s6-{secrets.token_hex(6)}"
    live: list[list[int]] = []

    async def scenario() -> leaseq.EnqueueResult:
        client = leaseq.connect_async(proxy.url_for(url), table_prefix=prefix,
                                      reclaim_interval=None)
        try:
            await client.stats()  # connected (and, on Redis, checked) before the fault
            proxy.drop_reply(**enqueue_commit(backend, key, keyed=True),
                             then=lambda: live.append([j.id for j in direct.peek(QUEUE)]))
            with pytest.raises(OutcomeUnknown, match="outcome is unknown") as lost:
                await client.enqueue(QUEUE, {"k": key}, unique_key=key)
            assert lost.value.operation == "enqueue"
            return await client.enqueue(QUEUE, {"k": key}, unique_key=key)
        finally:
            await client.close()

    again = asyncio.run(scenario())
    assert proxy.stats.replies_dropped == 1 and len(live) == 1 and len(live[0]) == 1, live
    assert (again.id, again.created) == (live[0][0], False)
    assert [j.id for j in direct.peek(QUEUE)] == live[0]


def test_s6_a_lost_plain_enqueue_reply_leaves_the_job_so_a_blind_retry_duplicates(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    """Why the docs say: retry an enqueue only with a unique key."""
    client = leaseq.connect(proxy.url_for(url), table_prefix=prefix, reclaim_interval=None)
    marker = f"s6-{secrets.token_hex(6)}"
    try:
        rule = proxy.drop_reply(**enqueue_commit(backend, marker, keyed=False))
        with pytest.raises(BackendUnavailable, match="outcome is unknown"):
            client.enqueue(QUEUE, {"m": marker})
        assert rule.matched == 1, f"the pattern never matched ({proxy.stats})"
        assert direct.stats()[QUEUE].available == 1  # committed, though the caller got an error
    finally:
        client.close()


def holder_commit(backend: str, verb: str, marker: str) -> dict[str, bytes]:
    """``drop_reply`` arguments that match what commits a ``verb`` (nack, nack_many,
    release, bury) whose error or reason is ``marker`` (bound with the statement that
    ends the lease, then COMMIT; one script on Redis)."""
    if backend == "redis":
        script = {"nack": "fail", "nack_many": "fail_many"}.get(verb, verb)
        return {"match": SCRIPTS[script].sha.encode()}
    return {"after": marker.encode(), "match": b"COMMIT"}


# Per verb: the call with the marker as its error or reason, what it returns, the job's
# state once it committed, and the job's (state, attempts, releases, buries) at the end:
# the call applied once.
HOLDER_CALLS: dict[str, tuple[Callable[[leaseq.Queue, leaseq.Job, str], object], object,
                              str, tuple[str, int, int, int]]] = {
    "nack": (lambda q, job, m: q.nack(job, m, delay=60), "scheduled", "scheduled",
             ("scheduled", 1, 0, 0)),
    "nack_many": (lambda q, job, m: q.nack_many([(job, m)]), [True], "scheduled",
                  ("scheduled", 1, 0, 0)),
    # Released now, and taken by a later holder before the caller repeats.
    "release": (lambda q, job, m: q.release(job, error=m), "available", "available",
                ("running", 1, 1, 0)),
    "bury": (lambda q, job, m: q.bury(job, reason=m, priority=3), None, "dead",
             ("dead", 1, 0, 1)),
}


def test_s6_a_lost_holder_reply_repeated_by_the_caller_returns_the_first_result(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    """leaseq does not repeat these itself (``OutcomeUnknown``); the caller's repeat with
    the same job finds the lease it ended and returns that call's result (design §62).
    Every verb in turn on one set of tables (a fixture's tables cost more than a case)."""
    client = leaseq.connect(proxy.url_for(url), table_prefix=prefix, reclaim_interval=None)
    try:
        for n, (verb, (call, first, committed, once)) in enumerate(HOLDER_CALLS.items()):
            marker = f"s6-{secrets.token_hex(6)}"
            # A queue per verb: an earlier verb's job, due again after its backoff on a
            # slow machine, must not be the one dequeued here.
            queue = f"{QUEUE}-{verb}"
            job_id = direct.enqueue(queue, {"n": n}, max_attempts=3).id
            [job] = client.dequeue(queue)
            assert job.id == job_id, verb
            seen: list[str] = []
            # The job's state read by the direct client once the server has committed.
            read = state_of(direct, job_id)
            rule = proxy.drop_reply(**holder_commit(backend, verb, marker),
                                    then=lambda seen=seen, read=read: seen.append(read()))
            with pytest.raises(OutcomeUnknown, match="outcome is unknown") as lost:
                call(client, job, marker)
            assert lost.value.operation == verb
            assert (verb, rule.matched, seen) == (verb, 1, [committed])
            later = direct.dequeue(queue, worker_id="later") if verb == "release" else []
            assert call(client, job, "the repeat's own error") == first, verb
            assert call(client, job, "and again") == first, verb
            info = direct.get(job_id)
            assert (verb, info.state, info.attempts, info.releases, info.buries) == (
                verb, *once)
            assert info.error == marker, verb  # the first call's, not a repeat's
            for held in later:
                direct.ack(held)  # the later holder was not disturbed
        assert (proxy.stats.replies_dropped, proxy.stats.cuts) == (4, 4)
    finally:
        client.close()


def test_s6_a_lost_nack_reply_repeated_by_the_caller_returns_the_first_result_async(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy
) -> None:
    job_id = direct.enqueue(QUEUE, {"n": 1}).id
    marker = f"s6-{secrets.token_hex(6)}"

    async def scenario() -> list[str]:
        client = leaseq.connect_async(proxy.url_for(url), table_prefix=prefix,
                                      reclaim_interval=None)
        try:
            [job] = await client.dequeue(QUEUE)
            proxy.drop_reply(**holder_commit(backend, "nack", marker))
            with pytest.raises(OutcomeUnknown) as lost:
                await client.nack(job, marker, delay=0)
            assert lost.value.operation == "nack"
            return [await client.nack(job, "again", delay=60) for _ in range(2)]
        finally:
            await client.close()

    assert asyncio.run(scenario()) == ["available", "available"]
    assert proxy.stats.replies_dropped == 1
    info = direct.get(job_id)
    assert (info.state, info.attempts, info.error) == ("available", 1, marker)


def ack_many_request(backend: str, prefix: str) -> dict[str, bytes]:
    """``cut_on`` arguments that match the request committing an ``ack_many``."""
    if backend == "postgres":
        return {"match": fragment(PostgresDialect(prefix).q, "complete_many")}
    if backend == "mysql":
        return {"after": fragment(MysqlDialect(prefix).q, "archive_held_many"),
                "match": b"COMMIT"}
    return {"match": SCRIPTS["complete_many"].sha.encode()}


def test_s6_the_worker_stops_trying_a_failed_ack_when_its_lease_ends(
    backend: str, url: str, prefix: str, direct: leaseq.Queue, proxy: Proxy,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's completer tries a failed ack again only while the lease lasts (here
    0.5 s): then the job learns of the failure, and its lease will expire."""
    monkeypatch.setattr(retry_policy, "RECONNECTS", 0)
    job_id = direct.enqueue(QUEUE, {"n": 1}).id
    outcomes: list[bool | BaseException] = []

    async def scenario() -> float:
        aq = leaseq.connect_async(proxy.url_for(url), table_prefix=prefix,
                                  reclaim_interval=None)
        try:
            [job] = await aq.dequeue(QUEUE)
            ends = time.monotonic() + 0.5
            completer = Completer(aq, lambda _, outcome: outcomes.append(outcome),
                                  lease_ends=lambda _: ends)
            proxy.cut_on(**ack_many_request(backend, prefix), times=100)
            began = time.monotonic()
            completer.submit(job, None)
            await completer.flush()
            return time.monotonic() - began
        finally:
            await aq.close()

    took = asyncio.run(scenario())
    # Tries at 0, 0.1 and 0.3 s; the next pause (0.4 s) would end past the lease. A busy
    # machine fits fewer tries into the 0.5 s lease, never more.
    tries = proxy.rules[0].matched
    assert 1 <= tries <= 3, proxy.stats
    assert proxy.stats.requests_dropped == tries
    assert len(outcomes) == 1 and isinstance(outcomes[0], BackendUnavailable), outcomes
    assert took < 3, took
    assert state_of(direct, job_id)() == "running"  # nothing committed: the lease will run out


# A worker process with leaseq's reconnect budget at 0: the first failed write reaches the
# worker itself (what an outage longer than the budget, about 3 s, looks like).
NO_RECONNECTS = ("import runpy; import leaseq.backends._retry as r; r.RECONNECTS = 0; "
                 "runpy.run_module('leaseq.cli', run_name='__main__')")


class ProxiedWorker:
    """A `leaseq worker tests._worker_app:app` process on PostgreSQL through a proxy,
    with a direct client, the handlers' event log and the worker's output."""

    def __init__(self, tmp: Path) -> None:
        require("postgres")
        self.tmp = tmp
        self.prefix = new_prefix()
        self.log = tmp / "events.jsonl"
        self.direct = leaseq.connect(POSTGRES_URL, table_prefix=self.prefix,
                                     reclaim_interval=None)
        self.direct.migrate()
        self.proxy = Proxy.for_url(POSTGRES_URL)
        self.proc: subprocess.Popen[str] | None = None
        self.ack = fragment(PostgresDialect(self.prefix).q, "complete_many")

    def start(self, reconnects: bool = True) -> None:
        env = {**os.environ, "LEASEQ_TEST_URL": self.proxy.url_for(POSTGRES_URL),
               "LEASEQ_TEST_PREFIX": self.prefix, "LEASEQ_TEST_LOG": str(self.log),
               "LEASEQ_TEST_LEASE": "30", "PYTHONPATH": str(ROOT)}
        head = [sys.executable, "-m", "leaseq.cli"] if reconnects else [
            sys.executable, "-c", NO_RECONNECTS]
        with open(self.tmp / "worker.log", "w") as out:
            self.proc = subprocess.Popen(
                [*head, "worker", "tests._worker_app:app", "--queues", "work",
                 "--poll-interval", "0.1", "--log-level", "INFO"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)

    def enqueue(self, n: int) -> int:
        return self.direct.enqueue("work", {"seconds": 0, "n": n}, kind="sleepy").id

    def completed(self, job_id: int) -> None:
        wait_for(lambda: state_of(self.direct, job_id)() == "completed", timeout=20,
                 message=f"job {job_id} completed")

    def starts(self) -> list[int]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [row["job"] for row in rows if row["event"] == "start"]

    def output(self) -> str:
        return (self.tmp / "worker.log").read_text()

    def close(self) -> None:
        try:
            if self.proc is not None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            self.proxy.close()
            self.direct.close()
            drop_tables("postgres", self.prefix)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[ProxiedWorker]:
    w = ProxiedWorker(tmp_path)
    try:
        yield w
    finally:
        w.close()


def test_s6_a_worker_whose_ack_reply_is_lost_completes_the_job_once(
    worker: ProxiedWorker
) -> None:
    """The reply to the worker's batched ack (``complete_many``) is lost after the
    commit; leaseq repeats the ack, which succeeds: the job ran and completed once."""
    seen: list[str] = []
    first = worker.enqueue(1)
    rule = worker.proxy.drop_reply(worker.ack,
                                   then=lambda: seen.append(state_of(worker.direct, first)()))
    worker.start()
    worker.completed(first)
    # A second job through the same worker: once it is done, a rerun of the first would
    # have had its chance to start.
    second = worker.enqueue(2)
    worker.completed(second)
    assert_dropped(worker.proxy, rule, 1, seen, "completed")
    assert worker.starts() == [first, second]
    info = worker.direct.get(first)
    assert (info.attempts, info.result) == (1, 1)
    assert history_rows("postgres", POSTGRES_URL, worker.prefix, first) == 1
    output = worker.output()
    assert "lease lost" not in output and "outcome not written" not in output, output


def test_s6_a_worker_tries_a_failed_ack_again_while_it_holds_the_lease(
    worker: ProxiedWorker
) -> None:
    """Three tries of the worker's ack in a row never reach the server, and the client
    gives up on each at once (no reconnects): the worker itself tries again while the
    lease lasts, so the job completes on the fourth and is not run a second time when
    the lease would have expired."""
    job = worker.enqueue(1)
    rule = worker.proxy.cut_on(worker.ack, times=3)
    worker.start(reconnects=False)
    worker.completed(job)
    assert rule.matched == 3, f"the pattern matched {rule.matched} times ({worker.proxy.stats})"
    assert worker.proxy.stats.requests_dropped == 3
    info = worker.direct.get(job)
    assert (info.attempts, info.result) == (1, 1)
    assert worker.starts() == [job]
    output = worker.output()
    assert output.count("trying again") == 3, output
    assert "outcome not written" not in output, output


def test_s6_a_worker_whose_nack_reply_is_lost_repeats_it_and_fails_the_job_once(
    worker: ProxiedWorker
) -> None:
    """The reply to the worker's nack is lost after the commit; the worker repeats the
    nack while its lease lasts, and the repeat returns what the first one did (design
    §62): the job is failed once, runs its second attempt once, and completes."""
    seen: list[str] = []
    job = worker.direct.enqueue("work", {"n": 7}, kind="fails_once").id
    rule = worker.proxy.drop_reply(**holder_commit("postgres", "nack", "first-attempt-fails-7"),
                                   then=lambda: seen.append(state_of(worker.direct, job)()))
    worker.start()
    worker.completed(job)
    assert rule.matched == 1 and worker.proxy.stats.replies_dropped == 1, worker.proxy.stats
    assert seen and seen[0] in ("scheduled", "available"), seen  # the nack had committed
    info = worker.direct.get(job)
    assert (info.attempts, info.result) == (2, 7)
    assert worker.starts() == [job, job]  # one run per attempt
    output = worker.output()
    assert output.count(f"nack of job {job} failed") == 1, output
    assert "lease lost" not in output and "outcome not written" not in output, output

