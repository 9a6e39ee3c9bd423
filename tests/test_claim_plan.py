"""The claim query is served by one index on every SQL dialect (SPEC, "Hot-path shape").

Each test loads a few thousand jobs in three queues (some scheduled, some running), lets
the database gather statistics, and reads the plan of the statement that locks and picks
jobs. A sequential scan, or a sort of the jobs table, fails the test: under
``FOR UPDATE`` a filesort on MySQL locks every row it reads. The same holds for the
several-queue form of the claim (one ``UNION ALL`` branch per queue), and the batched,
fenced statements of ``ack_many``/``heartbeat_many`` must find their rows by primary key.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL, drop_tables, new_prefix

JOBS = 6000


def load(q: leaseq.Queue) -> None:
    items = [
        {"queue": f"q{i % 3}", "payload": i, "priority": i % 4, "delay": 3600 if i % 5 == 0 else 0}
        for i in range(JOBS)
    ]
    for start in range(0, JOBS, 1000):
        q.enqueue_many(items[start:start + 1000])
    q.dequeue(["q0", "q1"], lease=600, limit=200)


@pytest.fixture
def loaded(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, str, str]]:
    backend = request.param
    require(backend)
    prefix = new_prefix()
    url = {"postgres": POSTGRES_URL, "mysql": MYSQL_URL,
           "sqlite": f"sqlite:///{tmp_path}/plan.db"}[backend]
    q = leaseq.connect(url, table_prefix=prefix)
    q.migrate()
    load(q)
    q.close()
    try:
        yield backend, url, prefix
    finally:
        drop_tables(backend, prefix)


def nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every node of a JSON plan tree (PostgreSQL or MySQL format)."""
    if isinstance(plan, dict):
        yield plan
        for value in plan.values():
            yield from nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from nodes(value)


@pytest.mark.parametrize("loaded", ["postgres"], indirect=True)
def test_postgres_claim_uses_the_claim_index(loaded: tuple[str, str, str]) -> None:
    import psycopg

    from leaseq.backends.postgres.driver import PostgresDialect

    _, url, prefix = loaded
    sql = PostgresDialect(prefix).q["claim"]
    params = {"queues": ["q0", "q1"], "takes": [None, None], "limit": 10, "lease": None,
              "default_lease": 30.0, "worker_id": "w"}
    with psycopg.connect(url) as conn:
        conn.execute(f"ANALYZE {prefix}jobs")
        plan = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()[0]  # type: ignore[index]
    scans = [n for n in nodes(plan) if n.get("Relation Name") == f"{prefix}jobs"]
    text = json.dumps(plan)
    assert scans, text
    assert not [n for n in scans if n["Node Type"] == "Seq Scan"], text
    probe = [n for n in scans if n.get("Index Name") == f"{prefix}jobs_claim"]
    assert probe and probe[0]["Node Type"] in ("Index Scan", "Index Only Scan"), text
    # The only sort allowed merges the per-queue candidate lists, never the table itself.
    for sort in (n for n in nodes(plan) if n.get("Node Type") == "Sort"):
        below = [m for m in nodes(sort.get("Plans", []))
                 if m.get("Relation Name") == f"{prefix}jobs"]
        assert all(m.get("Index Name") == f"{prefix}jobs_claim" for m in below), text


def mysql_plans(url: str, prefix: str, statements: list[tuple[str, dict[str, Any]]],
                d: Any = None) -> list[dict[str, Any]]:
    """``EXPLAIN FORMAT=JSON`` of each named statement of MySQL dialect ``d`` (a fresh one
    by default), after ``ANALYZE TABLE``."""
    import pymysql

    from leaseq.backends.mysql.driver import MysqlDialect, bind

    q = (d or MysqlDialect(prefix)).q
    parts = urlsplit(url)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                           password=parts.password or "", database=parts.path.lstrip("/"))
    plans = []
    try:
        with conn.cursor() as cur:
            cur.execute(f"ANALYZE TABLE {prefix}jobs")
            cur.fetchall()
            for name, params in statements:
                sql, bound = bind(q[name], params)
                cur.execute("EXPLAIN FORMAT=JSON " + sql, bound)
                plans.append(json.loads(cur.fetchone()[0]))
    finally:
        conn.close()
    return plans


def assert_claim_index(plan: dict[str, Any], prefix: str) -> None:
    text = json.dumps(plan)
    tables = [n for n in nodes(plan) if n.get("table_name") == f"{prefix}jobs"]
    assert tables, text
    assert all(t.get("key") == f"{prefix}jobs_claim" for t in tables), text
    assert all(t.get("access_type") != "ALL" for t in tables), text
    assert "filesort" not in text, text


