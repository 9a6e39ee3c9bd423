"""Small helpers shared by the conformance modules (the fixtures are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone

import leaseq

# How far a time the database reports may sit outside the test's own bracket of "now":
# the database clock is the truth, and it can run a little apart from this process's.
SLACK = 0.15


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def assert_utc(value: object) -> None:
    """``value`` is a timezone-aware datetime with offset zero."""
    assert isinstance(value, datetime), f"not a datetime: {value!r}"
    assert value.tzinfo is not None, f"naive datetime: {value!r}"
    assert value.utcoffset() == timedelta(0), f"not UTC: {value!r}"


def assert_between(
    value: datetime | None, low: datetime, high: datetime, slack: float = SLACK
) -> None:
    """``low - slack <= value <= high + slack``."""
    assert value is not None
    pad = timedelta(seconds=slack)
    assert low - pad <= value <= high + pad, f"{value} outside [{low}, {high}] ± {slack} s"


def take(
    q: leaseq.Queue, queues: str | Sequence[str] = "q", *, expect: int | None = None,
    **kwargs: object,
) -> leaseq.Job:
    """Dequeue exactly one job (``expect``: and check it is that job id)."""
    kwargs.setdefault("worker_id", "w1")
    jobs = q.dequeue(queues, **kwargs)  # type: ignore[arg-type]
    assert len(jobs) == 1, f"expected one job, got {jobs}"
    if expect is not None:
        assert jobs[0].id == expect, f"expected job {expect}, got job {jobs[0].id}"
    return jobs[0]


def make_dead(q: leaseq.Queue, queue: str = "q", error: str = "boom", **enqueue: object) -> int:
    """A job that used its only attempt and failed: state ``dead`` with ``error``."""
    job_id = q.enqueue(queue, max_attempts=1, **enqueue).id  # type: ignore[arg-type]
    job = take(q, queue, expect=job_id)
    assert q.nack(job, error) == "dead"
    return job_id


def live_total(q: leaseq.Queue) -> int:
    return sum(s.available + s.scheduled + s.running + s.dead for s in q.stats().values())


def refusals(
    cases: Mapping[str, Callable[[], object]],
    error: type[BaseException],
    unchanged: Callable[[], object] | None = None,
) -> dict[str, str]:
    """Run each case; return ``{case: problem}`` for every case that did not raise
    ``error``, or after which ``unchanged()`` no longer returns what it did at the start.

    One test per backend then covers a whole table of bad inputs and still names every
    case that misbehaved (``assert refusals(...) == {}``)."""
    baseline = unchanged() if unchanged else None
    problems: dict[str, str] = {}
    for name, call in cases.items():
        try:
            call()
        except error:
            pass
        except Exception as exc:
            problems[name] = f"raised {type(exc).__name__}: {exc}"
        else:
            problems[name] = f"did not raise {error.__name__}"
        if unchanged is not None:
            now = unchanged()
            if now != baseline:
                problems[name] = f"{problems.get(name, 'refused')} but changed {now!r}"
                baseline = now
    return problems
