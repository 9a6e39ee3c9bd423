"""Fixtures for the dashboard: a real uvicorn server on loopback over ``q``'s tables, and
helpers that put jobs in each state."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

import leaseq
from leaseq.dashboard import create_app, running

HOSTILE = "<script>window.__pwned=1</script>\"'><img src=x onerror=\"window.__pwned=1\">"
"""A payload string that runs script wherever a page forgets to escape it."""

Serve = Callable[..., str]


@pytest.fixture
def serve(q: leaseq.Queue, url: str, prefix: str) -> Iterator[Serve]:
    """``serve(token=None, read_only=False, **kwargs)`` starts a dashboard on ``q``'s
    tables and returns its base URL; every server stops at the end of the test."""
    with ExitStack() as stack:

        def start(token: str | None = None, read_only: bool = False, *,
                  app: Any = None, **kwargs: Any) -> str:
            app = app or create_app(url, token=token, read_only=read_only,
                                    table_prefix=prefix, **kwargs)
            return stack.enter_context(running(app))

        yield start


@pytest.fixture
def base(serve: Serve) -> str:
    """A dashboard without a token."""
    return serve()


@pytest.fixture
def http(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


def csrf_of(client: httpx.Client) -> dict[str, str]:
    """The header a script sends with a POST when it has no bearer token."""
    return {"x-csrf-token": client.get("/api/csrf").json()["csrf"]}


def make_dead(q: leaseq.Queue, queue: str, payload: Any = None, error: str = "boom") -> int:
    """A job of ``queue`` that is dead now; returns its id."""
    job_id = q.enqueue(queue, payload if payload is not None else {"n": 1}).id
    (job,) = q.dequeue(queue, worker_id="test")
    assert job.id == job_id
    q.bury(job, reason=error)
    return job_id


def make_completed(q: leaseq.Queue, queue: str) -> int:
    job_id = q.enqueue(queue, {"done": True}).id
    (job,) = q.dequeue(queue, worker_id="test")
    q.ack(job, {"ok": True})
    return job_id
