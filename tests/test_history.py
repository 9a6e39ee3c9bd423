"""The history checker (tests/chaos/history.py) on real backends.

* Anomalies injected for real: a stale write that took effect (its lease token put back
  behind leaseq's back, then an ack under it), a job handed out again with no ended lease
  (a forced duplicate delivery), a job deleted after it was enqueued (lost) and a job no
  recorded client enqueued (unexpected). The checker must name each, and nothing else.
* S6 under the history: enqueue and holder replies lost through the fault proxy
  (tests/netproxy.py). The enqueues whose outcome was unknown and that committed are
  *recovered*; a release repeated after a later holder took the job is not stale.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from tests.chaos.history import Recorder, check, final_state, load, publish
from tests.conftest import require
from tests.helpers import REDIS_PLAIN_URL, backend_url, drop_tables
from tests.netproxy import Proxy
from tests.test_outcome_unknown import ack_commit, enqueue_commit, holder_commit

QUEUE = "h"


class Client:
    """A client that holds leases itself and records what it does and sees."""

    def __init__(self, q: leaseq.Queue, recorder: Recorder) -> None:
        self.q, self.recorder = q, recorder

    def enqueue(self, tag: str) -> int | None:
        try:
            with self.recorder.op("enqueue", key=tag) as call:
                call.job = self.q.enqueue(QUEUE, {"tag": tag}).id
        except leaseq.OutcomeUnknown:
            return None
        return call.job

    def claim(self, worker: str = "w") -> leaseq.Job:
        with self.recorder.op("claim") as call:
            [job] = self.q.dequeue(QUEUE, worker_id=worker)
            call.key, call.job, call.token = job.payload["tag"], job.id, job.lease_token
        return job

    def ack(self, job: leaseq.Job) -> None:
        with self.recorder.op("ack", key=job.payload["tag"], job=job.id,
                              token=job.lease_token):
            self.q.ack(job, {"tag": job.payload["tag"], "token": job.lease_token})

    def release(self, job: leaseq.Job, error: str | None = None,
                priority: int | None = None) -> None:
        with self.recorder.op("release", key=job.payload["tag"], job=job.id,
                              token=job.lease_token):
            self.q.release(job, error=error, priority=priority)


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def url(backend: str, tmp_path: Path) -> str:
    return backend_url(backend, str(tmp_path))


@pytest.fixture
def direct(backend: str, url: str, prefix: str) -> Iterator[leaseq.Queue]:
    q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    q.migrate()
    try:
        yield q
    finally:
        q.close()
        drop_tables(backend, prefix)


def bypass(backend: str, url: str, prefix: str, job_id: int, action: str,
           token: int = 0) -> None:
    """Changes job ``job_id`` behind leaseq's back: ``rewind`` its lease token to
    ``token``, ``requeue`` it (running to available, no counter touched) or ``delete``
    it."""
    if backend == "redis":
        import redis

        from leaseq.backends.redis.keys import Keys

        parts = Keys(prefix).queue(QUEUE)
        key, jobs, delayed, running = parts[0] + str(job_id), parts[1], parts[3], parts[4]
        with redis.Redis.from_url(REDIS_PLAIN_URL) as r:
            if action == "rewind":
                r.hset(key, "lease_token", token)
            elif action == "requeue":  # due at once: the next claim promotes it
                r.hset(key, "state", "available")
                r.zrem(running, job_id)
                r.zadd(delayed, {str(job_id): int(r.hget(key, "available_at") or 0)})
            else:
                r.delete(key)
                r.zrem(running, job_id)
                r.zrem(jobs, job_id)
                r.hdel(Keys(prefix).index, str(job_id))
        return
    statement, params = {
        "rewind": (f"UPDATE {prefix}jobs SET lease_token = %s WHERE id = %s", (token, job_id)),
        "requeue": (f"UPDATE {prefix}jobs SET state = 'available', lease_until = NULL, "
                    f"worker_id = NULL WHERE id = %s", (job_id,)),
        "delete": (f"DELETE FROM {prefix}jobs WHERE id = %s", (job_id,)),
    }[action]
    if backend == "sqlite":
        conn = sqlite3.connect(url[len("sqlite:///"):], timeout=10)
        with conn:
            conn.execute(statement.replace("%s", "?"), params)
        conn.close()
    elif backend == "postgres":
        import psycopg

        with psycopg.connect(url) as pg:
            pg.execute(statement, params)
    else:
        import pymysql

        from leaseq._core.settings import Settings
        from leaseq.backends.mysql.driver import connect_args

        my = pymysql.connect(**connect_args(url, Settings()))
        try:
            with my.cursor() as cur:
                cur.execute(statement, params)
            my.commit()
        finally:
            my.close()


def test_injected_anomalies_are_found(backend: str, url: str, prefix: str,
                                      direct: leaseq.Queue, tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "history", "client")
    client = Client(direct, recorder)
    # One job at a time, so each claim takes the job meant.
    client.enqueue("fine")
    client.ack(client.claim())

    stale_id = client.enqueue("stale")
    assert stale_id is not None
    first = client.claim("a")
    client.release(first)
    second = client.claim("b")  # a newer lease: the first is superseded
    bypass(backend, url, prefix, stale_id, "rewind", first.lease_token)
    client.ack(first)  # fencing bypassed: the stale holder's ack takes effect
    with pytest.raises(leaseq.LeaseLost):
        client.ack(second)

    dup_id = client.enqueue("dup")
    assert dup_id is not None
    client.claim("a")
    bypass(backend, url, prefix, dup_id, "requeue")  # no expiry, no hand-back
    client.ack(client.claim("b"))

    lost_id = client.enqueue("lost")
    assert lost_id is not None
    client.claim("a")
    bypass(backend, url, prefix, lost_id, "delete")

    direct.enqueue(QUEUE, {"tag": "stranger"})  # by a client that recorded nothing
    client.ack(client.claim())

    found = check(load(tmp_path / "history"), final_state(direct, QUEUE))
    assert (found.lost, found.duplicated, found.stale, found.unexpected, found.recovered) == (
        ["lost"], ["dup"], [(stale_id, first.lease_token)], ["stranger"], []), found.line()
    assert found.refused == 1 and found.reruns == 1 and found.unseen == []


@pytest.fixture(params=["postgres", "mysql", "redis"])
def server(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


def test_s6_lost_replies_under_the_history(server: str, prefix: str, tmp_path: Path) -> None:
    """Two enqueue replies lost after their commits, an ack reply lost (leaseq repeats
    it) and a release reply lost, repeated by the caller after another holder took the
    job: the two enqueues are recovered, and nothing is lost, duplicated or stale."""
    url = backend_url(server, str(tmp_path))
    direct = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    direct.migrate()  # on Redis this also loads every script, so EVALSHA never misses
    recorder = Recorder(tmp_path / "history", "client")
    try:
        with Proxy.for_url(url) as proxy:
            q = leaseq.connect(proxy.url_for(url), table_prefix=prefix,
                               reclaim_interval=None)
            try:
                client = Client(q, recorder)
                tags = [f"s6-{secrets.token_hex(6)}" for _ in range(6)]
                for n, tag in enumerate(tags):
                    if n in (1, 4):
                        proxy.drop_reply(**enqueue_commit(server, tag, keyed=False))
                    client.enqueue(tag)
                proxy.drop_reply(**ack_commit(server, prefix))
                client.ack(client.claim())  # its reply lost: leaseq repeats it, ok
                held = client.claim()
                marker = f"s6-{secrets.token_hex(6)}"
                proxy.drop_reply(**holder_commit(server, "release", marker))
                with pytest.raises(leaseq.OutcomeUnknown):
                    client.release(held, error=marker, priority=9)  # it comes next
                later = Client(direct, recorder).claim("later")
                assert later.id == held.id  # the release had committed
                client.release(held, error="the repeat", priority=9)  # the first result
                Client(direct, recorder).ack(later)
                for _ in range(4):
                    client.ack(client.claim())
                assert proxy.stats.replies_dropped == 4
            finally:
                q.close()
        found = check(load(tmp_path / "history"), final_state(direct, QUEUE))
        publish(found, scenario="S6 outcome unknown (fault proxy)", backend=server,
                accepted=found.enqueued, faults={"replies dropped": 4})
        assert found.clean(), f"{found.line()} {found.detail()}"
        assert sorted(found.recovered) == sorted([tags[1], tags[4]]), found.line()
        assert (found.enqueued, found.unknown, found.reruns) == (4, 2, 1), found.line()
    finally:
        direct.close()
        drop_tables(server, prefix)
