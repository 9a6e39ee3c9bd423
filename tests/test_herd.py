"""Thundering herd (S19, issue 23): a wake-up of 16 idle worker processes costs claims in
proportion to the jobs, not to the workers; a turn taken from its holder passes on; every
job runs once.

Each backend runs on a private server that counts statements (``benchmarks/herd.py``):
a redis-server logging every command, a PostgreSQL cluster with pg_stat_statements, a
MariaDB with performance_schema. The workers poll every 60 s, so an idle poll falls in a
burst's short window only by chance (about one in the whole test); the bound's constant
leaves room for it. No timing is asserted: each step waits for a condition.

MariaDB has no push wake-up: the turn's holder alone polls quickly (``WATCH_TICK``), so
there a claim is the locking read that follows a probe which found a job, and the probes
of the whole fleet over each burst's window must stay within one quick poller's share.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmarks import herd

import leaseq
from leaseq.worker.worker import WATCH_TICK
from tests.helpers import wait_for

WORKERS = 16
SLACK = 5
"""Claims allowed beyond the jobs: the claim that finds the queue empty after a batch, the
next holder's claim on taking the turn, a worker's claim as its slots free, a stray poll."""


@pytest.fixture(params=["redis", "postgres", "mysql"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    start = {"redis": herd.private_redis, "postgres": herd.private_postgres,
             "mysql": herd.private_mariadb}[request.param]
    with start() as url:
        yield url


def quick_polls_allowed(seconds: float) -> float:
    """MariaDB: the probes one quick poller makes in ``seconds`` (each pause is
    ``WATCH_TICK`` less 20 % at the least), with a quarter more for the turn's hand-on; 16
    workers polling quickly would make about 16 times as many."""
    return 1.25 * seconds / (0.8 * WATCH_TICK)


def test_wake_up_costs_claims_per_job_not_per_worker(server: str, tmp_path: Path) -> None:
    url = server
    mysql = url.startswith("mysql")
    counts = (herd.RedisCounts(url) if url.startswith("redis") else
              herd.MyCounts(url) if mysql else herd.PgCounts(url))
    q = leaseq.Queue(url, leaseq.Settings(table_prefix=herd.PREFIX))
    q.migrate()
    log = tmp_path / "runs.log"
    enqueued: list[int] = []
    try:
        with herd.workers(url, WORKERS, poll_interval=60.0, log=str(log), fork=True):
            for k in (1, 10):
                wait_for(lambda: herd.taking_turns(url, WORKERS), timeout=90,
                         message=f"{WORKERS} idle workers taking turns")
                done = herd.completed(q)
                counts.reset()
                began = time.monotonic()
                enqueued += [r.id for r in q.enqueue_many(
                    [{"kind": "noop", "queue": herd.QUEUE, "payload": {"n": i}}
                     for i in range(k)])]
                wait_for(lambda: herd.completed(q) >= done + k,  # noqa: B023 (called here)
                         timeout=30,
                         message=f"{k} jobs completed")
                # Quiet again: the holder and the waiters are back in place, so the
                # claims that follow a batch have run.
                wait_for(lambda: herd.taking_turns(url, WORKERS), timeout=30,
                         message="workers idle again")
                found = counts.read()
                window = time.monotonic() - began
                claims = found["locking" if mysql else "claims"]
                assert claims <= k + SLACK, f"{k} jobs cost {claims} claims"
                if mysql:
                    allowed = quick_polls_allowed(window) + k + WORKERS
                    assert found["claims"] <= allowed, (
                        f"{found['claims']} probes in {window:.2f} s: more than one worker "
                        f"polls quickly (one may make about {allowed:.0f})")
            # The holder's turn vanishes (PostgreSQL, MariaDB: its session is killed, which
            # releases the lock; Redis: its key is deleted, as if it had expired): another
            # worker takes it, and a job enqueued then is picked up by a wake-up (MariaDB:
            # the new holder's quick poll), long before any poll (every 60 s).
            _take_the_turn_away(url)
            wait_for(lambda: herd.taking_turns(url, WORKERS), timeout=30,
                     message="turns taken again")
            done = herd.completed(q)
            enqueued.append(q.enqueue(herd.QUEUE, {"n": 0}, kind="noop").id)
            wait_for(lambda: herd.completed(q) > done, timeout=30,
                     message="the job picked up by a wake-up")
    finally:
        q.close()
        counts.close()
    runs = collections.Counter(int(line) for line in log.read_text().split())
    assert sorted(runs) == sorted(enqueued)
    assert set(runs.values()) == {1}, "a job ran more than once"


def _take_the_turn_away(url: str) -> None:
    from leaseq.backends.postgres import listen as pg_turn

    if url.startswith("redis"):
        import redis

        from leaseq.backends.redis.keys import Keys

        owner, _ = Keys(herd.PREFIX).turn([herd.QUEUE])
        with redis.Redis.from_url(url) as client:
            assert client.delete(owner) == 1
        return
    if url.startswith("mysql"):
        with herd.my_connect(url) as my:
            cursor = my.cursor()
            cursor.execute("SELECT IS_USED_LOCK(%s)", (herd.my_lock(url),))
            holder = cursor.fetchone()
            assert holder is not None and holder[0] is not None
            cursor.execute(f"KILL {int(holder[0])}")
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = %s AND granted", (pg_turn.LOCK_CLASS,)).fetchall()
    assert killed == [(True,)]
