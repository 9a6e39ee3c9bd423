"""A stateful model test: the same random operations on the memory backend and on a real
one (SQLite, PostgreSQL, MariaDB, Redis), compared after every step.

Rules: enqueue (priorities, unique keys), dequeue batches, heartbeat, ack, nack, release,
bury, a holder "crash" (its lease back-dated so it is expired, then reclaimed), kick. Both
backends must return the same jobs in the same order, refuse the same stale calls and
agree on every queue's counts. Lease expiry is simulated by back-dating the lease in the
database (never by sleeping), so the test is deterministic.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import leaseq
from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL, REDIS_URL, drop_tables, new_prefix

EXPIRE = {
    "sqlite": "UPDATE {p}jobs SET lease_until = 0 WHERE id = ?",
    "postgres": "UPDATE {p}jobs SET lease_until = now() - interval '1 hour' WHERE id = %s",
    "mysql": "UPDATE {p}jobs SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE id = %s",
}


class Raw:
    """Direct SQL (or Redis commands) for the test's own back-dating, outside leaseq."""

    def __init__(self, backend: str, url: str, prefix: str = "") -> None:
        self.backend, self.prefix = backend, prefix
        if backend == "redis":
            import redis

            self.conn = redis.Redis.from_url(url)
        elif backend == "sqlite":
            import sqlite3

            self.conn: Any = sqlite3.connect(url.split("sqlite:///", 1)[1], isolation_level=None)
        elif backend == "postgres":
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)
        else:
            import pymysql

            self.conn = pymysql.connect(host="127.0.0.1", user="root", database="test",
                                        autocommit=True)

    def expire(self, job_id: int) -> None:
        if self.backend == "redis":
            from leaseq.backends.redis.keys import Keys

            keys = Keys(self.prefix)
            queue = self.conn.hget(keys.index, str(job_id)).decode()
            self.conn.hset(keys.job(queue, job_id), "lease_until", 1)
            self.conn.zadd(keys.queue(queue)[4], {str(job_id): 1})  # the running set
        else:
            self.run(EXPIRE[self.backend].format(p=self.prefix), job_id)

    def clear(self) -> None:
        if self.backend == "redis":
            from leaseq.backends.redis.keys import Keys

            for key in self.conn.scan_iter(match=Keys(self.prefix).pattern(), count=1000):
                self.conn.delete(key)
        else:
            for table in ("history", "jobs", "queues"):
                self.run(f"DELETE FROM {self.prefix}{table}")

    def run(self, sql: str, *params: object) -> None:
        cur = self.conn.cursor()
        cur.execute(sql, params)
        cur.close()

    def close(self) -> None:
        self.conn.close()


