"""Chaos scenarios (reliability.md section 4) on SQLite, PostgreSQL, MariaDB and Redis (S1
and S2 also on PostgreSQL through a transaction-mode PgBouncer; S1, S2 and S5 on the Redis
Cluster in the slow run): workers killed, frozen, stopped and restarted, connections cut
and servers restarted (S4, slow: servers of the run's own, servers.py) while they drain
probe jobs.
A producer enqueues during the faults. Afterwards every accepted job is completed (or
dead), and the history checker (history.py) finds nothing lost, duplicated beyond the
re-runs ended leases explain, stale or unexpected.

The default suite runs short versions; LEASEQ_CHAOS_SECONDS and LEASEQ_CHAOS_JOBS make
them longer. Each prints its report line; a failure names its seed (LEASEQ_CHAOS_SEED
replays it)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, Report, producing
from tests.chaos.servers import PRIVATE
from tests.conftest import require

SECONDS = float(os.environ.get("LEASEQ_CHAOS_SECONDS", "6"))
JOBS = int(os.environ.get("LEASEQ_CHAOS_JOBS", "600"))


# PostgreSQL through a transaction-mode PgBouncer (pgbouncer=true, workers polling: no
# listen_url) runs only these; the faults of the others are the server's, not the pooler's.
PGBOUNCER_SCENARIOS = ("test_s1_baseline_runs_each_job_once",
                       "test_s2_s3_s21_workers_killed_frozen_and_stopped")


def new_seed() -> int:
    return int(os.environ.get("LEASEQ_CHAOS_SEED", random.randrange(2**32)))


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis", "postgres_pgbouncer",
                        # The cluster runs in the long sweep only (scripts/reliability-table).
                        pytest.param("redis_cluster", marks=pytest.mark.slow)])
def chaos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Chaos]:
    if (request.param == "postgres_pgbouncer"
            and request.function.__name__ not in PGBOUNCER_SCENARIOS):
        pytest.skip("through PgBouncer only S1 and S2 run")
    require(request.param)
    run = Chaos(request.param, tmp_path, new_seed())
    try:
        yield run
    finally:
        run.close()


def finish(chaos: Chaos, scenario: str) -> Report:
    """Faults off, the queue drained: the books and the history must balance."""
    chaos.settle()
    report = chaos.check()
    line = f"{scenario}: {report.line()}"
    chaos.publish(report, scenario, line)
    assert report.ok(), f"{line}\n{report.detail()}"
    assert report.completed + report.dead == report.accepted, line
    return report


def run_with_a_producer(chaos: Chaos, seconds: float, faults: list[str],
                        every: float = 0.6) -> None:
    """``chaos.run`` while a producer enqueues one job at a time on the workers' URL,
    so faults meet enqueues too (an enqueue cut off has an unknown outcome: the history
    finds whether it committed)."""
    with producing([chaos.producer("producer")]) as producers:
        chaos.run(workers=3, seconds=seconds, faults=faults, every=every)
    chaos.ids += [job_id for p in producers for job_id, _, _ in p.returned]


def test_s1_baseline_runs_each_job_once(chaos: Chaos) -> None:
    chaos.enqueue(JOBS, fail=0.0)
    chaos.run(workers=3, seconds=min(SECONDS, 3), faults=[])
    report = finish(chaos, "S1 baseline")
    # No fault, no failure: every job delivered once, and no re-run at all.
    assert (report.history.deliveries, report.history.reruns) == (JOBS, 0), report.line()


def test_s2_s3_s21_workers_killed_frozen_and_stopped(chaos: Chaos) -> None:
    chaos.enqueue(JOBS)
    run_with_a_producer(chaos, SECONDS, ["kill", "kill", "stop", "term"])
    finish(chaos, "S2/S3/S21 kill -9, SIGSTOP/SIGCONT, SIGTERM")


def test_s5_server_side_connection_kills(chaos: Chaos) -> None:
    if chaos.backend == "sqlite":
        pytest.skip("SQLite has no server connections to cut")
    chaos.enqueue(JOBS)
    run_with_a_producer(chaos, SECONDS, ["connections"], every=0.8)
    finish(chaos, "S5 connection kills")


@pytest.fixture(params=["postgres", "mysql", "redis"])
def restartable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Chaos]:
    """A chaos run on a server of its own, which S4 restarts (servers.py)."""
    server = PRIVATE[request.param]()
    try:
        run = Chaos(request.param, tmp_path, new_seed(), server=server)
        try:
            yield run
        finally:
            run.close()
    finally:
        server.close()


@pytest.mark.slow
def test_s4_database_restart_mid_run(restartable: Chaos) -> None:
    """SQLite has no server to restart (kill -9 of writers is S2); Redis restarts with an
    append-only file fsynced on every write."""
    restartable.enqueue(JOBS)
    run_with_a_producer(restartable, SECONDS, ["restart"], every=max(2.0, SECONDS / 2))
    finish(restartable, "S4 server restart")
