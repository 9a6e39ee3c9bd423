"""What `leaseq worker` tells its operator, as real processes on real databases (issue 30):
failed attempts at WARNING and deaths at ERROR in its log, text and JSON; the start line
naming the (redacted) database; ``--burst`` that ends when nothing is due and waits for
jobs a limit holds back; one clear error line and exit code 78 for what will not fix
itself (tables missing or too old, unknown database, bad credentials, bad URL), which the
``--processes`` supervisor does not restart; one WARNING per attempt to reach a database
that does not answer, and ``--start-timeout``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL, drop_tables, new_prefix, wait_for

ROOT = Path(__file__).resolve().parent.parent
APP = "tests._operator_app:app"


class Env:
    """A fresh prefix on one database and the `leaseq worker` runs of one test."""

    def __init__(self, backend: str, tmp: Path) -> None:
        self.backend, self.tmp = backend, tmp
        self.url = {"sqlite": f"sqlite:///{tmp}/w.db", "postgres": POSTGRES_URL}[backend]
        self.prefix = new_prefix()
        self.q = leaseq.connect(self.url, table_prefix=self.prefix)
        self.q.migrate()

    def start(self, *args: str, url: str | None = None,
              prefix: str | None = None) -> subprocess.Popen[str]:
        env = {**os.environ, "LEASEQ_TEST_URL": url or self.url,
               "LEASEQ_TEST_PREFIX": prefix or self.prefix, "PYTHONPATH": str(ROOT)}
        env.pop("LEASEQ_URL", None)
        return subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "worker", APP, "--poll-interval", "0.1",
             "--grace", "5", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def run(self, *args: str, timeout: float = 60, **kwargs: str) -> tuple[int, str, float]:
        """A worker run to its end: exit code, output, seconds it took."""
        began = time.monotonic()
        proc = self.start(*args, **kwargs)
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        return proc.returncode, out, time.monotonic() - began

    def until_dead(self, job: int, *args: str) -> str:
        """A worker run until ``job`` is dead (a burst run would not wait for a retry
        scheduled for later), stopped by SIGTERM: its output."""
        proc = self.start(*args)
        try:
            wait_for(lambda: self.q.get(job).state == "dead", timeout=30,
                     message=f"job {job} dead")
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, out
        return out

    def close(self) -> None:
        self.q.close()
        drop_tables(self.backend, self.prefix)


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    require(request.param)
    scenario = Env(request.param, tmp_path)
    try:
        yield scenario
    finally:
        scenario.close()


def lines(out: str, level: str) -> list[str]:
    return [line for line in out.splitlines() if f" {level} " in line]


# -- logs ------------------------------------------------------------------------------


def test_failed_attempts_warn_and_the_death_is_an_error_with_the_users_traceback(
    env: Env,
) -> None:
    job = env.q.enqueue("ops", {"amount": 42}, kind="charge", max_attempts=3).id
    out = env.until_dead(job)
    warnings = [line for line in lines(out, "WARNING") if "leaseq.worker.jobs" in line]
    assert len(warnings) == 2, out
    for attempt, line in enumerate(warnings, 1):
        assert f"job {job} (charge) on ops attempt {attempt}/3 failed" in line
        assert "ValueError: card declined for 42; retry at " in line
    [error] = lines(out, "ERROR")
    assert f"job {job} (charge) on ops dead after attempt 3/3: ValueError: card declined" \
        in error
    trace = out[out.index(error):].splitlines()[1:]
    assert trace[0] == "Traceback (most recent call last):"
    assert "tests/_operator_app.py" in trace[1]  # the user's frame first, leaseq's cut
    assert not any("leaseq/worker" in line for line in trace if line.lstrip().startswith(
        "File"))


def test_json_log_lines_carry_the_fields(env: Env) -> None:
    job = env.q.enqueue("ops", {"amount": 7}, kind="charge", max_attempts=2).id
    ok = env.q.enqueue("ops", {}, kind="noop").id
    out = env.until_dead(job, "--log-format", "json", "--log-jobs")
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(records) == len(out.splitlines()), out  # every line is one JSON object
    by_event: dict[str, list[dict[str, object]]] = {}
    for record in records:
        assert {"ts", "level", "logger", "msg", "pid"} <= record.keys()
        by_event.setdefault(str(record.get("event")), []).append(record)
    [failed] = by_event["job_failed"]
    assert failed["level"] == "WARNING" and failed["logger"] == "leaseq.worker.jobs"
    assert (failed["job_id"], failed["queue"], failed["task"]) == (job, "ops", "charge")
    assert (failed["attempt"], failed["max_attempts"]) == (1, 2)
    assert (failed["error_type"], failed["error"]) == ("ValueError", "card declined for 7")
    assert str(failed["next_run_at"]).endswith("Z") and failed["worker_id"]
    [dead] = by_event["job_dead"]
    assert dead["level"] == "ERROR" and dead["attempt"] == 2
    assert "tests/_operator_app.py" in str(dead["traceback"]).splitlines()[1]
    [succeeded] = by_event["job_succeeded"]
    assert succeeded["level"] == "INFO" and succeeded["job_id"] == ok
    [started] = by_event["worker_started"]
    assert started["queues"] == ["ops"] and started["version"] == leaseq.__version__


def test_the_start_line_names_the_database_without_its_password(env: Env) -> None:
    if env.backend == "postgres":  # trust authentication: the password is not checked
        url = env.url.replace("postgres@", "postgres:sekrit@")
        shown = "postgresql://***@127.0.0.1:5432/"
    else:
        url, shown = env.url, env.url
    code, out, _ = env.run("--burst", url=url)
    assert code == 0, out
    [start] = [line for line in out.splitlines() if " started: " in line]
    assert f"leaseq {leaseq.__version__} on {shown}" in start, start
    assert "queues=ops, concurrency=10" in start
    assert "sekrit" not in out


# -- --burst -----------------------------------------------------------------------------


def test_burst_on_empty_queues_exits_0_at_once(env: Env) -> None:
    env.q.enqueue("ops", {}, kind="noop", delay=3600)  # scheduled: not due
    env.q.enqueue("other", {}, kind="noop")  # another queue's
    code, out, took = env.run("--burst", timeout=30)
    assert code == 0, out
    assert "nothing due in ops: burst run done (0 jobs processed)" in out
    assert took < 15, took  # the interpreter's start is most of it


def test_burst_waits_for_due_jobs_a_rate_limit_holds_back(env: Env) -> None:
    env.q.configure_queue("ops", rate_per_sec=2, rate_burst=1)
    jobs = [env.q.enqueue("ops", {}, kind="noop").id for _ in range(4)]
    code, out, _ = env.run("--burst")
    assert code == 0, out
    assert [env.q.get(j).state for j in jobs] == ["completed"] * 4, out


def test_burst_leaves_paused_queues_and_later_retries_alone(env: Env) -> None:
    env.q.configure_queue("ops", base_backoff=3600, max_backoff=3600)
    job = env.q.enqueue("ops", {"amount": 1}, kind="charge").id
    code, out, _ = env.run("--burst")
    assert code == 0, out
    assert "burst run done (1 job processed)" in out and "1 job processed, 1 failed" in out
    assert env.q.get(job).state == "scheduled"  # its retry, an hour away, did not hold it
    env.q.enqueue("ops", {}, kind="noop")
    env.q.pause("ops")
    code, out, _ = env.run("--burst")
    assert code == 0 and "burst run done (0 jobs processed)" in out, out


# -- what will not fix itself: exit 78 ---------------------------------------------------


def test_tables_never_created_exit_78_naming_migrate(env: Env) -> None:
    fresh = new_prefix()
    code, out, _ = env.run("--burst", prefix=fresh, timeout=30)
    assert code == 78, out
    [error] = lines(out, "ERROR")
    assert "cannot run on" in error and "SchemaMissing" in error
    assert "leaseq migrate" in error
    assert not lines(out, "WARNING"), out
    drop_tables(env.backend, fresh)


def test_a_schema_older_than_the_code_exits_78_naming_both_versions(env: Env) -> None:
    recorded, needed = env.q._schema_versions() or (0, 0)
    assert recorded == needed
    _sql(env, f"DELETE FROM {env.prefix}migrations WHERE version = {needed}")
    # The next newest: numbers may skip on a dialect (SQLite has no 0011_epoch).
    before = env.q._schema_versions()
    assert before is not None and before[0] < needed
    code, out, _ = env.run()  # not even --burst: it does not start
    assert code == 78, out
    [error] = lines(out, "ERROR")
    assert f"is at migration {before[0]}, leaseq {leaseq.__version__} needs migration " \
        f"{needed}: run `leaseq migrate`" in error
    _sql(env, f"INSERT INTO {env.prefix}migrations (version, name) VALUES ({needed + 1}, 'x')")
    _sql(env, f"INSERT INTO {env.prefix}migrations (version, name) VALUES ({needed}, 'y')")
    code, out, _ = env.run("--burst")
    assert code == 0, out
    assert f"is at migration {needed + 1}, newer than the {needed}" in out


def _sql(env: Env, statement: str) -> None:
    if env.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(env.url.split("///", 1)[1]) as conn:
            conn.execute(statement)
    else:
        import psycopg

        with psycopg.connect(env.url, autocommit=True) as conn:
            conn.execute(statement)


def test_the_supervisor_does_not_restart_a_child_that_exits_78(env: Env) -> None:
    fresh = new_prefix()
    code, out, _ = env.run("--processes", "2", prefix=fresh, timeout=60)
    assert code == 78, out
    assert "restarting it in" not in out
    assert "not restarting it, stopping the others" in out
    drop_tables(env.backend, fresh)


def test_an_unknown_database_bad_credentials_and_a_bad_url_exit_78(
    env: Env, tmp_path: Path,
) -> None:
    if env.backend != "postgres":
        pytest.skip("one server's refusals are enough; the URL's too")
    unknown = POSTGRES_URL.rsplit("/", 1)[0] + "/leaseq_no_such_database"
    code, out, _ = env.run("--burst", url=unknown, timeout=30)
    assert code == 78 and "unknown database" in out, out
    code, out, _ = env.run("--burst", url="postgresq://nowhere/x", timeout=30)
    assert code == 78 and "ConfigurationError" in out, out
    require("mysql")
    refused = MYSQL_URL.replace("root@", "root:wrong-password@")
    code, out, _ = env.run("--burst", url=refused, timeout=30)
    assert code == 78 and "AuthenticationFailed" in out, out
    assert "wrong-password" not in out


# -- what may fix itself: retried, one WARNING per attempt --------------------------------


def test_an_unreachable_server_gives_one_warning_per_attempt_until_the_start_timeout(
    env: Env,
) -> None:
    if env.backend != "postgres":
        pytest.skip("a server that does not answer is a network thing: one backend shows it")
    closed = "postgresql://postgres@127.0.0.1:9/test?connect_timeout=1"  # discard port
    code, out, took = env.run("--start-timeout", "4", url=closed, timeout=60)
    assert code == 69, out
    warnings = lines(out, "WARNING")
    assert 2 <= len(warnings) <= 5, out
    for attempt, line in enumerate(warnings, 1):
        assert "unreachable" in line and f"attempt {attempt} failed, retrying in" in line
    [error] = lines(out, "ERROR")
    assert "still unreachable after" in error and "--start-timeout 4" in error
    assert took < 30


def test_a_stop_while_waiting_for_the_database_exits_0(env: Env) -> None:
    if env.backend != "postgres":
        pytest.skip("as above")
    proc = env.start(url="postgresql://postgres@127.0.0.1:9/test?connect_timeout=1")
    try:
        wait_for(lambda: proc.poll() is None, timeout=5)
        time.sleep(2)  # past the first failed attempt
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "attempt 1 failed" in out


def test_an_outage_while_running_is_one_warning_per_attempt_then_work_resumes(
    env: Env, tmp_path: Path,
) -> None:
    """The database goes away under a running worker (its proxy closes: every connection
    cut, new ones refused) and comes back: from the first report on, the worker's only
    WARNINGs are its fetch loop's, one per attempt, numbered; then jobs run again."""
    if env.backend != "postgres":
        pytest.skip("a network outage: one server shows it")
    import socket

    from tests.netproxy import Proxy

    proxy = Proxy.for_url(POSTGRES_URL)
    url = proxy.url_for(POSTGRES_URL) + "?connect_timeout=2"
    log = tmp_path / "worker.log"
    envvars = {**os.environ, "LEASEQ_TEST_URL": url, "LEASEQ_TEST_PREFIX": env.prefix,
               "PYTHONPATH": str(ROOT), "LEASEQ_TEST_CONNECT_TIMEOUT": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "worker", APP, "--poll-interval", "0.1",
             "--reclaim-interval", "0.3", "--grace", "5"],
            cwd=ROOT, env=envvars, stdout=out, stderr=subprocess.STDOUT, text=True)
    revived: Proxy | None = None
    try:
        wait_for(lambda: " started: " in log.read_text(), timeout=30, message="start")
        first = env.q.enqueue("ops", {}, kind="noop").id
        wait_for(lambda: env.q.get(first).state == "completed", timeout=15)
        cut_at = len(log.read_text())
        proxy.close()
        wait_for(lambda: "attempt 3 failed" in log.read_text(), timeout=30,
                 message="three failed attempts")
        revived = Proxy(*proxy.target, listener=socket.create_server(("127.0.0.1", proxy.port)))
        wait_for(lambda: "reachable again" in log.read_text(), timeout=60,
                 message="the database back")
        second = env.q.enqueue("ops", {}, kind="noop").id
        wait_for(lambda: env.q.get(second).state == "completed", timeout=15)
        proc.terminate()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.close()
        if revived is not None:
            revived.close()
    text = log.read_text()
    assert proc.returncode == 0, text
    during = text[cut_at:text.index("reachable again")]
    warnings = lines(during, "WARNING")  # LISTEN's and the turn's losses are INFO
    assert len(warnings) >= 3, text
    for attempt, line in enumerate(warnings, 1):
        assert "unreachable" in line and f"attempt {attempt} failed" in line, text