def build(backend: str, tmp: str) -> type[RuleBasedStateMachine]:
    url = {"sqlite": f"sqlite:///{tmp}/model.db", "postgres": POSTGRES_URL,
           "mysql": MYSQL_URL, "redis": REDIS_URL}[backend]
    prefix = new_prefix()
    raw = Raw(backend, url, prefix)
    real_q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    real_q.migrate()

    class Model(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            raw.clear()
            self.mem = leaseq.connect(f"memory://{secrets.token_hex(6)}", reclaim_interval=None)
            self.real = real_q
            self.pairs: list[tuple[int, int]] = []  # (memory id, real id), in enqueue order
            self.held: list[tuple[leaseq.Job, leaseq.Job]] = []
            self.stale: list[tuple[leaseq.Job, leaseq.Job]] = []

        def index(self, real_id: int) -> int:
            return next(i for i, (_, r) in enumerate(self.pairs) if r == real_id)

        def teardown(self) -> None:
            self.mem.close()

        def step(self) -> None:
            """SQLite's clock has millisecond resolution: keep consecutive operations in
            distinct milliseconds so that "then available_at" means the same everywhere."""
            if backend == "sqlite":
                time.sleep(0.002)

        def both(self, call: Any) -> tuple[Any, Any]:
            """Call on each backend; outcomes are values or exception types."""
            out = []
            for which in (0, 1):
                try:
                    out.append(call(which))
                except leaseq.LeaseqError as exc:
                    out.append(type(exc))
            return out[0], out[1]

        @initialize()
        def start(self) -> None:
            pass

        @rule(queue=st.sampled_from(["a", "b"]), priority=st.integers(0, 2),
              key=st.sampled_from([None, None, "k1", "k2"]))
        def enqueue(self, queue: str, priority: int, key: str | None) -> None:
            self.step()
            m = self.mem.enqueue(queue, {"p": priority}, priority=priority, unique_key=key,
                                 max_attempts=2)
            r = self.real.enqueue(queue, {"p": priority}, priority=priority, unique_key=key,
                                  max_attempts=2)
            assert m.created == r.created
            if m.created:
                self.pairs.append((m.id, r.id))
            else:
                assert self.index(r.id) == [mi for mi, _ in self.pairs].index(m.id)

        @rule(queues=st.sampled_from([["a"], ["b"], ["a", "b"]]), limit=st.integers(1, 3))
        def dequeue(self, queues: list[str], limit: int) -> None:
            mj = self.mem.dequeue(queues, limit=limit, lease=600, worker_id="w")
            rj = self.real.dequeue(queues, limit=limit, lease=600, worker_id="w")
            assert [[mi for mi, _ in self.pairs].index(j.id) for j in mj] == [
                self.index(j.id) for j in rj]
            assert [j.attempts for j in mj] == [j.attempts for j in rj]
            self.held += list(zip(mj, rj, strict=True))

        @precondition(lambda self: self.held or self.stale)
        @rule(data=st.data(), verb=st.sampled_from(["ack", "nack", "release", "bury",
                                                     "heartbeat"]))
        def holder_call(self, data: st.DataObject, verb: str) -> None:
            self.step()
            pool = self.held + self.stale
            pair = data.draw(st.sampled_from(pool))
            calls = {
                "ack": lambda q, j: q.ack(j),
                "nack": lambda q, j: q.nack(j, "boom", delay=0),
                "release": lambda q, j: q.release(j),
                "bury": lambda q, j: q.bury(j, reason="x"),
                "heartbeat": lambda q, j: q.heartbeat(j, extend=600) and "renewed",
            }
            queues = (self.mem, self.real)
            m, r = self.both(lambda w: calls[verb](queues[w], pair[w]))
            assert m == r, (verb, m, r)
            if verb != "heartbeat" and pair in self.held:
                self.held.remove(pair)
                self.stale.append(pair)

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def crash_and_reclaim(self, data: st.DataObject) -> None:
            self.step()
            pair = data.draw(st.sampled_from(self.held))
            self.held.remove(pair)
            self.stale.append(pair)
            mem_row = self.mem._backend.live[pair[0].id]  # type: ignore[attr-defined]
            mem_row.lease_until = 0.0
            raw.expire(pair[1].id)
            assert self.mem.reclaim() == self.real.reclaim()

        @rule(queue=st.sampled_from(["a", "b"]))
        def kick(self, queue: str) -> None:
            self.step()
            assert self.mem.kick(queue) == self.real.kick(queue)

        @invariant()
        def same_counts(self) -> None:
            # QueueStats equality leaves out oldest_available_age: it is read at a
            # different instant from each backend, so only whether one is due must agree.
            ms, rs = self.mem.stats(), self.real.stats()
            assert ms == rs
            assert {k: v.oldest_available_age is None for k, v in ms.items()} == {
                k: v.oldest_available_age is None for k, v in rs.items()}

    Model.raw, Model.real_q, Model.prefix = raw, real_q, prefix  # type: ignore[attr-defined]
    return Model


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql", "redis"])
def test_real_backends_behave_like_the_memory_model(backend: str, tmp_path: Any) -> None:
    require(backend)
    model = build(backend, str(tmp_path))
    try:
        runner = model.TestCase()
        runner.settings = settings(
            max_examples=25 if backend != "mysql" else 12, stateful_step_count=25,
            deadline=None, suppress_health_check=list(HealthCheck),
        )
        runner.runTest()
    finally:
        model.real_q.close()  # type: ignore[attr-defined]
        model.raw.close()  # type: ignore[attr-defined]
        drop_tables(backend, model.prefix)  # type: ignore[attr-defined]
