"""The probe a chaos run's workers execute: it logs every start with its lease token."""

from __future__ import annotations

import json
import os
import random
import time

import leaseq

app = leaseq.App(
    os.environ.get("LEASEQ_CHAOS_URL", "memory://chaos"),
    table_prefix=os.environ.get("LEASEQ_CHAOS_PREFIX", "leaseq_"),
    lease=float(os.environ.get("LEASEQ_CHAOS_LEASE", "2")),
    backoff=leaseq.Backoff(base=0.05, cap=0.2, jitter=0.5),
    connect_timeout=float(os.environ.get("LEASEQ_CHAOS_CONNECT_TIMEOUT", "10")),
)


@app.task(queue="chaos", name="probe", max_attempts=50)
def probe(work: float = 0.0, fail: float = 0.0, hold: float = 0.0, tag: str = "") -> str:
    # ``tag`` names the enqueue, for checkers that must tell a job from another one given
    # the same id (after an asynchronous failover).
    ctx = leaseq.current_job()
    assert ctx is not None
    line = json.dumps({"job": ctx.job.id, "token": ctx.job.lease_token,
                       "worker": ctx.job.worker_id, "pid": os.getpid(), "at": time.time()})
    fd = os.open(os.environ["LEASEQ_CHAOS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    # hold: a fixed part on the first attempt only (test_half_open: the re-runs are quick)
    time.sleep((hold if ctx.job.attempts == 1 else 0.0) + work * random.random())
    if random.random() < fail:
        raise RuntimeError("probe failure, retried")
    return "ok"
