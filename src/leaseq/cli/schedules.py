"""``leaseq schedules APP``: an app's schedules and their next run times.

Reads the app's declarations only; it never connects to the database.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from leaseq.schedules import Schedule
    from leaseq.tasks import Task


@click.command()
@click.argument("app_path", metavar="MODULE:APP")
@click.option("--json", "json_out", is_flag=True, help="Print JSON for scripts.")
def schedules(app_path: str, json_out: bool) -> None:
    """List the schedules of MODULE:APP with their next run times (in their time zone and
    in UTC)."""
    from leaseq.cli import console, emit, load_app, new_table

    app = load_app(app_path)
    now = datetime.now(timezone.utc)
    rows = [describe(schedule, now) for schedule in app.schedules.values()]
    if json_out:
        emit(rows)
        return
    if not rows:
        click.echo(f"{app_path} declares no schedules")
        return
    table = new_table(title=f"schedules of {app_path}")
    for column in ("name", "task", "queue", "schedule", "tz", "next run", "next run (UTC)"):
        table.add_column(column)
    for row in rows:
        local = datetime.fromisoformat(row["next_run"])
        table.add_row(row["name"], row["task"], row["queue"],
                      f"cron {row['cron']}" if row["cron"] else f"every {row['every']:g}s",
                      row["tz"], local.strftime("%Y-%m-%d %H:%M:%S %Z"),
                      row["next_run_utc"].replace("+00:00", "Z"))
    console().print(table)


def describe(schedule: Schedule[Task[Any, Any]], now: datetime) -> dict[str, Any]:
    """One schedule as JSON-ready values, with its next run after ``now``."""
    tick = schedule.next_tick(now)
    conversion = schedule.task.conversion  # kwargs of richer types, as their jobs hold them
    kwargs = dict(schedule.kwargs)
    return {
        "name": schedule.name,
        "task": schedule.task.name,
        "queue": schedule.task.defaults.queue,
        "cron": schedule.cron,
        "every": None if schedule.every is None else schedule.every.total_seconds(),
        "tz": schedule.tz,
        "catch_up": schedule.catch_up.total_seconds(),
        "kwargs": kwargs if conversion is None else conversion.dump_arguments(kwargs),
        "next_run": tick.astimezone(schedule.zone).isoformat(),
        "next_run_utc": tick.isoformat(),
    }
