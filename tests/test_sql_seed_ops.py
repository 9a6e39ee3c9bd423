"""The SQL write path of issue 11, beyond what the conformance suite sees.

The conformance suite holds every backend to the behaviour; here are the SQL backends'
own promises: the lease and touch arithmetic as pure functions, the statements each hot
operation sends (per-job leases and touch limits add no round trip, and a queue without
settings pays none), the plans of the new statements (indexes, never a scan of the jobs
table), and rows written before migration 0004.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

import leaseq
from leaseq.backends._sql.ops import SqlOps, lease_for, touch_verdict
from leaseq.backends._sql.plan import Result, Stmt
from leaseq.backends.sqlite.driver import SqliteDialect
from tests.conftest import require
from tests.helpers import SQL_BACKENDS
from tests.test_claim_plan import loaded, mysql_plans, nodes  # noqa: F401  (fixture)

# ``loaded`` (6,000 jobs in three queues, 200 running) comes from test_claim_plan.py; the
# tests that take it name it as a parameter, which ruff reads as a redefinition.
# ruff: noqa: F811

# -- pure arithmetic ---------------------------------------------------------------------

LEASE = st.floats(min_value=0.001, max_value=1e6)


@pytest.mark.parametrize(("explicit", "own", "queue_default", "queue_max", "expected"), [
    (None, None, None, None, 30.0),  # the client's default
    (None, None, 77.0, None, 77.0),  # the queue's default
    (None, 5.0, 77.0, None, 5.0),  # the job's own
    (10.0, 5.0, 77.0, None, 10.0),  # the claim's
    (999.0, None, None, 20.0, 20.0),  # every one capped by max_lease
    (None, 500.0, None, 20.0, 20.0),
    (None, None, None, 20.0, 20.0),
])
def test_lease_for_picks_the_first_lease_given_then_caps_it(
    explicit: float | None, own: float | None, queue_default: float | None,
    queue_max: float | None, expected: float,
) -> None:
    assert lease_for(explicit, own, queue_default, queue_max, 30.0) == expected


@given(st.none() | LEASE, st.none() | LEASE, st.none() | LEASE, st.none() | LEASE, LEASE)
def test_a_lease_never_exceeds_max_lease(
    explicit: float | None, own: float | None, queue_default: float | None,
    queue_max: float | None, fallback: float,
) -> None:
    seconds = lease_for(explicit, own, queue_default, queue_max, fallback)
    assert seconds in {explicit, own, queue_default, queue_max, fallback}
    assert queue_max is None or seconds <= queue_max


@pytest.mark.parametrize(("touches", "age", "quiet", "limits", "expected"), [
    (0, 1.0, 1.0, (None, None, None), "extend"),  # no settings row
    (3, 1.0, 1.0, (3, None, None), "touches"),
    (2, 1.0, 1.0, (3, None, None), "extend"),
    (0, 11.0, 1.0, (None, 10.0, None), "duration"),
    (0, 1.0, 0.5, (None, None, 2.0), "soon"),
    (3, 11.0, 0.5, (3, 10.0, 2.0), "touches"),  # a refusal beats "soon"
    (0, 11.0, 0.5, (None, 10.0, 2.0), "duration"),
    (0, None, None, (None, 10.0, 2.0), "extend"),  # leased before migration 0004
])
def test_touch_verdict(
    touches: int, age: float | None, quiet: float | None,
    limits: tuple[int | None, float | None, float | None], expected: str,
) -> None:
    assert touch_verdict(touches, age, quiet, *limits) == expected


def test_a_claim_updates_once_per_lease_and_reports_only_what_it_leased() -> None:
    """The plan alone, no database: two candidates with different leases, the first
    update (as if) missing its row, which the fenced re-read then does not report."""
    ops = SqlOps(SqliteDialect("t_"))
    plan = ops.claim(["q"], "w", None, 10, 30.0)
    assert next(plan).name == "claim_candidates"

    def candidate(job_id: int, own: float | None) -> tuple[Any, ...]:
        # JOB_COLUMNS (lease_until and worker_id NULL), the clock, the job's own lease,
        # its queue's default_lease and max_lease, its headers, then reserves, releases,
        # timeouts, tags and snoozes.
        return (job_id, "q", None, "{}", 0, 0, 5, None, 7, None, None, 900.0, 950.0 + job_id,
                1000.0, own, None, None, None, 3, 1, 0, '["t"]', 2)

    stmt = plan.send(Result([candidate(1, None), candidate(2, 60.0)], 2))
    assert (stmt.name, stmt.params["until"], stmt.params["now"]) == ("claim_ids", 1030.0, 1000.0)
    assert plan.send(Result([], 0)).name == "jobs_by_ids"
    stmt = plan.send(Result([], 0))  # job 1 is not leased under the token it was read with
    assert (stmt.name, stmt.params["until"]) == ("claim_ids", 1060.0)
    with pytest.raises(StopIteration) as done:
        plan.send(Result([], 1))
    jobs = ops.jobs(done.value.value)  # rows become jobs after the commit (SqlBackend)
    assert [(job.id, job.lease, job.lease_token, job.attempts) for job in jobs] == [(2, 60.0, 8, 1)]
    assert [(job.reserves, job.releases, job.timeouts, job.tags, job.snoozes)
            for job in jobs] == [(4, 1, 0, ("t",), 2)]


# -- statements sent ---------------------------------------------------------------------


@pytest.fixture(params=SQL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Only the SQL backends (overrides tests/conftest.py's ``backend``)."""
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def sent(q: leaseq.Queue, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the statements ``q``'s backend sends from now on (a ``UNION ALL`` of
    one statement's branches counts as that statement)."""
    names: list[str] = []
    backend: Any = q._backend
    if backend.name == "postgres":
        from leaseq.backends.postgres import driver

        real = driver.execute

        def spy_pg(conn: Any, queries: dict[str, str], stmt: Stmt) -> Any:
            names.append(stmt.name.split("__")[0])
            return real(conn, queries, stmt)

        monkeypatch.setattr(driver, "execute", spy_pg)
    else:
        execute = backend.runner.execute

        def spy(conn: Any, stmt: Stmt) -> Any:
            names.append(stmt.name.split("__")[0])
            return execute(conn, stmt)

        monkeypatch.setattr(backend.runner, "execute", spy)
    return names


CLAIM = {"postgres": ["claim"], "mysql": ["claim_starts", "claim_candidates", "claim_ids"],
         "sqlite": ["claim_candidates", "claim_ids"]}


def test_a_claim_sends_what_it_sent_before_per_job_leases(
    q: leaseq.Queue, backend: str, sent: list[str]
) -> None:
    q.configure_queue("b", default_lease=60)
    q.enqueue_many([{"queue": "a", "payload": i} for i in range(3)] + [{"queue": "b"}])
    sent.clear()
    jobs = q._backend.claim(["a", "b"], "w", None, 10, 30.0)
    assert sorted(job.lease for job in jobs) == [30.0, 30.0, 30.0, 60.0]
    # Two distinct leases: MySQL and SQLite update once per lease.
    assert sent == CLAIM[backend] + (["claim_ids"] if backend != "postgres" else [])
    q.enqueue_many([{"queue": "a", "payload": i} for i in range(3)])
    sent.clear()
    assert len(q._backend.claim(["a", "b"], "w", None, 10, 30.0)) == 3
    assert sent == CLAIM[backend]


RENEW = {"postgres": ["renew_many"], "mysql": ["leases_held", "renew_held_many"],
         "sqlite": ["renew_held_many"]}
# A touch too soon: no write; SQLite reads why its update passed the job by.
SOON = {"postgres": ["renew_many"], "mysql": ["leases_held"],
        "sqlite": ["renew_held_many", "leases_held"]}


def test_renewals_send_what_they_sent_before_touch_limits(
    q: leaseq.Queue, backend: str, sent: list[str]
) -> None:
    q.enqueue_many([{"queue": "r", "payload": i} for i in range(3)])
    jobs = q.dequeue("r", worker_id="w", limit=3)
    sent.clear()
    states = q.heartbeat_many(jobs, extend=60)
    assert all(not isinstance(s, Exception) for s in states), states
    assert sent == RENEW[backend]
    # A touch too soon after the last is answered without a write.
    q.configure_queue("r", min_touch_interval=60)
    sent.clear()
    assert q.heartbeat_many(jobs, extend=90) == states
    assert sent == SOON[backend]


def test_failures_read_once_and_write_once_per_job(
    q: leaseq.Queue, sent: list[str]
) -> None:
    q.enqueue_many([{"queue": "f", "payload": i, "max_attempts": 1 + i % 2} for i in range(4)])
    jobs = q.dequeue("f", worker_id="w", limit=4)
    sent.clear()
    assert q._backend.fail_many([(j.id, j.lease_token, "boom", 0.0, None) for j in jobs]) == [
        "dead", "available", "dead", "available"]
    assert sent == ["lock_held_many", "to_dead", "reschedule", "to_dead", "reschedule"]


def test_a_reclaim_with_nothing_to_do_reads_twice(
    q: leaseq.Queue, backend: str, sent: list[str]
) -> None:
    assert q.reclaim() == 0
    # A new connection first compares the server's identity (epoch_*, design §59): once
    # per connection, not per reclaim.
    reads = [name for name in sent if not name.startswith("epoch_")]
    assert reads == ["expired_leases", "retention_queues" if backend == "mysql" else "expired_dead"]


# -- rows from before migration 0004 -----------------------------------------------------


def _execute(backend: str, url: str, sql: str) -> None:
    """Runs ``sql`` (no parameters) on the test database: the tests below fake rows that
    an older leaseq wrote."""
    if backend == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())
    elif backend == "mysql":
        import pymysql

        parts = urlsplit(url)
        conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                               user=parts.username, password=parts.password or "",
                               database=parts.path.lstrip("/"), autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()
    else:
        with sqlite3.connect(url.split("sqlite:///", 1)[1]) as conn:
            conn.execute(sql)


