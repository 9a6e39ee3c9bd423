"""A leaseq app for the SQL-enqueue tests (`leaseq worker tests._sql_enqueue_app:app`): the
task a database trigger enqueues with ``<prefix>enqueue``. Configured by LEASEQ_TEST_URL,
LEASEQ_TEST_PREFIX and LEASEQ_TEST_LOG (each run appends one JSON line to it)."""

from __future__ import annotations

import os
import time

import leaseq
from tests._processes import append_event

app = leaseq.App(os.environ.get("LEASEQ_TEST_URL", "memory://sql-enqueue-tests"),
                 table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"))


@app.task(queue="emails", name="send_receipt")
def send_receipt(order_id: int) -> int:
    ctx = leaseq.current_job()
    assert ctx is not None
    append_event(event="sent", order_id=order_id, job=ctx.job.id, pid=os.getpid(),
                 t=time.monotonic())
    return order_id
