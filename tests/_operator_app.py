"""An app for the tests of what a worker tells its operator (tests/test_worker_logs.py),
run in `leaseq worker tests._operator_app:app` processes.

LEASEQ_TEST_URL, LEASEQ_TEST_PREFIX: the database.
"""

from __future__ import annotations

import os

import leaseq

app = leaseq.App(
    os.environ.get("LEASEQ_TEST_URL", "memory://operator-tests"),
    table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
    backoff=leaseq.Backoff(base=0.05, cap=0.1, jitter=0),
    connect_timeout=float(os.environ.get("LEASEQ_TEST_CONNECT_TIMEOUT", "10")),
)


def _charge_card(amount: int) -> None:
    raise ValueError(f"card declined for {amount}")


@app.task(queue="ops", name="charge", max_attempts=3)
def charge(amount: int) -> None:
    _charge_card(amount)


@app.task(queue="ops", name="noop")
def noop() -> None:
    return None
