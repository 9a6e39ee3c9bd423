"""Chaos scenarios (reliability.md section 4) on SQLite, PostgreSQL, MariaDB and Redis (S1
and S2 also on PostgreSQL through a transaction-mode PgBouncer): workers killed, frozen,
stopped and restarted, connections cut and servers restarted while they drain probe jobs.
Afterwards every accepted job is completed exactly once (or dead), no lease ran twice, and
every completion came from the newest lease.

The default suite runs short versions; LEASEQ_CHAOS_SECONDS and LEASEQ_CHAOS_JOBS make
them longer. Each prints its report line; a failure names its seed (LEASEQ_CHAOS_SEED
replays it)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.harness import Chaos
from tests.conftest import require

SECONDS = float(os.environ.get("LEASEQ_CHAOS_SECONDS", "6"))
JOBS = int(os.environ.get("LEASEQ_CHAOS_JOBS", "600"))
REPORT = os.environ.get("LEASEQ_CHAOS_REPORT")


# PostgreSQL through a transaction-mode PgBouncer (pgbouncer=true, workers polling: no
# listen_url) runs only these; the faults of the others are the server's, not the pooler's.
PGBOUNCER_SCENARIOS = ("test_s1_baseline_runs_each_job_once",
                       "test_s2_s3_s21_workers_killed_frozen_and_stopped")


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis", "postgres_pgbouncer"])
def chaos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Chaos]:
    if (request.param == "postgres_pgbouncer"
            and request.function.__name__ not in PGBOUNCER_SCENARIOS):
        pytest.skip("through PgBouncer only S1 and S2 run")
    require(request.param)
    seed = int(os.environ.get("LEASEQ_CHAOS_SEED", random.randrange(2**32)))
    run = Chaos(request.param, tmp_path, seed)
    try:
        yield run
    finally:
        run.close()


def finish(chaos: Chaos, name: str) -> None:
    chaos.settle()
    report = chaos.check()
    line = f"{name}: {report.line()}"
    print(line)
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(line + "\n")
    assert report.ok(), f"{line}\nlost={report.lost[:20]} unexplained={report.unexplained[:20]}" \
        f" stale={report.stale_accepted[:20]}"
    assert report.completed + report.dead == report.accepted, line


def test_s1_baseline_runs_each_job_once(chaos: Chaos) -> None:
    chaos.enqueue(JOBS, fail=0.0)
    chaos.run(workers=3, seconds=min(SECONDS, 3), faults=[])
    finish(chaos, "S1 baseline")
    assert chaos.check().duplicated_explained == 0


def test_s2_s3_s21_workers_killed_frozen_and_stopped(chaos: Chaos) -> None:
    chaos.enqueue(JOBS)
    chaos.run(workers=3, seconds=SECONDS, faults=["kill", "kill", "stop", "term"])
    finish(chaos, "S2/S3/S21 kill -9, SIGSTOP/SIGCONT, SIGTERM")


def test_s5_server_side_connection_kills(chaos: Chaos) -> None:
    if chaos.backend == "sqlite":
        pytest.skip("SQLite has no server connections to cut")
    chaos.enqueue(JOBS)
    chaos.run(workers=3, seconds=SECONDS, faults=["connections"], every=0.8)
    finish(chaos, "S5 connection kills")


@pytest.mark.slow
def test_s4_database_restart_mid_run(chaos: Chaos) -> None:
    if chaos.backend == "sqlite":
        pytest.skip("SQLite has no server to restart (kill -9 of writers is S2)")
    if chaos.backend == "redis":
        pytest.skip("the shared Redis keeps nothing on disk; tests/test_redis_backend.py "
                    "restarts a private one with persistence mid-drain")
    chaos.enqueue(JOBS)
    chaos.run(workers=3, seconds=SECONDS, faults=["restart"], every=max(2.0, SECONDS / 2))
    finish(chaos, "S4 server restart")
