"""The probe a chaos run's workers execute: it records each delivery (a ``claim`` with its
lease token) and its run in this process's history file (history.py), and returns its
tag and token, so the completion the database keeps names the lease that wrote it."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import leaseq
from tests.chaos.history import process_recorder

app = leaseq.App(
    os.environ.get("LEASEQ_CHAOS_URL", "memory://chaos"),
    table_prefix=os.environ.get("LEASEQ_CHAOS_PREFIX", "leaseq_"),
    lease=float(os.environ.get("LEASEQ_CHAOS_LEASE", "2")),
    backoff=leaseq.Backoff(base=0.05, cap=0.2, jitter=0.5),
    connect_timeout=float(os.environ.get("LEASEQ_CHAOS_CONNECT_TIMEOUT", "10")),
)


@app.task(queue="chaos", name="probe", max_attempts=50)
def probe(work: float = 0.0, fail: float = 0.0, hold: float = 0.0,
          tag: str = "") -> dict[str, Any]:
    # ``tag`` names the enqueue: the history's key for the job.
    ctx = leaseq.current_job()
    assert ctx is not None
    job = ctx.job
    recorder = process_recorder("worker")
    recorder.observed("claim", key=tag, job=job.id, token=job.lease_token,
                      value={"worker": job.worker_id, "pid": os.getpid()})
    with recorder.op("run", key=tag, job=job.id, token=job.lease_token,
                     classify=lambda exc: "failed"):
        # hold: a fixed part on the first attempt only (test_half_open: the re-runs are quick)
        time.sleep((hold if job.attempts == 1 else 0.0) + work * random.random())
        if random.random() < fail:
            raise RuntimeError("probe failure, retried")
    return {"tag": tag, "token": job.lease_token}
