"""Periodic jobs: tick arithmetic (every, cron, DST in Europe/Berlin), refused declarations,
the scheduler in an in-process worker on every backend, and the done-check: one schedule
on three worker processes enqueues each tick once."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

import leaseq
from leaseq.cli import cli
from leaseq.schedules import KEY_PREFIX
from leaseq.worker.scheduler import Scheduler
from tests._processes import ROOT, WorkerFleet
from tests.conftest import require
from tests.helpers import (
    running,
    wait_for,
)

UTC = timezone.utc


def at(text: str) -> datetime:
    """A UTC instant from ``2024-10-27T01:15`` (or with seconds)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def tick_of(key: str | None) -> datetime:
    """The tick a scheduled job's unique key names (schedule names here have no colon)."""
    assert key is not None and key.startswith(KEY_PREFIX)
    return datetime.fromisoformat(key[len(KEY_PREFIX):].split(":", 1)[1])


def new_app(url: str = "memory://schedules", prefix: str = "leaseq_") -> leaseq.App:
    return leaseq.App(url, table_prefix=prefix)


def one_schedule(**options: Any) -> leaseq.Schedule:
    app = new_app()

    @app.task(name="job")
    def job() -> None: ...

    return app.schedule(job, **options)


# -- tick arithmetic -----------------------------------------------------------------------


