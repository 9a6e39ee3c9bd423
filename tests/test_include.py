"""``App(include=[...])`` (issue 30, item 8): tasks defined in other modules register before
a worker starts, and a worker whose queues have no task says so in one WARNING line. Each
run is a real process in a directory laid out as a newcomer's project: ``app.py`` holds
the App, ``shop_tasks.py`` the tasks (and imports the app, so app.py cannot import it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import leaseq

APP = '''
import leaseq

app = leaseq.App({url!r}, include={include!r})
'''
TASKS = '''
from app import app


@app.task(queue="emails", name="send_newsletter")
def send_newsletter() -> str:
    return "sent"


@app.periodic(every=3600, name="hourly-digest")
@app.task(queue="emails", name="digest")
def digest() -> None:
    pass
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "shop_tasks.py").write_text(TASKS)
    return tmp_path


def write_app(project: Path, include: list[str]) -> str:
    url = f"sqlite:///{project}/shop.db"
    (project / "app.py").write_text(APP.format(url=url, include=include))
    return url


def run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=60, cwd=project, env=env)


def test_a_worker_imports_the_included_modules_and_runs_their_tasks(project: Path) -> None:
    url = write_app(project, ["shop_tasks"])
    q = leaseq.connect(url)
    q.migrate()
    job = q.enqueue("emails", {}, kind="send_newsletter").id
    out = run(project, "-m", "leaseq.cli", "worker", "app:app", "--burst",
              "--poll-interval", "0.1")
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stderr
    assert (q.get(job).state, q.get(job).result) == ("completed", "sent")
    q.close()
    listed = run(project, "-m", "leaseq.cli", "schedules", "app:app", "--json")
    assert [s["name"] for s in json.loads(listed.stdout)] == ["hourly-digest"], listed.stderr


def test_a_worker_whose_queues_have_no_task_warns_once(project: Path) -> None:
    write_app(project, [])  # the tasks' module is never imported
    script = ("import logging; logging.basicConfig(); import leaseq; from app import app; "
              "leaseq.Worker(app, ['emails'])")
    out = run(project, "-c", script)
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "has no tasks" in warnings[0]
    assert "App(include=[...])" in warnings[0]

    none = run(project, "-m", "leaseq.cli", "worker", "app:app")
    assert none.returncode == 1
    assert "no queues to work" in none.stderr and "App(include=[...])" in none.stderr


def test_tasks_on_other_queues_only_are_named_in_the_hint(project: Path) -> None:
    write_app(project, ["shop_tasks"])
    script = ("import logging; logging.basicConfig(); import leaseq; from app import app; "
              "leaseq.Worker(app, ['billing'])")
    out = run(project, "-c", script)
    warnings = [line for line in out.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, out.stderr
    assert "no task of this app uses queue billing (its tasks use emails)" in warnings[0]


def test_an_include_that_cannot_be_imported_is_a_configuration_error(project: Path) -> None:
    write_app(project, ["shop_taks"])
    out = run(project, "-m", "leaseq.cli", "worker", "app:app")
    assert out.returncode == 1
    assert "ConfigurationError: App(include=...) names 'shop_taks'" in out.stderr
    with pytest.raises(leaseq.ConfigurationError, match="module names"):
        leaseq.App("memory://", include=[""])
