"""The CLI as an operator uses it, on SQLite: every command, --json, bad arguments, exit
codes. Each run is a real `python -m leaseq.cli` process."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/cli.db"

    def leaseq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "leaseq.cli", *args], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path,
                              env={"LEASEQ_URL": url, "PATH": "/usr/bin:/bin"})

    assert leaseq("migrate").returncode == 0
    return leaseq


def test_enqueue_without_a_kind_says_what_will_happen(run) -> None:  # type: ignore[no-untyped-def]
    out = run("enqueue", "emails", "{}", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["id"]  # stdout stays one object
    [note] = out.stderr.splitlines()
    assert note.startswith("note: no --kind, so no App task matches this job")
    assert "hands it back" in note and "buries it after unknown_task_grace" in note
    assert run("enqueue", "emails", "{}", "--kind", "send").stderr == ""


def test_operator_round_trip(run) -> None:  # type: ignore[no-untyped-def]
    out = run("enqueue", "emails", '{"to": "ada"}', "--priority", "5", "--json")
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)["id"]
    assert json.loads(run("enqueue", "emails", "{}", "--unique-key", "k", "--json").stdout)[
        "created"]
    again = run("enqueue", "emails", "{}", "--unique-key", "k")
    assert "already queued" in again.stdout
    late = json.loads(run("enqueue", "reports", "1", "--delay", "5m", "--json").stdout)["id"]

    stats = {s["queue"]: s for s in json.loads(run("stats", "--json").stdout)}
    assert stats["emails"]["available"] == 2 and stats["reports"]["scheduled"] == 1
    assert "emails" in run("stats").stdout

    listed = json.loads(run("jobs", "--queue", "emails", "--json").stdout)
    assert listed[0]["id"] == job
    keyed = json.loads(run("jobs", "--unique-key", "k", "--json").stdout)
    assert [j["unique_key"] for j in keyed] == ["k"]
    assert json.loads(run("jobs", "--kind", "nothing-of-this-kind", "--json").stdout) == []
    tagged = json.loads(run("enqueue", "emails", "{}", "--tag", "billing", "--tag", "eu",
                            "--json").stdout)["id"]
    found = json.loads(run("jobs", "--tag", "eu", "--json").stdout)
    assert [(j["id"], j["tags"]) for j in found] == [(tagged, ["billing", "eu"])]
    assert json.loads(run("jobs", "--tag", "eu", "--queue", "reports", "--json").stdout) == []
    assert "billing eu" in run("jobs", "--tag", "billing").stdout
    assert run("jobs", "--tag", "not a tag").returncode != 0
    assert json.loads(run("get", str(job), "--json").stdout)["payload"] == {"to": "ada"}
    assert "payload" in run("get", str(job)).stdout

    assert run("pause", "emails").returncode == 0
    assert json.loads(run("stats", "--json").stdout)[0]["paused"] is True
    assert run("resume", "emails").returncode == 0

    assert run("retry", str(late)).returncode == 0
    assert json.loads(run("get", str(late), "--json").stdout)["state"] == "available"
    assert "cancelled" in run("cancel", str(job)).stdout
    shown = json.loads(run("get", str(job), "--json").stdout)
    assert (shown["error"], shown["error_detail"]) == ("cancelled", {"message": "cancelled"})
    assert 'error_detail: {"message": "cancelled"}' in run("get", str(job)).stdout
    assert run("discard", str(late)).returncode == 0
    assert json.loads(run("get", str(late), "--json").stdout)["state"] == "discarded"
    assert "0 jobs kicked" in run("kick", "emails").stdout
    assert "2 history rows pruned" in run("prune", "--older-than", "0").stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("enqueue", "bad queue", "{}"), 1, "InvalidQueueName"),
        (("enqueue", "q", "{not json"), 2, "PAYLOAD is not JSON"),
        (("enqueue", "q", "{}", "--delay", "soon"), 2, "not a duration"),
        (("get", "12345"), 4, "JobNotFound"),
        (("get", "abc"), 2, "not a valid integer"),
        (("retry", "99"), 4, "no job with id 99"),
        (("jobs", "--state", "done"), 2, "Invalid value"),
        (("stats", "--url", "postgresql://postgres@127.0.0.1:1/x"), 3, "BackendUnavailable"),
        (("stats", "--url", "oracle://x"), 1, "ConfigurationError"),
        (("worker", "no_such_module:app"), 2, "cannot import"),
        (("schema",), 2, "Missing option"),
    ],
)
def test_bad_input_is_one_clear_line_and_a_documented_exit_code(run, args, code, message) -> None:  # type: ignore[no-untyped-def]
    out = run(*args)
    assert out.returncode == code, (out.stdout, out.stderr)
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_demo_runs_to_the_end(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "leaseq.cli", "demo", "--jobs", "100"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "where each kind of job ended" in out.stdout
    assert "poison" in out.stdout and "dead" in out.stdout
    assert (tmp_path / "leaseq-demo.db").exists()


def test_bench_measures_and_cleans_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/bench.db"
    out = subprocess.run([sys.executable, "-m", "leaseq.cli", "bench", "--url", url, "--jobs",
                          "300", "--seconds", "1", "--json"], capture_output=True, text=True,
                         timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["drain_per_s"] > 0 and figures["enqueue_batch_per_s"] > 0
    assert set(figures["pickup_ms"]) == {"p50", "p95", "p99"}
    import sqlite3

    tables = sqlite3.connect(f"{tmp_path}/bench.db").execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'bench%'").fetchall()
    assert tables == []


def test_queue_settings_from_the_command_line(run) -> None:  # type: ignore[no-untyped-def]
    out = run("queue", "set", "emails", "--max-jobs", "1", "--max-attempts", "3",
              "--dead-retention", "7d", "--json")
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert (config["max_jobs"], config["max_attempts"], config["dead_retention"]) == (
        1, 3, 7 * 86400.0)
    assert config["max_lease"] is None
    assert run("enqueue", "emails", "{}").returncode == 0
    full = run("enqueue", "emails", "{}")
    assert full.returncode == 1 and "QueueFull" in full.stderr
    reset = json.loads(run("queue", "set", "emails", "--max-jobs", "none", "--json").stdout)
    assert reset["max_jobs"] is None and reset["max_attempts"] == 3
    assert run("enqueue", "emails", "{}").returncode == 0
    shown = run("queue", "show", "emails")
    assert "max_attempts: 3" in shown.stdout and "max_jobs: - (default)" in shown.stdout
    assert "available by priority" in shown.stdout and "0: 2" in shown.stdout
    listed = {q["queue"]: q for q in json.loads(run("queues", "--json").stdout)}
    assert listed["emails"]["available"] == 2 and listed["emails"]["max_attempts"] == 3
    assert "max_attempts=3" in run("queues").stdout
    assert "│ total" in run("stats").stdout
    assert run("enqueue", "emails", "{}", "--priority", "4").returncode == 0
    counts = json.loads(run("queue", "show", "emails", "--json").stdout)
    assert counts["available_by_priority"] == {"4": 1, "0": 2}


def test_flow_control_limits_from_the_command_line(run) -> None:  # type: ignore[no-untyped-def]
    out = run("queue", "set", "api", "--concurrency-limit", "2", "--rate-per-sec", "0.5",
              "--rate-burst", "3", "--json")
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert (config["concurrency_limit"], config["rate_per_sec"], config["rate_burst"]) == (
        2, 0.5, 3)
    assert "concurrency_limit=2" in run("queues").stdout
    assert run("queue", "set", "api", "--concurrency-limit", "1.5").returncode == 2
    bad = run("queue", "set", "api", "--rate-per-sec", "0")
    assert bad.returncode == 1 and "rate_per_sec" in bad.stderr
    reset = json.loads(run("queue", "set", "api", "--rate-per-sec", "none", "--json").stdout)
    assert reset["rate_per_sec"] is None and reset["concurrency_limit"] == 2


def test_timed_pauses_and_max_snoozes_from_the_command_line(run) -> None:  # type: ignore[no-untyped-def]
    assert run("enqueue", "api", "{}").returncode == 0
    out = run("pause", "api", "--until", "15m")
    assert (out.returncode, out.stdout.strip()) == (0, "queue api paused for 900 s")
    shown = json.loads(run("stats", "--json").stdout)[0]
    assert shown["paused"] is True and shown["paused_until"] is not None
    assert "until" in run("stats").stdout and "until" in run("queues").stdout  # may wrap
    end = (datetime.now(timezone.utc) + timedelta(hours=2)).replace(microsecond=0)
    iso = end.isoformat().replace("+00:00", "Z")
    paused = json.loads(run("pause", "api", "--until", iso, "--json").stdout)
    assert paused == {"queue": "api", "paused": True, "paused_until": iso}
    assert json.loads(run("stats", "--json").stdout)[0]["paused_until"].startswith(
        end.isoformat()[:19])
    assert run("pause", "api", "--until", "2020-01-01T00:00:00Z").returncode == 1  # passed
    assert run("pause", "api", "--until", "2099-01-01T00:00:00").returncode == 2  # no zone
    assert run("pause", "api", "--until", "soon").returncode == 2
    assert run("resume", "api").returncode == 0
    assert json.loads(run("stats", "--json").stdout)[0]["paused_until"] is None
    config = json.loads(run("queue", "set", "api", "--max-snoozes", "3", "--json").stdout)
    assert config["max_snoozes"] == 3
    assert "max_snoozes=3" in run("queues").stdout
    assert run("queue", "set", "api", "--max-snoozes", "-1").returncode == 1


def test_max_queues_from_the_command_line(run) -> None:  # type: ignore[no-untyped-def]
    assert run("enqueue", "a", "{}").returncode == 0
    shown = run("server", "show")
    assert shown.returncode == 0 and "max_queues: - (no cap)" in shown.stdout
    out = run("server", "set", "--max-queues", "1", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"max_queues": 1, "queues": 1}
    refused = run("enqueue", "b", "{}")
    assert refused.returncode == 1 and "TooManyQueues" in refused.stderr
    assert run("enqueue", "a", "{}").returncode == 0
    assert "queues: 1 counted" in run("server", "show").stdout
    assert run("server", "set").returncode == 2  # nothing to change
    assert run("server", "set", "--max-queues", "0").returncode == 1
    lifted = json.loads(run("server", "set", "--max-queues", "none", "--json").stdout)
    assert lifted == {"max_queues": None, "queues": None}
    assert run("enqueue", "b", "{}").returncode == 0


def test_queue_set_refuses_bad_values(run) -> None:  # type: ignore[no-untyped-def]
    assert run("queue", "set", "emails").returncode == 2  # nothing to change
    assert run("queue", "set", "emails", "--max-jobs", "lots").returncode == 2
    bad = run("queue", "set", "emails", "--jitter", "2")
    assert bad.returncode == 1 and "jitter" in bad.stderr
    assert json.loads(run("queue", "show", "emails", "--json").stdout)["jitter"] is None


def test_get_and_jobs_show_stored_values_that_do_not_decode(run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A payload written by SQL that is not JSON, and one too deep to write back out:
    ``get`` and ``jobs`` print them (design §52) instead of a traceback."""
    from tests.helpers import plant

    url = f"sqlite:///{tmp_path}/cli.db"
    bad = json.loads(run("enqueue", "q", "1", "--json").stdout)["id"]
    deep = json.loads(run("enqueue", "q", "2", "--json").stdout)["id"]
    plant("sqlite", url, "leaseq_", bad, "payload", "not json")
    plant("sqlite", url, "leaseq_", deep, "payload", "[" * 995 + "]" * 995)
    shown = json.loads(run("get", str(bad), "--json").stdout)["payload"]
    assert shown["preview"] == "not json" and "not JSON" in shown["undecodable"]
    out = run("get", str(bad))
    assert out.returncode == 0 and '"preview": "not json"' in out.stdout, out.stderr
    for args in (("get", str(deep)), ("get", str(deep), "--json"), ("jobs", "--json")):
        out = run(*args)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
