"""Idle worker processes start a job that another process enqueued, or that comes due,
long before their next poll (issue 24, item 9).

Two `leaseq worker` processes poll every 60 s. This process enqueues once the idle workers
take turns (one holds its queue's turn), so the job can only start within the deadline by a
wake-up: PostgreSQL NOTIFY, Redis pub/sub, and on MySQL/MariaDB, which has no push, the turn
holder's quick polling (``Worker``'s ``WATCH_TICK``). Then the same for a delayed job, and on
MySQL/MariaDB once more after the holder's session is killed, which hands the turn to the
other worker. Deadlines are seconds, far from the goals (tens of milliseconds), which
``benchmarks/delays.py`` and the pickup benchmark measure.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from leaseq.backends.mysql import turn as mysql_turn
from leaseq.backends.postgres import listen as pg_turn
from tests._processes import WorkerFleet
from tests.conftest import require
from tests.helpers import wait_for

QUEUE = "work"
POLL = "60"
WITHIN = 8.0
"""Seconds a job may take to start: far below the 48 s a 60 s poll (±20 %) needs at least,
far above what a wake-up takes."""


@pytest.fixture(params=["mysql", "postgres", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerFleet]:
    require(request.param)
    scenario = WorkerFleet(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def turn_holder(fleet: WorkerFleet) -> object | None:
    """Who holds the queue's turn (a session, a worker id), None while nobody does."""
    if fleet.backend == "mysql":
        import pymysql

        parts = urlsplit(fleet.url)
        name = mysql_turn.lock_name(parts.path.lstrip("/"), fleet.prefix, [QUEUE])
        with pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                             user=parts.username, password=parts.password or "") as conn:
            cur = conn.cursor()
            cur.execute("SELECT IS_USED_LOCK(%s)", (name,))
            row = cur.fetchone()
        return None if row is None else row[0]
    if fleet.backend == "postgres":
        import psycopg

        with psycopg.connect(fleet.url, autocommit=True) as pg:
            found = pg.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                "AND objid::bigint = %s AND granted",
                (pg_turn.LOCK_CLASS, pg_turn.lock_key(fleet.prefix, [QUEUE]) % 2**32)).fetchone()
        return None if found is None else found[0]
    import redis

    from leaseq.backends.redis.keys import Keys

    owner, _ = Keys(fleet.prefix).turn([QUEUE])
    with redis.Redis.from_url(fleet.url) as client:
        held: object | None = client.get(owner)
        return held


def utc(at: datetime | None) -> datetime:
    """``at`` with its zone (MariaDB's DATETIME(6) values come back as naive UTC)."""
    assert at is not None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def started(fleet: WorkerFleet, job_id: int) -> bool:
    return any(e["event"] == "start" and e["job"] == job_id for e in fleet.events())


def test_idle_workers_start_jobs_from_another_process_before_their_poll(
        fleet: WorkerFleet) -> None:
    for _ in range(2):
        fleet.start("tests._worker_app:app", "--queues", QUEUE, "--poll-interval", POLL,
                    "--concurrency", "4", "--grace", "5")
    holder = wait_for(lambda: turn_holder(fleet), timeout=60, message="a turn holder")
    q = fleet.q

    now = q.enqueue(QUEUE, {"seconds": 0, "n": 1}, kind="asleep").id
    wait_for(lambda: started(fleet, now), timeout=WITHIN,
             message=f"the job enqueued by another process started\n{fleet.outputs()}")

    later = q.enqueue(QUEUE, {"seconds": 0, "n": 2}, kind="asleep", delay=1.0).id
    due = utc(q.get(later).available_at)  # read now: a finished job's record drops it
    wait_for(lambda: started(fleet, later), timeout=WITHIN + 1.0,
             message=f"the delayed job started once due\n{fleet.outputs()}")
    assert utc(q.get(later).started_at) >= due, "a delayed job started before it was due"

    if fleet.backend != "mysql":
        return
    # The holder's session dies (a killed connection, as after a network cut): the server
    # releases its named lock, the other worker gets the turn and polls quickly instead.
    import pymysql

    parts = urlsplit(fleet.url)
    with pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                         password=parts.password or "") as conn:
        conn.cursor().execute(f"KILL {int(str(holder))}")
    wait_for(lambda: turn_holder(fleet) not in (None, holder), timeout=30,
             message="another session took the turn")
    again = q.enqueue(QUEUE, {"seconds": 0, "n": 3}, kind="asleep").id
    wait_for(lambda: started(fleet, again), timeout=WITHIN,
             message=f"the job started after the turn moved\n{fleet.outputs()}")
    runs = [e["job"] for e in fleet.events() if e["event"] == "start"]
    assert sorted(runs) == sorted([now, later, again]), "a job ran twice or not at all"