@pytest.mark.parametrize("loaded", ["mysql"], indirect=True)
def test_mysql_claim_candidates_use_the_claim_index_without_filesort(
    loaded: tuple[str, str, str],
) -> None:
    from leaseq.backends.mysql.driver import MysqlDialect

    _, url, prefix = loaded
    d = MysqlDialect(prefix)
    queues = [{"queue": name, "gate": 1} for name in ("q0", "q1", "q2")]
    starts = d.each("claim_starts", queues, {})
    # The locking read begins where claim_starts found the first due job; a start before
    # every job leaves the most rows in range.
    start = {"from_priority": -3, "from_at": datetime(2000, 1, 1), "from_id": 1}
    # Several queues are one UNION ALL statement, each branch on the index by itself.
    union = d.each("claim_candidates", [{**q, **start, "take": 10} for q in queues], {})
    plans = mysql_plans(url, prefix, [
        ("claim_starts", {"queue": "q0", "gate": 1}),
        (starts.name, dict(starts.params)),
        ("claim_candidates", {"queue": "q0", "take": 10, "gate": 1, **start}),
        (union.name, dict(union.params)),
    ], d)
    for plan in plans:
        assert_claim_index(plan, prefix)
    for plan in plans[1::2]:
        branches = [n for n in nodes(plan) if n.get("table_name") == f"{prefix}jobs"]
        assert len(branches) == 3, json.dumps(plan)


@pytest.mark.parametrize("loaded", ["mysql"], indirect=True)
def test_mysql_batched_acks_and_renewals_find_rows_by_primary_key(
    loaded: tuple[str, str, str],
) -> None:
    import pymysql

    _, url, prefix = loaded
    parts = urlsplit(url)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username,
                           password=parts.password or "", database=parts.path.lstrip("/"))
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, lease_token FROM {prefix}jobs WHERE state = 'running' "
                        "ORDER BY id LIMIT 50")
            pairs = tuple(cur.fetchall())
    finally:
        conn.close()
    params = {"ids": tuple(i for i, _ in pairs), "pairs": pairs,
              "until": datetime(2030, 1, 1), "now": datetime(2029, 1, 1)}
    names = ["archive_held_many", "delete_held_many", "renew_held_many", "leases_held"]
    for name, plan in zip(names, mysql_plans(url, prefix, [(n, params) for n in names]),
                          strict=True):
        text = json.dumps(plan)
        # delete_held_many names the table by its alias (multi-table DELETE syntax).
        tables = [n for n in nodes(plan) if n.get("table_name") in (f"{prefix}jobs", "j")]
        assert tables, (name, text)
        # archive_held_many is a locking read: on any other index it would wait on rows
        # other transactions hold.
        assert all(t.get("key") == "PRIMARY" for t in tables), (name, text)
        assert all(t.get("access_type") != "ALL" for t in tables), (name, text)


@pytest.mark.parametrize("loaded", ["sqlite"], indirect=True)
def test_sqlite_claim_uses_the_claim_index_without_sorting(loaded: tuple[str, str, str]) -> None:
    from leaseq.backends.sqlite.driver import SqliteDialect

    _, url, prefix = loaded
    dialect = SqliteDialect(prefix)
    q = dialect.q
    union = dialect.each("claim_candidates",
                         [{"queue": n, "take": 10, "gate": 1} for n in ("q0", "q1", "q2")], {})
    fenced = {"ids": "[1,2]", "pairs": "[[1,1],[2,1]]", "extend": 30.0}
    conn = sqlite3.connect(url.split("sqlite:///", 1)[1])
    try:
        conn.execute("ANALYZE")
        candidates = conn.execute("EXPLAIN QUERY PLAN " + q["claim_candidates"],
                                  {"queue": "q0", "take": 10, "gate": 1}).fetchall()
        several = conn.execute("EXPLAIN QUERY PLAN " + q[union.name], union.params).fetchall()
        claim = conn.execute("EXPLAIN QUERY PLAN " + q["claim_ids"],
                             {"ids": "[1,2]", "until": 30.0, "now": 0.0, "worker_id": "w"}
                             ).fetchall()
        batches = [conn.execute("EXPLAIN QUERY PLAN " + q[name], fenced).fetchall()
                   for name in ("archive_held_many", "delete_held_many", "renew_held_many")]
    finally:
        conn.close()
    detail = [row[-1] for row in candidates]
    assert any(f"USING INDEX {prefix}jobs_claim" in d for d in detail), detail
    assert not any("TEMP B-TREE" in d or d.startswith("SCAN") for d in detail), detail
    detail = [row[-1] for row in several]
    probes = [d for d in detail if f" {prefix}jobs " in f"{d} "]
    assert len(probes) == 3, detail
    assert all(f"USING INDEX {prefix}jobs_claim" in d for d in probes), detail
    assert not any("TEMP B-TREE" in d or d.startswith(f"SCAN {prefix}jobs") for d in detail), detail
    for plan in (claim, *batches):
        detail = [row[-1] for row in plan]
        assert not any(d.startswith(f"SCAN {prefix}jobs") for d in detail), detail