def test_every_ticks_are_multiples_of_the_period_since_the_epoch() -> None:
    s = one_schedule(every=30)
    assert s.every == timedelta(seconds=30)
    assert s.last_tick(at("2024-01-01T10:00:29.999")) == at("2024-01-01T10:00:00")
    assert s.last_tick(at("2024-01-01T10:00:30")) == at("2024-01-01T10:00:30")
    assert s.next_tick(at("2024-01-01T10:00:30")) == at("2024-01-01T10:01:00")
    seven = one_schedule(every=timedelta(seconds=7))
    tick = seven.next_tick(at("2024-05-05T05:05:05.5"))
    assert (tick - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() % 7 == 0
    # The same ticks whatever zone the caller's time is in, and whatever tz says.
    berlin = datetime(2024, 1, 1, 11, 0, 10, tzinfo=ZoneInfo("Europe/Berlin"))
    assert one_schedule(every=60, tz="Asia/Kolkata").last_tick(berlin) == at("2024-01-01T10:00")
    half = one_schedule(every=0.5)
    assert half.next_tick(at("2024-01-01T00:00:00.25")) == at("2024-01-01T00:00:00.5")


def test_cron_weekdays_at_eight_in_berlin_follow_the_offset() -> None:
    s = one_schedule(cron="0 8 * * 1-5", tz="Europe/Berlin")
    assert s.next_tick(at("2024-01-05T09:00")) == at("2024-01-08T07:00")  # Fri → Mon, CET
    assert s.next_tick(at("2024-07-05T09:00")) == at("2024-07-08T06:00")  # CEST
    assert s.last_tick(at("2024-01-08T07:00")) == at("2024-01-08T07:00")
    assert s.last_tick(at("2024-01-08T06:59:59")) == at("2024-01-05T07:00")


def test_cron_through_the_spring_forward_in_berlin() -> None:
    # 2024-03-31: 02:00 CET becomes 03:00 CEST (01:00Z); 02:30 does not exist that day.
    daily = one_schedule(cron="30 2 * * *", tz="Europe/Berlin")
    assert daily.next_tick(at("2024-03-30T12:00")) == at("2024-03-31T01:00")  # at 03:00 CEST
    assert daily.next_tick(at("2024-03-31T01:00")) == at("2024-04-01T00:30")
    assert daily.last_tick(at("2024-03-31T01:30")) == at("2024-03-31T01:00")
    half_hourly = one_schedule(cron="*/30 * * * *", tz="Europe/Berlin")
    ticks = [at("2024-03-30T23:00")]
    for _ in range(5):
        ticks.append(half_hourly.next_tick(ticks[-1]))
    assert [t.strftime("%H:%M") for t in ticks] == ["23:00", "23:30", "00:00", "00:30",
                                                    "01:00", "01:30"]


def test_cron_through_the_fall_back_in_berlin() -> None:
    # 2024-10-27: 03:00 CEST becomes 02:00 CET (01:00Z); 02:00-02:59 happens twice.
    daily = one_schedule(cron="30 2 * * *", tz="Europe/Berlin")
    assert daily.next_tick(at("2024-10-26T12:00")) == at("2024-10-27T00:30")  # once, CEST
    assert daily.next_tick(at("2024-10-27T00:30")) == at("2024-10-28T01:30")  # not at 01:30Z
    # Inside the repeated hour (02:15 CET, after the 02:30 CEST tick): the tick that passed
    # is the latest, and the next is tomorrow's.
    assert daily.last_tick(at("2024-10-27T01:15")) == at("2024-10-27T00:30")
    assert daily.next_tick(at("2024-10-27T01:15")) == at("2024-10-28T01:30")
    hourly = one_schedule(cron="0 * * * *", tz="Europe/Berlin")
    ticks = [at("2024-10-26T23:30")]
    for _ in range(4):
        ticks.append(hourly.next_tick(ticks[-1]))
    assert [t.strftime("%H:%M") for t in ticks[1:]] == ["00:00", "01:00", "02:00", "03:00"]


@pytest.mark.parametrize("cron", ["30 2 * * *", "*/30 * * * *", "0 * * * *", "15 1-3 * * *",
                                  "0 8 * * 1-5", "*/7 2 * * *"])
@pytest.mark.parametrize("day", ["2024-03-30T20:00", "2024-10-26T20:00"])
def test_last_and_next_tick_agree_around_both_transitions(cron: str, day: str) -> None:
    s = one_schedule(cron=cron, tz="Europe/Berlin")
    when = at(day)
    for _ in range(8 * 60 // 7 * 2):  # 16 hours in steps of 7 minutes 13 seconds
        last, following = s.last_tick(when), s.next_tick(when)
        assert last is not None and last <= when < following, (cron, when)
        assert s.next_tick(last) == following, (cron, when)
        when += timedelta(minutes=7, seconds=13)


def test_keys_name_the_tick_in_utc_and_fit_the_key_cap() -> None:
    s = one_schedule(every=0.25, name="n" * 150)
    tick = s.next_tick(at("2024-01-01T00:00:00.1"))
    key = s.key(tick)
    assert key == f"{KEY_PREFIX}{'n' * 150}:2024-01-01T00:00:00.250000+00:00"
    assert len(key) <= 255
    assert tick_of(key) == tick


def test_refused_declarations() -> None:
    app = new_app()

    @app.task(name="job")
    def job(team: str, n: int = 1) -> None: ...

    bad: list[dict[str, Any]] = [
        {}, {"cron": "* * * * *", "every": 5}, {"every": 0}, {"every": -1},
        {"every": "5"}, {"every": timedelta(0)}, {"cron": "61 * * * *"}, {"cron": "* * *"},
        {"cron": "0 0 30 2 *"}, {"cron": 5}, {"every": 5, "tz": "Mars/Olympus"},
        {"every": 5, "tz": "../etc/passwd"}, {"every": 5, "catch_up": -1},
        {"every": 5, "name": "n" * 151}, {"every": 5, "name": ""},
    ]
    for options in bad:
        with pytest.raises(leaseq.ConfigurationError):
            app.schedule(job, kwargs={"team": "ops"}, **options)
    for kwargs in [None, {}, {"nope": 1}, {"team": "ops", "nope": 1}, {"n": 2}]:
        with pytest.raises(leaseq.ConfigurationError, match="kwargs"):
            app.schedule(job, every=5, kwargs=kwargs)
    app.schedule(job, every=5, kwargs={"team": "ops"})
    with pytest.raises(leaseq.ConfigurationError, match="already"):
        app.schedule(job, cron="* * * * *", kwargs={"team": "dev"})
    app.schedule(job, cron="* * * * *", kwargs={"team": "dev"}, name="second")
    assert list(app.schedules) == ["job", "second"]
    with pytest.raises(TypeError):
        app.schedules["x"] = app.schedules["job"]  # type: ignore[index]

    def plain() -> None: ...

    with pytest.raises(leaseq.ConfigurationError, match=r"above @app\.task"):
        app.periodic(every=5)(plain)  # type: ignore[arg-type]
    other = new_app()
    with pytest.raises(leaseq.ConfigurationError, match="of this app"):
        other.schedule(job, every=5, kwargs={"team": "ops"})


def test_periodic_returns_the_task_and_declares_under_its_name() -> None:
    app = new_app()

    @app.periodic(cron="*/5 * * * *", tz="Europe/Berlin", kwargs={"n": 3}, catch_up=60)
    @app.task(queue="reports", name="refresh")
    def refresh(n: int) -> int:
        return n

    assert isinstance(refresh, leaseq.Task)
    assert refresh(n=4) == 4
    s = app.schedules["refresh"]
    assert (s.task, s.cron, s.tz, dict(s.kwargs), s.catch_up) == (
        refresh, "*/5 * * * *", "Europe/Berlin", {"n": 3}, timedelta(seconds=60))


# -- the scheduler in a worker, per backend ---------------------------------------------------


def scheduled_jobs(q: leaseq.Queue, kind: str) -> list[leaseq.JobInfo]:
    jobs: list[leaseq.JobInfo] = []
    while page := q.jobs(kind=kind, after=jobs[-1].id if jobs else 0, limit=500):
        jobs.extend(page)
    return jobs


def test_ticks_enqueue_jobs_that_run(q: leaseq.Queue, url: str, prefix: str) -> None:
    app = new_app(url, prefix)
    seen: list[tuple[str, str | None]] = []

    @app.periodic(every=0.5, kwargs={"label": "x"})
    @app.task(queue="sched", name="tick", tags=["cron"])
    def tick(label: str) -> None:
        ctx = leaseq.current_job()
        seen.append((label, ctx.job.unique_key if ctx else None))

    with running(app):
        wait_for(lambda: len(seen) >= 3, timeout=15, message="three ticks run")
    jobs = scheduled_jobs(q, "tick")
    keys = [job.unique_key for job in jobs]
    assert len(keys) == len(set(keys)) >= 3
    ticks = sorted(tick_of(key) for key in keys)
    assert all(b - a == timedelta(seconds=0.5) for a, b in itertools.pairwise(ticks))
    assert all(job.payload == {"label": "x"} and job.queue == "sched" for job in jobs)
    assert {job.tags for job in jobs} == {("cron",)}  # the task's tags, as any enqueue
    assert {label for label, _ in seen} == {"x"}


def seconds_to_next_hour() -> float:
    now = datetime.now(UTC)
    return 3600 - (now.minute * 60 + now.second + now.microsecond / 1e6)


def test_catch_up_enqueues_the_missed_tick_once(q: leaseq.Queue, url: str, prefix: str) -> None:
    # Not within a few seconds of an hourly tick, so the latest tick cannot change under us.
    wait_for(lambda: 5 < seconds_to_next_hour() < 3590, timeout=15, message="mid-hour")
    app = new_app(url, prefix)
    runs: list[int] = []

    @app.periodic(every=3600, catch_up=timedelta(hours=2))
    @app.task(queue="sched", name="hourly")
    def hourly() -> None:
        runs.append(1)

    schedule = app.schedules["hourly"]
    missed = schedule.last_tick(datetime.now(UTC))
    assert missed is not None
    with running(app):
        wait_for(lambda: runs, timeout=15, message="the missed tick run")
    # Start-up again, twice, as restarted workers would: the key keeps it at one job.
    for _ in range(2):
        async def start_up() -> bool:
            async with leaseq.connect_async(url, table_prefix=prefix) as aq:
                return await Scheduler(app, aq).start_up()

        assert asyncio.run(start_up())
    jobs = scheduled_jobs(q, "hourly")
    assert [job.unique_key for job in jobs] == [schedule.key(missed)]
    assert jobs[0].state == "completed"
    assert runs == [1]


def test_missed_ticks_are_skipped_and_logged_by_default(
    q: leaseq.Queue, url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="leaseq.scheduler")
    app = new_app(url, prefix)

    @app.periodic(every=3600)
    @app.task(queue="sched", name="hourly")
    def hourly() -> None: ...

    with running(app):
        record = wait_for(lambda: next((r for r in caplog.records
                                        if "is skipped" in r.getMessage()), None),
                          timeout=15, message="the skip logged")
    assert record.levelno == logging.INFO and "hourly" in record.getMessage()
    assert scheduled_jobs(q, "hourly") == []


class Clock:
    """A hand-moved clock for the scheduler."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_a_late_wake_enqueues_only_the_latest_tick_and_logs_the_rest(
    q: leaseq.Queue, url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = new_app(url, prefix)

    @app.periodic(every=10)
    @app.task(queue="sched", name="ten")
    def ten() -> None: ...

    clock = Clock(at("2024-01-01T00:00:05"))

    async def scenario() -> None:
        async with leaseq.connect_async(url, table_prefix=prefix) as aq:
            scheduler = Scheduler(app, aq, clock=clock)
            assert await scheduler.start_up()  # 00:00:00 is missed: skipped
            clock.now = at("2024-01-01T00:00:10.01")
            assert await scheduler.run_once()
            clock.now = at("2024-01-01T00:00:52")  # slept through 20, 30, 40
            assert await scheduler.run_once()
            assert await scheduler.run_once()  # nothing new is due

    with caplog.at_level(logging.INFO, logger="leaseq.scheduler"):
        asyncio.run(scenario())
    ticks = [tick_of(job.unique_key) for job in scheduled_jobs(q, "ten")]
    assert ticks == [at("2024-01-01T00:00:10"), at("2024-01-01T00:00:50")]
    late = [r.getMessage() for r in caplog.records if "woke late" in r.getMessage()]
    assert len(late) == 1 and "skipping 3 tick(s)" in late[0]


def test_a_failed_enqueue_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/late-schema.db"
    app = new_app(url)

    @app.periodic(every=10)
    @app.task(queue="sched", name="ten")
    def ten() -> None: ...

    clock = Clock(at("2024-01-01T00:00:10.5"))

    async def scenario() -> None:
        async with leaseq.connect_async(url) as aq:
            scheduler = Scheduler(app, aq, clock=clock)
            scheduler.handled["ten"] = at("2024-01-01T00:00:00")
            assert not await scheduler.run_once()  # no tables yet: refused, logged
            await aq.migrate()
            clock.now = at("2024-01-01T00:00:11.5")
            assert await scheduler.run_once()

    with caplog.at_level(logging.WARNING, logger="leaseq.scheduler"):
        asyncio.run(scenario())
    assert any("will retry" in r.getMessage() for r in caplog.records)
    with leaseq.connect(url) as q:
        assert [tick_of(j.unique_key) for j in q.jobs(kind="ten")] == [at("2024-01-01T00:00:10")]


# -- the done-check: three worker processes --------------------------------------------------


WORKER = ("tests._schedule_app:app", "--concurrency", "2", "--grace", "10",
          "--poll-interval", "0.1", "--log-level", "INFO")


@pytest.fixture(params=["sqlite", "postgres", "mysql", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkerFleet]:
    require(request.param)
    workers = WorkerFleet(request.param, tmp_path)
    try:
        yield workers
    finally:
        workers.close()


def test_every_second_on_three_worker_processes_enqueues_each_tick_once(
    fleet: WorkerFleet,
) -> None:
    for _ in range(3):
        fleet.start(*WORKER)
    wait_for(lambda: all(" started: " in fleet.output(n) for n in range(3)),
             timeout=60, interval=0.05, message="three workers up")
    begin = datetime.now(UTC)
    time.sleep(6.5)  # the run window is the check itself, not a wait for a condition
    end = datetime.now(UTC)
    for proc in fleet.procs:
        proc.send_signal(signal.SIGTERM)
    for n, proc in enumerate(fleet.procs):
        assert proc.wait(30) == 0, fleet.output(n)

    jobs = scheduled_jobs(fleet.q, "beat")
    keys = [job.unique_key for job in jobs]
    assert len(keys) == len(set(keys)), "a tick was enqueued twice"
    ticks = sorted(tick_of(key) for key in keys)
    window = [t for t in ticks if begin <= t <= end]
    assert 5 <= len(window) <= 7, (begin, end, ticks)
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(window)), window
    runs = [run["key"] for run in fleet.events()]
    assert len(runs) == len(set(runs)), "a tick ran twice"
    ran = {tick_of(key) for key in runs}
    assert all(t in ran for t in window if t <= end - timedelta(seconds=1)), (window, ran)
    # Every process ran the scheduler (no leader), yet no tick was enqueued twice.
    schedulers = {n for n in range(3) if "scheduler started" in fleet.output(n)}
    assert schedulers == {0, 1, 2}


# -- leaseq schedules --------------------------------------------------------------------------


def test_cli_lists_schedules_with_next_runs() -> None:
    before = datetime.now(UTC)
    result = CliRunner().invoke(cli, ["schedules", "tests._schedule_app:app", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert set(rows) == {"every-second", "weekday-report"}
    beat, report = rows["every-second"], rows["weekday-report"]
    assert (beat["task"], beat["queue"], beat["every"], beat["cron"], beat["tz"]) == (
        "beat", "sched", 1.0, None, "UTC")
    assert (report["task"], report["queue"], report["cron"], report["kwargs"]) == (
        "send_report", "reports", "0 8 * * 1-5", {"team": "ops"})
    local = datetime.fromisoformat(report["next_run"])
    assert local.hour == 8 and local.weekday() < 5
    assert local == datetime.fromisoformat(report["next_run_utc"]) > before

    done = subprocess.run([sys.executable, "-m", "leaseq.cli", "schedules",
                           "tests._schedule_app:app"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "weekday-report" in done.stdout and "cron 0 8 * * 1-5" in done.stdout
    assert "every 1s" in done.stdout and "Europe/Berlin" in done.stdout

    bad = CliRunner().invoke(cli, ["schedules", "tests._worker_app:nothing"])
    assert bad.exit_code != 0