def test_a_lease_taken_before_the_upgrade_renews_under_touch_limits(
    q: leaseq.Queue, backend: str, url: str, prefix: str
) -> None:
    q.configure_queue("u", max_touch_duration=0.001, min_touch_interval=3600)
    q.enqueue("u")
    job = q.dequeue("u", worker_id="w", lease=5)[0]
    _execute(backend, url, f"UPDATE {prefix}jobs SET leased_at = NULL WHERE id = {job.id}")
    # No start on record: neither limit can be judged, so the lease is extended.
    assert q.heartbeat(job, extend=60) > job.lease_until


def test_history_rows_from_before_the_upgrade_report_their_finish_as_updated(
    q: leaseq.Queue, backend: str, url: str, prefix: str
) -> None:
    job_id = q.enqueue("h").id
    q.ack(q.dequeue("h", worker_id="w")[0])
    _execute(backend, url, f"UPDATE {prefix}history SET updated_at = NULL WHERE id = {job_id}")
    info = q.get(job_id)
    assert info.updated_at == info.finished_at
    assert q.jobs("h", state="completed")[0].updated_at == info.finished_at


# -- plans of the new statements -----------------------------------------------------------


@pytest.mark.parametrize("loaded", ["postgres"], indirect=True)
def test_postgres_new_statements_find_jobs_by_index(loaded: tuple[str, str, str]) -> None:
    import psycopg

    from leaseq.backends.postgres.driver import PostgresDialect

    _, url, prefix = loaded
    d = PostgresDialect(prefix)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {prefix}queues (name, dead_retention) VALUES ('q0', 60)"
                     .encode())
        conn.execute(f"ANALYZE {prefix}jobs".encode())
        rows = conn.execute(f"SELECT id, lease_token FROM {prefix}jobs WHERE state = 'running' "
                            "ORDER BY id LIMIT 50".encode()).fetchall()
        ids, tokens = [i for i, _ in rows], [t for _, t in rows]
        statements = {
            "renew_many": {"ids": ids, "tokens": tokens, "extends": [30.0] * len(ids)},
            "lock_held_many": {"ids": ids, "pairs": d.pairs(rows)},
            "expired_dead": {"limit": 100},
            "expired_leases": {"limit": 100},
        }
        for name, params in statements.items():
            plan = conn.execute(f"EXPLAIN (FORMAT JSON) {d.q[name]}".encode(), params
                                ).fetchone()[0]  # type: ignore[index]
            scans = [n for n in nodes(plan) if n.get("Relation Name") == f"{prefix}jobs"]
            assert scans, (name, json.dumps(plan))
            assert all(n["Node Type"] != "Seq Scan" for n in scans), (name, json.dumps(plan))
            if name == "expired_dead":  # a probe of each retention queue's dead jobs
                assert all(n.get("Index Name") == f"{prefix}jobs_dead" for n in scans), plan


