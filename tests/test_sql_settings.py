"""The SQL backends' enqueue limits, queue settings and reads (issue 11), beyond what the
conformance suite can see from outside: per-job leases through every insert path, exact
``unique_for`` keys, ``max_jobs`` and ``unique_for`` under racing producers, ``QueueFull``
inside a caller's transaction, the statements a plan runs, and the plans the database
picks for the new reads.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import leaseq
from leaseq.backends._sql.ops import SqlOps
from leaseq.backends._sql.plan import Plan, Result, Stmt
from leaseq.backends.base import NewJob
from leaseq.backends.sqlite.driver import SqliteDialect
from tests.conftest import require
from tests.helpers import SQL_BACKENDS, drop_tables, new_prefix
from tests.test_claim_plan import load, mysql_plans, nodes
from tests.test_transactions import open_connection


@pytest.fixture(params=SQL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's ``backend``: these tests are about the SQL backends."""
    name: str = request.param
    require(name)
    return name


def clients(url: str, prefix: str, n: int) -> list[leaseq.Queue]:
    return [leaseq.connect(url, table_prefix=prefix, reclaim_interval=None) for _ in range(n)]


def race(workers: list[Callable[[], None]]) -> None:
    """Run each callable in its own thread, all released at once; re-raise the first
    error."""
    start = threading.Barrier(len(workers))
    errors: list[BaseException] = []

    def run(work: Callable[[], None]) -> None:
        try:
            start.wait(10)
            work()
        except BaseException as exc:  # re-raised in the test's thread, below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


# -- per-job leases ------------------------------------------------------------------------

def test_every_insert_path_stores_the_jobs_own_lease(q: leaseq.Queue) -> None:
    # A batch is one multi-row statement (PostgreSQL's JSON insert, MySQL's VALUES list,
    # SQLite's executemany); a keyed job goes through the unique insert.
    batch = q.enqueue_many([{"queue": "l", "lease": 12.5}, {"queue": "l"},
                            {"queue": "l", "lease": 600, "delay": 60}])
    keyed = q.enqueue("l", unique_key="k", lease=7).id
    single = q.enqueue("l", lease=0.25).id
    leases = {j.id: j.lease for s in ("available", "scheduled") for j in q.peek("l", s, 10)}
    assert leases == {batch[0].id: 12.5, batch[1].id: None, batch[2].id: 600.0,
                      keyed: 7.0, single: 0.25}


# -- unique_for ----------------------------------------------------------------------------

def test_unique_for_compares_keys_exactly(q: leaseq.Queue) -> None:
    # MySQL's history keeps keys as VARCHAR, where 'k' = 'k ' unless told otherwise.
    done = q.enqueue("u", unique_key="k").id
    q.cancel(done)
    for other in ("k ", "K", " k"):
        assert q.enqueue("u", unique_key=other, unique_for=60).created, other
    assert q.enqueue("u", unique_key="k", unique_for=60).id == done


def test_unique_for_holds_while_producers_race_the_twin_finishing(
    q: leaseq.Queue, url: str, prefix: str
) -> None:
    """Whether the twin is live or has just finished, every producer gets it back: no
    moment between its leaving the live table and its history row becoming visible lets a
    second job in."""
    twin = q.enqueue("r", unique_key="k").id
    producers = clients(url, prefix, 4)
    seen: list[leaseq.EnqueueResult] = []
    stop = time.monotonic() + 1.0

    def produce(client: leaseq.Queue) -> Callable[[], None]:
        def work() -> None:
            while time.monotonic() < stop:
                seen.append(client.enqueue("r", unique_key="k", unique_for=60))
        return work

    def finish() -> None:
        time.sleep(0.3)
        [job] = q.dequeue("r", worker_id="w")
        q.ack(job)

    try:
        race([*(produce(c) for c in producers), finish])
    finally:
        for c in producers:
            c.close()
    assert len(seen) > 20
    assert {(r.id, r.created) for r in seen} == {(twin, False)}
    assert q.stats()["r"].available == 0 and q.stats()["r"].completed == 1


# -- max_jobs ------------------------------------------------------------------------------

