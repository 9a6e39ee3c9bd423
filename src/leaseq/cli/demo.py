"""``leaseq demo``: a few hundred jobs of every kind through a real worker, on SQLite.

The demo tasks show what a user will meet: quick jobs, async jobs, jobs with priorities on
several queues, delayed jobs, a job that fails twice and then succeeds, and a poison job
that fails every time and ends dead. A worker runs them in this process while a live
display follows the counts; the end shows the stats table and where each kind ended.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import leaseq

DEMO_FILE = "leaseq-demo.db"
PREFIX = "leaseq_demo_"
TIME_LIMIT = 50.0


def build_app(url: str) -> tuple[leaseq.App, dict[str, leaseq.Task]]:  # type: ignore[type-arg]
    app = leaseq.App(url, table_prefix=PREFIX, lease=10,
                     backoff=leaseq.Backoff(base=0.2, cap=2, jitter=0.2))

    @app.task(queue="emails", name="send_welcome")
    def send_welcome(user: str) -> str:
        time.sleep(random.uniform(0.002, 0.01))
        return f"welcomed {user}"

    @app.task(queue="reports", name="build_report")
    def build_report(n: int) -> dict[str, int]:
        time.sleep(random.uniform(0.005, 0.02))
        return {"rows": n * 10}

    @app.task(queue="emails", name="fetch_avatar")
    async def fetch_avatar(user: str) -> str:
        await asyncio.sleep(random.uniform(0.005, 0.03))
        return f"https://avatars.example/{user}.png"

    @app.task(queue="emails", name="flaky_sync", max_attempts=5)
    def flaky_sync(account: int) -> str:
        ctx = leaseq.current_job()
        if ctx is not None and ctx.job.attempts < 3:
            raise ConnectionError(f"upstream busy (attempt {ctx.job.attempts})")
        return "synced on attempt 3"

    @app.task(queue="reports", name="poison", max_attempts=3)
    def poison(n: int) -> None:
        raise ValueError(f"malformed record {n}")

    @app.task(queue="emails", name="reminder")
    def reminder(user: str) -> str:
        return f"reminded {user}"

    tasks = {t.name: t for t in (send_welcome, build_report, fetch_avatar, flaky_sync,
                                 poison, reminder)}
    return app, tasks


def enqueue_all(tasks: dict[str, leaseq.Task], count: int) -> int:  # type: ignore[type-arg]
    n = count // 10
    tasks["send_welcome"].enqueue_many([{"user": f"user{i}"} for i in range(n * 4)])
    tasks["fetch_avatar"].enqueue_many([{"user": f"user{i}"} for i in range(n * 2)])
    for i in range(n * 2):  # mixed priorities: urgent reports jump the line
        tasks["build_report"].options(priority=10 if i % 5 == 0 else 0).enqueue(n=i)
    for i in range(n):
        tasks["flaky_sync"].enqueue(account=i)
    for i in range(max(1, n // 2)):
        tasks["poison"].enqueue(n=i)
    delayed = count - n * 9 - max(1, n // 2)
    for i in range(max(1, delayed)):
        tasks["reminder"].options(delay=random.uniform(1, 4)).enqueue(user=f"user{i}")
    return n * 9 + max(1, n // 2) + max(1, delayed)


def settled(q: leaseq.Queue) -> Counter[str]:
    total: Counter[str] = Counter()
    for s in q.stats().values():
        total.update({"completed": s.completed, "dead": s.dead, "running": s.running,
                      "waiting": s.available + s.scheduled})
    return total


def run(url: str | None, count: int, console: Console) -> None:
    if url is None:
        Path(DEMO_FILE).unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            Path(DEMO_FILE + suffix).unlink(missing_ok=True)
        url = f"sqlite:///{DEMO_FILE}"
    app, tasks = build_app(url)
    app.migrate()
    q = app.queue
    for job in q.jobs(limit=10_000):  # a previous demo run on the same --url database
        if job.state in ("available", "scheduled", "dead"):
            q.cancel(job.id)
    q.prune(older_than=0)

    console.print(f"[bold]leaseq demo[/] on {url.split('@')[-1]}: tasks {', '.join(tasks)}")
    total = enqueue_all(tasks, count)
    worker = leaseq.Worker(app, concurrency=8, poll_interval=0.1, reclaim_interval=1)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run_async()), daemon=True)
    thread.start()

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console)
    bar = progress.add_task("jobs finished", total=total, detail="")
    deadline = time.monotonic() + TIME_LIMIT
    try:
        with Live(progress, console=console, refresh_per_second=10):
            while time.monotonic() < deadline:
                c = settled(q)
                done = c["completed"] + c["dead"]
                detail = (f"completed {c['completed']}  dead {c['dead']}  running "
                          f"{c['running']}  waiting {c['waiting']}")
                progress.update(bar, completed=done, detail=detail)
                if done >= total:
                    break
                time.sleep(0.1)
    finally:
        worker.stop()
        thread.join(15)

    from leaseq.cli import stats_table

    console.print(stats_table(q.stats()))
    ended: Counter[tuple[str, str]] = Counter()
    after = 0
    while page := q.jobs(limit=1000, after=after):
        ended.update((j.kind or "-", j.state) for j in page)
        after = page[-1].id
    table = Table(title="where each kind of job ended")
    for column in ("task", "state", "jobs"):
        table.add_column(column)
    for (kind, state), n in sorted(ended.items()):
        table.add_row(kind, state, str(n))
    console.print(table)
    dead = q.jobs(state="dead", limit=1)
    if dead:
        console.print(f"dead jobs keep their last error, e.g. job {dead[0].id}: "
                      f"[italic]{dead[0].error_line or ''}[/]. Try: leaseq get {dead[0].id} --url "
                      f"{url} --table-prefix {PREFIX}, or leaseq kick reports ...")
    app.close()
