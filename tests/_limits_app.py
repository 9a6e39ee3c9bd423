"""A leaseq app for the flow-control process tests (`leaseq worker tests._limits_app:app`),
configured by the environment: LEASEQ_TEST_URL, LEASEQ_TEST_PREFIX, and LEASEQ_TEST_LOG, a
file each handler appends its start and end to (JSON lines written with O_APPEND, times by
``time.monotonic()``, one clock for every process on Linux)."""

from __future__ import annotations

import os
import time

import leaseq
from tests._processes import append_event

app = leaseq.App(os.environ.get("LEASEQ_TEST_URL", "memory://limits-tests"),
                 table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"))


def _log(event: str) -> None:
    ctx = leaseq.current_job()
    assert ctx is not None
    append_event(event=event, job=ctx.job.id, pid=os.getpid(), t=time.monotonic())


@app.task(queue="limited", name="hold")
def hold(seconds: float) -> None:
    """Logged from its first line to its last: a subset of the time the database counts
    the job as running (from the claim to the ack)."""
    _log("start")
    time.sleep(seconds)
    _log("end")


@app.task(queue="rated", name="tick")
def tick() -> None:
    _log("start")
