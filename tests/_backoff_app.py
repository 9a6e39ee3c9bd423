"""A leaseq app for the backoff-order process test (`leaseq worker tests._backoff_app:app`),
configured by the environment (LEASEQ_TEST_URL, LEASEQ_TEST_PREFIX). Every task raises:
what the test reads is when each failed job is due again."""

from __future__ import annotations

import os

import leaseq

APP_BACKOFF = leaseq.Backoff(base=30, cap=30, jitter=0)
TASK_BACKOFF = leaseq.Backoff(base=40, cap=40, jitter=0)

app = leaseq.App(os.environ.get("LEASEQ_TEST_URL", "memory://backoff-tests"),
                 table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
                 backoff=APP_BACKOFF)


@app.task(queue="bk", name="fails")
def fails() -> None:
    raise RuntimeError("always")


@app.task(queue="bk", name="fails_own", backoff=TASK_BACKOFF)
def fails_own() -> None:
    raise RuntimeError("always")


@app.task(queue="plain", name="fails_plain")
def fails_plain() -> None:
    raise RuntimeError("always")
