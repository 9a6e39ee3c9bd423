"""A leaseq app for the flow kill test (`leaseq worker tests._flows_app:app`), configured
by the environment: LEASEQ_TEST_URL, LEASEQ_TEST_PREFIX, and LEASEQ_TEST_LOG, the file each
handler appends one line to per run (job id, lease token, and what it was asked to do),
with O_APPEND, so the lines of processes killed at any moment never interleave.

Handlers do nothing else: the test is about what the database records, not the work."""

from __future__ import annotations

import os
from typing import Any

import leaseq
from tests._processes import append_event


def _log(**fields: Any) -> None:
    ctx = leaseq.current_job()
    assert ctx is not None
    append_event(job=ctx.job.id, token=ctx.job.lease_token, **fields)


def step(n: int) -> int:
    """Step ``n`` of the chain (the previous step's result): returns ``n + 1``."""
    _log(task="step", n=n)
    return n + 1


def member(g: int, i: int) -> list[int]:
    """Member ``i`` of group ``g``."""
    _log(task="member", g=g, i=i)
    return [g, i]


def gather(results: list[list[int]], g: int) -> int:
    """Group ``g``'s callback."""
    _log(task="gather", g=g, results=results)
    return g


def make_app(url: str, prefix: str) -> leaseq.App:
    """The app on ``url`` and ``prefix``: the test enqueues with one, workers run another.
    Leases of 1 s, so a killed worker's jobs come back quickly. A loaded machine can hold a
    heartbeat past such a lease, and the job then runs again elsewhere (fenced, as the test
    checks): 50 attempts, so that no step goes dead of a slow machine and leaves its flow
    waiting past the test's deadline."""
    app = leaseq.App(url, table_prefix=prefix, reclaim_interval=0.2)
    for fn in (step, member, gather):
        app.task(fn, name=fn.__name__, queue="flows", lease=1,  # type: ignore[call-overload]
                 max_attempts=50)
    return app


app = make_app(os.environ.get("LEASEQ_TEST_URL", "memory://flows-tests"),
               os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"))