@pytest.mark.parametrize("loaded", ["mysql"], indirect=True)
def test_mysql_new_statements_find_jobs_by_index(loaded: tuple[str, str, str]) -> None:
    _, url, prefix = loaded
    pairs = tuple((i, 1) for i in range(1, 51))
    fenced = {"ids": tuple(i for i, _ in pairs), "pairs": pairs}
    names = ["lock_held_many", "leases_held", "archive_dead", "expired_dead"]
    params = [fenced, fenced, {"ids": fenced["ids"]},
              {"queue": "q0", "retention": 60_000_000, "limit": 100}]
    plans = mysql_plans(url, prefix, list(zip(names, params, strict=True)))
    for name, plan in zip(names, plans, strict=True):
        text = json.dumps(plan)
        tables = [n for n in nodes(plan) if n.get("table_name") in (f"{prefix}jobs", "j")]
        assert tables, (name, text)
        assert all(t.get("access_type") != "ALL" for t in tables), (name, text)
        if name != "expired_dead":
            assert all(t.get("key") == "PRIMARY" for t in tables), (name, text)
        else:  # the queue's range of the claim index, no sort to lock
            assert all(t.get("key") == f"{prefix}jobs_claim" for t in tables), text
            assert "filesort" not in text, text


@pytest.mark.parametrize("loaded", ["sqlite"], indirect=True)
def test_sqlite_new_statements_find_jobs_by_index(loaded: tuple[str, str, str]) -> None:
    _, url, prefix = loaded
    q = SqliteDialect(prefix).q
    fenced = {"ids": "[1,2]", "pairs": "[[1,1],[2,1]]"}
    conn = sqlite3.connect(url.split("sqlite:///", 1)[1])
    try:
        conn.execute("ANALYZE")
        plans = {name: [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + q[name],
                                                         params)]
                 for name, params in [("lock_held_many", fenced), ("leases_held", fenced),
                                      ("archive_dead", {"ids": "[1,2]"}),
                                      ("expired_dead", {"limit": 100})]}
    finally:
        conn.close()
    for name, detail in plans.items():
        assert not any(d.startswith((f"SCAN {prefix}jobs", "SCAN j ")) or d == "SCAN j"
                       for d in detail), (name, detail)
    assert any(f"{prefix}jobs_dead" in d for d in plans["expired_dead"]), plans["expired_dead"]
