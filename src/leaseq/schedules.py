"""Periodic jobs: a ``Schedule`` says when a task's job is due (docs/schedules.md).

    @app.periodic(cron="*/5 * * * *", tz="Europe/Berlin")   # or every=30 (seconds)
    @app.task(queue="reports")
    def refresh() -> None: ...

The code lives in ``leaseq._core.schedule``, below tasks.py, which builds schedules
(``App.schedule``) and imports nothing above itself (docs/design.md §34). This module is
their public name, loaded on first use like ``leaseq.flows``: it brings cronsim.
"""

from leaseq._core.schedule import KEY_PREFIX, MAX_NAME, Schedulable, Schedule, new_schedule

__all__ = ["KEY_PREFIX", "MAX_NAME", "Schedulable", "Schedule", "new_schedule"]