def test_max_jobs_holds_while_producers_race(q: leaseq.Queue, url: str, prefix: str) -> None:
    q.configure_queue("cap", max_jobs=25)
    producers = clients(url, prefix, 4)
    made: list[int] = []
    refused: list[int] = []

    def produce(client: leaseq.Queue) -> Callable[[], None]:
        def work() -> None:
            for _ in range(15):
                try:
                    made.append(client.enqueue("cap").id)
                except leaseq.QueueFull:
                    refused.append(1)
        return work

    try:
        race([produce(c) for c in producers])
    finally:
        for c in producers:
            c.close()
    assert (len(made), len(refused)) == (25, 35)
    assert q.stats()["cap"].available == 25


def test_queue_full_in_a_callers_transaction_keeps_the_callers_other_writes(
    q: leaseq.Queue, backend: str, url: str
) -> None:
    """The refused enqueue takes back only its own rows. A psycopg connection outside
    autocommit has no savepoint around leaseq's statements here, so the plan itself must
    remove what it inserted before raising."""
    q.configure_queue("cap", max_jobs=1)
    q.enqueue("cap")
    conn = open_connection(backend, url)
    try:
        # First in the transaction: on PostgreSQL no savepoint wraps it (see above).
        with pytest.raises(leaseq.QueueFull):
            q.enqueue_many([{"queue": "free"}, {"queue": "cap"}], conn=conn)
        kept = q.enqueue("free", conn=conn).id
        conn.commit()
    finally:
        conn.close()
    assert q.stats()["free"].available == 1 and q.get(kept).state == "available"
    assert q.stats()["cap"].available == 1


# -- what a plan runs ----------------------------------------------------------------------

def statements(plan: Plan[Any], answers: dict[str, Result]) -> list[str]:
    """The names of the statements ``plan`` runs, each answered from ``answers``."""
    names: list[str] = []
    try:
        stmt: Stmt = next(plan)
        while True:
            names.append(stmt.name)
            stmt = plan.send(answers.get(stmt.name, Result([(len(names),)], 1)))
    except StopIteration:
        return names
    except leaseq.QueueFull:
        return [*names, "QueueFull"]


def test_an_uncapped_enqueue_runs_no_extra_statement() -> None:
    ops = SqlOps(SqliteDialect("t_"))
    jobs = [NewJob("a", "1"), NewJob("b", "2")]
    inserted = Result([(1,), (2,)], 2)
    assert statements(ops.enqueue(jobs), {"insert_job": inserted}) == ["insert_job"]
    assert statements(ops.enqueue(jobs, ["a"]), {
        "insert_job": inserted, "lock_queue_cap": Result([(5,)], 1),
        "live_count": Result([(3,)], 1),
    }) == ["lock_queue_cap", "insert_job", "live_count"]
    # Over the cap: this batch's rows are taken back, then QueueFull.
    assert statements(ops.enqueue(jobs, ["a"]), {
        "insert_job": inserted, "lock_queue_cap": Result([(2,)], 1),
        "live_count": Result([(3,)], 1),
    }) == ["lock_queue_cap", "insert_job", "live_count", "delete_new_jobs", "QueueFull"]
    # A queue whose settings row holds no max_jobs is not counted.
    assert statements(ops.enqueue(jobs, ["a"]), {
        "insert_job": inserted, "lock_queue_cap": Result([(None,)], 1),
    }) == ["lock_queue_cap", "insert_job"]


# -- stats ---------------------------------------------------------------------------------

def test_stats_age_is_the_oldest_due_jobs_wait(q: leaseq.Queue) -> None:
    q.enqueue("due")
    q.enqueue("later", delay=60)
    time.sleep(0.3)
    q.enqueue("due")
    stats = q.stats()
    assert 0.25 <= (stats["due"].oldest_available_age or 0) < 30
    assert stats["later"].oldest_available_age is None
    q.configure_queue("empty", max_jobs=3)
    assert q.stats()["empty"] == leaseq.QueueStats("empty")


# -- plans ---------------------------------------------------------------------------------

@pytest.fixture
def loaded(backend: str, url: str) -> Iterator[tuple[str, str, str]]:
    """Tables with a few thousand jobs in three queues, some running, dead and finished."""
    prefix = new_prefix()
    q = leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)
    q.migrate()
    try:
        load(q)
        q.enqueue_many([{"queue": f"q{i % 3}", "unique_key": f"k{i}"} for i in range(300)])
        for job in q.dequeue("q2", worker_id="w", limit=100):
            q.ack(job)
        for job in q.dequeue("q1", worker_id="w", limit=10, lease=600):
            q.bury(job)
        q.close()
        yield backend, url, prefix
    finally:
        drop_tables(backend, prefix)


