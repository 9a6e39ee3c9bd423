"""Which database (issue 30, item 4; docs/operations.md, "Which database"): ``--url``
overrides; the App's explicit URL wins over ``LEASEQ_URL``; ``LEASEQ_URL`` fills in when
the App names none; then ``sqlite:///leaseq.db``. Every run is a real process: the
worker, a producer, a read-only command and the dashboard, with the variable exported.

Each worker run finds one job on each database it could wrongly run on, so the job that
completed says which database it used (a burst run exits after it has run its job)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import backend_url, drop_tables, new_prefix

APP = '''
import leaseq

app = leaseq.App({url!r}, table_prefix={prefix!r})


@app.task(queue="where", name="mark")
def mark() -> str:
    return "ran"
'''


@pytest.fixture(params=["sqlite", "postgres"])
def env_url(request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> Iterator[str]:
    """The database LEASEQ_URL names: another SQLite file, or PostgreSQL (the case the
    newcomer met: the variable exported for one app, a worker started for another)."""
    backend: str = request.param
    require(backend)
    url = f"sqlite:///{tmp_path}/env.db" if backend == "sqlite" else backend_url(backend, "")
    yield url
    if backend != "sqlite":
        drop_tables(backend, prefix)


@pytest.fixture
def prefix() -> str:
    return new_prefix()


def run(cwd: Path, args: list[str], env_url: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if env_url is not None:
        env["LEASEQ_URL"] = env_url
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=cwd, env=env)


def leaseq_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "leaseq.cli", *args]


def one_job(url: str, prefix: str) -> Callable[[], str]:
    """Migrates ``url`` and enqueues one ``mark`` job there; returns a function that reads
    that job's state."""
    q = leaseq.connect(url, table_prefix=prefix)
    q.migrate()
    job = q.enqueue("where", {}, kind="mark").id
    q.close()

    def state() -> str:
        with leaseq.connect(url, table_prefix=prefix) as reader:
            return reader.get(job).state

    return state


def write_app(tmp_path: Path, name: str, url: str | None, prefix: str) -> None:
    (tmp_path / f"{name}.py").write_text(APP.format(url=url, prefix=prefix))


def test_leaseq_url_does_not_override_an_apps_explicit_url(
        tmp_path: Path, env_url: str, prefix: str) -> None:
    own = f"sqlite:///{tmp_path}/own.db"
    write_app(tmp_path, "explicit", own, prefix)
    on_own, on_env = one_job(own, prefix), one_job(env_url, prefix)

    out = run(tmp_path, leaseq_cli("worker", "explicit:app", "--burst", "--poll-interval",
                                   "0.1"), env_url)
    assert out.returncode == 0, out.stderr
    assert (on_own(), on_env()) == ("completed", "available")


def test_leaseq_url_fills_in_when_the_app_names_none(
        tmp_path: Path, env_url: str, prefix: str) -> None:
    write_app(tmp_path, "implicit", None, prefix)
    default = f"sqlite:///{tmp_path}/leaseq.db"  # App()'s own default, in the cwd
    on_default, on_env = one_job(default, prefix), one_job(env_url, prefix)

    # The producer's App() and the worker's agree: both use LEASEQ_URL.
    producer = run(tmp_path, [sys.executable, "-c",
                              "from implicit import app; print(app.url)"], env_url)
    assert producer.stdout.strip() == env_url, producer.stderr
    out = run(tmp_path, leaseq_cli("worker", "implicit:app", "--burst", "--poll-interval",
                                   "0.1"), env_url)
    assert out.returncode == 0, out.stderr
    assert (on_env(), on_default()) == ("completed", "available")


def test_without_leaseq_url_an_app_without_url_uses_the_sqlite_default(
        tmp_path: Path, prefix: str) -> None:
    write_app(tmp_path, "implicit", None, prefix)
    producer = run(tmp_path, [sys.executable, "-c",
                              "from implicit import app; print(app.url)"], None)
    assert producer.stdout.strip() == "sqlite:///leaseq.db", producer.stderr


def test_url_flag_overrides_the_apps_explicit_url_and_leaseq_url(
        tmp_path: Path, env_url: str, prefix: str) -> None:
    own, flag = f"sqlite:///{tmp_path}/own.db", f"sqlite:///{tmp_path}/flag.db"
    write_app(tmp_path, "explicit", own, prefix)
    on_own, on_env, on_flag = (one_job(own, prefix), one_job(env_url, prefix),
                               one_job(flag, prefix))

    out = run(tmp_path, leaseq_cli("worker", "explicit:app", "--burst", "--poll-interval",
                                   "0.1", "--url", flag), env_url)
    assert out.returncode == 0, out.stderr
    assert (on_flag(), on_own(), on_env()) == ("completed", "available", "available")


def test_commands_read_leaseq_url_and_url_overrides_it(
        tmp_path: Path, env_url: str, prefix: str) -> None:
    flag = f"sqlite:///{tmp_path}/flag.db"
    one_job(env_url, prefix)
    one_job(flag, prefix)
    one_job(flag, prefix)

    def available(*args: str) -> int:
        out = run(tmp_path, leaseq_cli("stats", "--json", "--table-prefix", prefix, *args),
                  env_url)
        assert out.returncode == 0, out.stderr
        return sum(s["available"] for s in json.loads(out.stdout))

    assert available() == 1
    assert available("--url", flag) == 2


def test_dashboard_follows_the_same_rule(tmp_path: Path, prefix: str) -> None:
    pytest.importorskip("uvicorn")
    env_url, flag = f"sqlite:///{tmp_path}/env.db", f"sqlite:///{tmp_path}/flag.db"

    def served(*args: str) -> str:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LEASEQ_URL": env_url}
        with subprocess.Popen(leaseq_cli("dashboard", "--port", "0", *args), cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) as proc:
            try:
                assert proc.stdout is not None
                return proc.stdout.readline()  # the start line names the database
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)

    assert served().rstrip().endswith(f" for {env_url}")
    assert served("--url", flag).rstrip().endswith(f" for {flag}")


def test_django_settings_name_the_database_and_leaseq_url_does_not_replace_it(
        tmp_path: Path) -> None:
    """Django's app takes its URL from settings (here the example project's SQLite
    database): that is the URL the code names, so an exported LEASEQ_URL leaves it be."""
    pytest.importorskip("django")
    root = Path(__file__).resolve().parent.parent
    db = tmp_path / "shop.sqlite3"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(root / "src"),
           "DJANGO_SETTINGS_MODULE": "project.settings", "EXAMPLE_DB": "sqlite",
           "EXAMPLE_DB_NAME": str(db), "LEASEQ_URL": f"sqlite:///{tmp_path}/elsewhere.db"}
    out = subprocess.run([sys.executable, "-c", "import django; django.setup(); "
                          "from leaseq.contrib.django import app; print(app.url)"],
                         capture_output=True, text=True, timeout=60,
                         cwd=root / "examples" / "django_project", env=env)
    assert out.stdout.strip() == f"sqlite:///{db}", out.stderr
