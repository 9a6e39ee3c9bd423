"""A leaseq app for worker tests, configured by the environment so that a test can run it
in a separate `leaseq worker tests._worker_app:app` process.

LEASEQ_TEST_URL, LEASEQ_TEST_PREFIX: the database; LEASEQ_TEST_LOG: a file every task
appends its events to (one JSON object per line, written with O_APPEND).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import leaseq

app = leaseq.App(
    os.environ.get("LEASEQ_TEST_URL", "memory://worker-tests"),
    table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
    lease=float(os.environ.get("LEASEQ_TEST_LEASE", "30")),
    backoff=leaseq.Backoff(base=0.05, cap=0.2, jitter=0),
)


def log(event: str, **fields: object) -> None:
    path = os.environ.get("LEASEQ_TEST_LOG")
    ctx = leaseq.current_job()
    if not path or ctx is None:
        return
    line = json.dumps({"event": event, "job": ctx.job.id, "token": ctx.job.lease_token,
                       "attempt": ctx.job.attempts, "pid": os.getpid(), **fields})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@app.task(queue="work", name="sleepy")
def sleepy(seconds: float, n: int = 0) -> int:
    log("start", n=n)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
    log("end", n=n)
    return n


@app.task(queue="work", name="asleep")
async def asleep(seconds: float, n: int = 0) -> int:
    log("start", n=n)
    await asyncio.sleep(seconds)
    log("end", n=n)
    return n


@app.task(queue="work", name="fails_once", max_attempts=2)
def fails_once(n: int = 0) -> int:
    """Raises on its first attempt, with a message a fault proxy can find in the nack."""
    log("start", n=n)
    ctx = leaseq.current_job()
    if ctx is not None and ctx.job.attempts == 1:
        raise RuntimeError(f"first-attempt-fails-{n}")
    return n


@app.task(queue="work", name="killer", max_attempts=2)
def killer() -> None:
    log("start")
    os.kill(os.getpid(), signal.SIGKILL)
