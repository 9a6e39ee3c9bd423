"""Errors as people read them (issue 30, item 7): one line, ``Type: message``, in
``JobInfo.error_line``, ``str(JobFailed)``, ``leaseq jobs``, ``leaseq get`` (traceback
once) and the dashboard's job lists. The rule itself is pure; the rest runs on SQLite and
PostgreSQL with jobs that failed the way a worker records them."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from leaseq._core.error_line import MAX_LINE, error_line
from leaseq.testing import drain
from tests.conftest import migrated_queue, require
from tests.helpers import backend_url

TRACE = """Traceback (most recent call last):
  File "/srv/app/payments.py", line 12, in charge
    raise ValueError("card declined")
ValueError: card declined
"""


def test_the_line_of_a_worker_failure_is_the_exception_line() -> None:
    detail = {"type": "ValueError", "message": "card declined\nsecond line", "traceback": TRACE}
    assert error_line(TRACE, detail) == "ValueError: card declined"
    assert error_line(TRACE, None) == "ValueError: card declined"  # rows without detail
    assert error_line(TRACE, {"message": TRACE}) == "ValueError: card declined"
    assert error_line("out of stock\nsee ticket 7", {"message": "out of stock"}) == (
        "out of stock")
    assert error_line(None, None) is None
    assert error_line("x" * 1000, None) == "x" * (MAX_LINE - 1) + "…"


def test_a_discard_line_names_the_reason_and_the_last_error() -> None:
    detail = {"message": "not worth it", "previous": {"type": "ValueError",
                                                      "message": "card declined"}}
    assert error_line("not worth it", detail) == (
        "not worth it (last error: ValueError: card declined)")
    assert error_line("not worth it", {"message": "not worth it"}) == "not worth it"


def test_job_failed_is_one_line_and_keeps_the_full_error() -> None:
    detail = {"type": "ValueError", "message": "card declined", "traceback": TRACE}
    failed = leaseq.JobFailed(7, "dead", TRACE, detail)
    assert str(failed) == "job 7 is dead: ValueError: card declined"
    assert (failed.error, failed.error_detail) == (TRACE, detail)
    again = pickle.loads(pickle.dumps(failed))
    assert (str(again), again.error, again.error_detail) == (str(failed), TRACE, detail)


@pytest.fixture(params=["sqlite", "postgres"])
def sql_q(request: pytest.FixtureRequest, tmp_path: Path, prefix: str
          ) -> Iterator[tuple[leaseq.Queue, str]]:
    backend: str = request.param
    require(backend)
    url = backend_url(backend, str(tmp_path))
    for queue in migrated_queue(backend, url, prefix):
        yield queue, url


def dead_charge(url: str, prefix: str) -> tuple[leaseq.App, int]:
    """A job that went dead the way a worker records it: the traceback as its error, the
    exception as its detail."""
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="payments", name="charge", max_attempts=1)
    def charge(order: int) -> None:
        raise ValueError("card declined")

    job = charge.enqueue(order=1)
    drain(app, raise_errors=False)
    return app, job.id


def test_a_dead_job_reads_as_its_exception(sql_q: tuple[leaseq.Queue, str],
                                           prefix: str) -> None:
    q, url = sql_q
    app, job_id = dead_charge(url, prefix)
    info = q.get(job_id)
    assert info.state == "dead" and info.error and info.error.startswith("Traceback")
    assert info.error_line == "ValueError: card declined"
    assert next(j for j in q.jobs("payments") if j.id == job_id).error_line == info.error_line
    with pytest.raises(leaseq.JobFailed) as caught:
        q.wait(job_id, timeout=5)
    assert str(caught.value) == f"job {job_id} is dead: ValueError: card declined"
    assert caught.value.error == info.error
    assert caught.value.error_detail == info.error_detail
    app.close()


def cli(url: str, prefix: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "leaseq.cli", *args, "--url", url,
                           "--table-prefix", prefix], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_shows_the_line_and_the_traceback_once(sql_q: tuple[leaseq.Queue, str],
                                                   prefix: str) -> None:
    _, url = sql_q
    app, job_id = dead_charge(url, prefix)
    listed = cli(url, prefix, "jobs", "--queue", "payments")
    assert "ValueError: card declined" in listed and "Traceback" not in listed
    shown = cli(url, prefix, "get", str(job_id))
    assert shown.count("Traceback (most recent call last)") == 1
    assert "error: ValueError: card declined" in shown
    assert json.loads(cli(url, prefix, "get", str(job_id), "--json"))["error_line"] == (
        "ValueError: card declined")
    app.close()


def test_dashboard_lists_show_the_line(sql_q: tuple[leaseq.Queue, str], prefix: str) -> None:
    pytest.importorskip("starlette")
    import httpx

    from leaseq.dashboard import create_app, running

    _, url = sql_q
    app, job_id = dead_charge(url, prefix)
    with running(create_app(url, table_prefix=prefix)) as base, httpx.Client(
            base_url=base, timeout=30) as http:
        for page in ("/queues/payments", "/dead"):
            html = http.get(page).text
            assert "ValueError: card declined" in html and "Traceback (most" not in html
        listed = http.get("/api/jobs", params={"queue": "payments"}).json()["jobs"]
        assert [j["error_line"] for j in listed if j["id"] == job_id] == [
            "ValueError: card declined"]
    app.close()


def test_a_handlers_discard_records_its_reason_once(sql_q: tuple[leaseq.Queue, str],
                                                    prefix: str) -> None:
    """A handler's Discard is recorded as bury (with the reason: a waiter may see the dead
    job in between) then discard without one, so the reason is not stored beside
    itself."""
    q, url = sql_q
    app = leaseq.App(url, table_prefix=prefix)

    @app.task(queue="payments", name="charge", max_attempts=3)
    def charge() -> None:
        if leaseq.current_job().job.attempts == 1:  # type: ignore[union-attr]
            raise ValueError("card declined")
        raise leaseq.Discard("order cancelled meanwhile")

    job = charge.enqueue()
    drain(app, raise_errors=False)  # attempt 1 fails: scheduled for its retry
    q.retry(job.id)
    drain(app, raise_errors=False)  # attempt 2 discards
    info = q.get(job.id)
    assert (info.state, info.error) == ("discarded", "order cancelled meanwhile")
    assert info.error_detail == {"message": "order cancelled meanwhile"}
    assert info.error_line == "order cancelled meanwhile"
    app.close()
