"""A leaseq app with schedules, for tests that run it in `leaseq worker
tests._schedule_app:app` processes and list it with `leaseq schedules`.

LEASEQ_TEST_URL, LEASEQ_TEST_PREFIX: the database; LEASEQ_TEST_LOG: a file each run of
``beat`` appends its job's id, unique key and pid to (one JSON object per line, O_APPEND).
"""

from __future__ import annotations

import os

import leaseq
from tests._processes import append_event

app = leaseq.App(
    os.environ.get("LEASEQ_TEST_URL", "memory://schedule-tests"),
    table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
)


@app.periodic(every=1, name="every-second")
@app.task(queue="sched", name="beat")
def beat() -> None:
    ctx = leaseq.current_job()
    if ctx is not None:
        append_event(job=ctx.job.id, key=ctx.job.unique_key, pid=os.getpid())


@app.task(queue="reports", name="send_report")
def send_report(team: str) -> None:
    """Never due while a test runs (weekdays at 08:00 in Berlin) unless by chance; the
    tests count ``beat`` jobs only."""


app.schedule(send_report, cron="0 8 * * 1-5", tz="Europe/Berlin", kwargs={"team": "ops"},
             name="weekday-report")