READS: list[tuple[str, dict[str, Any]]] = [
    ("live_count", {"queue": "q1", "cap": 11}),
    ("peek_available", {"queue": "q1", "limit": 10}),
    ("peek_scheduled", {"queue": "q1", "limit": 10}),
    ("peek_dead", {"queue": "q1", "limit": 10}),
    ("recent_twin", {"queue": "q1", "unique_key": "k4", "unique_for": 60}),
]
# The index each read must use, per dialect.
INDEXES = {
    "postgres": {"live_count": {"jobs_claim", "jobs_dead", "jobs_lease"},
                 "peek_available": {"jobs_claim"}, "peek_scheduled": {"jobs_claim"},
                 "peek_dead": {"jobs_kick"}, "recent_twin": {"history_unique"}},
    "sqlite": {"live_count": {"jobs_claim", "jobs_dead", "jobs_lease"},
               "peek_available": {"jobs_claim"}, "peek_scheduled": {"jobs_claim"},
               "peek_dead": {"jobs_kick"}, "recent_twin": {"history_unique"}},
    "mysql": {"live_count": {"jobs_claim"}, "peek_available": {"jobs_claim"},
              "peek_scheduled": {"jobs_claim"}, "peek_dead": {"jobs_claim"},
              "recent_twin": {"history_unique"}},
}


def test_the_new_reads_use_their_indexes(loaded: tuple[str, str, str]) -> None:
    """No new read scans a table, and each walks the index meant for it (so a count or a
    peek of one queue never reads another queue's rows)."""
    backend, url, prefix = loaded
    # Either index of dead jobs serves a count of them: jobs_dead, or jobs_kick (kick
    # order, issue 24), whichever the planner finds cheaper.
    dead = {f"{prefix}jobs_dead", f"{prefix}jobs_kick"}
    for name, params in READS:
        used = indexes_used(backend, url, prefix, name, params)
        wanted = {f"{prefix}{i}" for i in INDEXES[backend][name]}
        if name == "live_count" and wanted & dead:
            assert len(used & dead) == 1 and used - dead == wanted - dead, (name, used)
        else:
            assert used == wanted, (name, used)


def indexes_used(backend: str, url: str, prefix: str, name: str,
                 params: dict[str, Any]) -> set[str]:
    """The indexes the plan of statement ``name`` reads; fails on a scan of a table."""
    if backend == "postgres":
        import psycopg

        from leaseq.backends.postgres.driver import PostgresDialect

        with psycopg.connect(url) as conn:
            conn.execute(f"ANALYZE {prefix}jobs")
            conn.execute(f"ANALYZE {prefix}history")
            if name == "recent_twin":
                # History is small here; what matters is that the lookup *can* use its
                # partial index (the key's equality implies the index's predicate).
                conn.execute("SET enable_seqscan = off")
            plan = conn.execute("EXPLAIN (FORMAT JSON) " + PostgresDialect(prefix).q[name],
                                params).fetchone()[0]  # type: ignore[index]
        scans = [n for n in nodes(plan) if str(n.get("Relation Name", "")).startswith(prefix)]
        assert scans and not [n for n in scans if n["Node Type"] == "Seq Scan"], plan
        # A bitmap scan names its index on the Bitmap Index Scan below the heap scan.
        return {n["Index Name"] for n in nodes(plan) if "Index Name" in n}
    if backend == "mysql":
        from leaseq.backends.mysql.driver import MysqlDialect

        d = MysqlDialect(prefix)
        if "unique_for" in params:
            params = {**params, "unique_for": d.span(params["unique_for"])}
        [plan] = mysql_plans(url, prefix, [(name, params)], d)
        tables = [n for n in nodes(plan) if str(n.get("table_name", "")).startswith(prefix)]
        assert not [t for t in tables if t.get("access_type") == "ALL"], plan
        return {t["key"] for t in tables}
    db = sqlite3.connect(url[len("sqlite:///"):])
    try:
        db.execute("ANALYZE")
        rows = db.execute("EXPLAIN QUERY PLAN " + SqliteDialect(prefix).q[name],
                          params).fetchall()
    finally:
        db.close()
    details = [r[3] for r in rows if prefix in r[3]]
    # A SCAN of an index (the lease index holds only running jobs) is a walk of that
    # partial index; a SCAN of the table is refused.
    assert not [d for d in details if d.startswith("SCAN ") and " INDEX " not in d], details
    return {d.split(" INDEX ")[1].split()[0] for d in details}
