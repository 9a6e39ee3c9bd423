"""The ``leaseq`` command line: thin, it parses arguments, calls the public API, renders.

Exit codes scripts can trust: 0 success, 1 a leaseq error (bad input, bad state), 2 bad
usage, 3 the database is unreachable or refused us, 4 no such job, 130 interrupted; and
from ``leaseq worker``: 69 the database stayed unreachable for ``--start-timeout``, 78
the worker cannot run as configured (bad URL or credentials, unknown database, tables
missing or older than this leaseq: run ``leaseq migrate``), which ``--processes`` does
not restart.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import click

import leaseq
from leaseq._core.url import DEFAULT_URL, URL_ENV, resolve_url
from leaseq.backends import DDL_DIALECTS
from leaseq.cli.dashboard import dashboard as dashboard_command
from leaseq.cli.schedules import schedules as schedules_command

F = TypeVar("F", bound=Callable[..., Any])
STATES = ("scheduled", "available", "running", "dead", "completed", "cancelled", "discarded")

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


# rich is imported by the commands that draw, not at start-up: `leaseq worker` never
# draws, and the import is a tenth of the time before a worker takes its first job.
@functools.cache
def console() -> Console:
    """The terminal the commands draw on."""
    from rich.console import Console

    return Console()


def new_table(**kwargs: Any) -> Table:
    from rich.table import Table

    return Table(**kwargs)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(leaseq.__version__, prog_name="leaseq")
def cli() -> None:
    """leaseq: a durable job queue in the database you already run.

    The database: --url, else LEASEQ_URL, else sqlite:///leaseq.db; `leaseq worker` runs
    on its app's URL, which only --url overrides (LEASEQ_URL fills in only when the app
    names none). Exit codes: 0 ok, 1 leaseq error, 2 bad usage, 3 database unavailable,
    4 no such job; worker: 69 database unreachable past --start-timeout, 78 cannot run
    as configured (the --processes supervisor does not restart it).
    """


def url_option(default: str = DEFAULT_URL, help_text: str = "Database URL.") -> Callable[[F], F]:
    """``--url``, resolved by leaseq's one rule (``leaseq._core.url``): the option, else
    ``LEASEQ_URL``, else ``default``. Commands get the resolved URL."""
    return click.option(
        "--url", default=None, show_default=f"{URL_ENV}, else {default}", help=help_text,
        callback=lambda ctx, param, value: resolve_url(override=value, default=default))


def database(f: F) -> F:
    """--url and --table-prefix, shared by every command that talks to a database."""
    f = click.option("--table-prefix", default="leaseq_", show_default=True,
                     help="Prefix of leaseq's table names.")(f)
    f = url_option()(f)
    return f


def as_json(f: F) -> F:
    return click.option("--json", "json_out", is_flag=True, help="Print JSON for scripts.")(f)


def connect(url: str, table_prefix: str) -> leaseq.Queue:
    return leaseq.connect(url, table_prefix=table_prefix)


def emit(data: Any) -> None:
    click.echo(dumps(data))


def dumps(value: Any) -> str:
    """``value`` as JSON; a stored value nested too deep for ``json`` to write again
    (stored by SQL or an older version: design §52) as a note, not a traceback."""
    try:
        return json.dumps(value, default=_jsonable, ensure_ascii=False)
    except RecursionError:
        return json.dumps({"undecodable": "nested too deep to show"})


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, leaseq.Undecodable):  # a stored value that does not decode
        return {"undecodable": value.reason, "preview": value.preview}
    raise TypeError(type(value).__name__)


def duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d`` → seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration like 90s, 15m, 12h or 7d")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]


# -- schema ----------------------------------------------------------------------------------


@cli.command()
@database
@as_json
def migrate(url: str, table_prefix: str, json_out: bool) -> None:
    """Create or upgrade leaseq's tables (idempotent) and say which migrations ran."""
    from leaseq._core.redact import redact_url

    with connect(url, table_prefix) as q:
        applied = q.migrate()
    if json_out:
        emit({"applied": applied, "created": migrated_from_scratch(applied)})
        return
    click.echo(migrate_text(applied, redact_url(url)))


def migrated_from_scratch(applied: list[str]) -> bool:
    return bool(applied) and applied[0].startswith("0001_")


def migrate_text(applied: list[str], where: str) -> str:
    """What ``leaseq migrate`` did, in words: created, upgraded, or nothing to do."""
    if migrated_from_scratch(applied):
        return (f"created leaseq's schema at {where}: {plural(len(applied), 'migration')} "
                f"applied ({applied[0]} to {applied[-1]})")
    if applied:
        return (f"upgraded leaseq's schema at {where}: applied {', '.join(applied)}")
    return f"schema at {where} was already up to date: nothing to apply"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 job``, ``2 jobs``; ``nouns`` where adding an s is wrong."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


@cli.command()
@click.option("--dialect", type=click.Choice(DDL_DIALECTS), required=True)
@click.option("--table-prefix", default="leaseq_", show_default=True)
def schema(dialect: str, table_prefix: str) -> None:
    """Print the DDL, for teams that own their migrations (with the SQL enqueue
    function or procedure on postgres and mysql)."""
    from leaseq.backends import ddl

    leaseq.Settings(table_prefix=table_prefix)  # validates the prefix
    click.echo(ddl(dialect, table_prefix))


# -- jobs ------------------------------------------------------------------------------------


@cli.command()
@click.argument("queue")
@click.argument("payload", default="null")
@click.option("--kind", help="Task name the worker routes on. Without it no App task runs "
                             "the job (it is for your own dequeue loop).")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--delay", type=duration, default="0", help="Run after this long (90s, 5m).")
@click.option("--unique-key", help="At most one live job per queue and key.")
@click.option("--max-attempts", type=int)
@click.option("--tag", "tags", multiple=True,
              help="A tag to find the job by (leaseq jobs --tag); repeat for more.")
@database
@as_json
def enqueue(queue: str, payload: str, kind: str | None, priority: int, delay: float,
            unique_key: str | None, max_attempts: int | None, tags: tuple[str, ...],
            url: str, table_prefix: str, json_out: bool) -> None:
    """Add a job to QUEUE with a JSON PAYLOAD (default null)."""
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"PAYLOAD is not JSON: {exc}") from exc
    with connect(url, table_prefix) as q:
        r = q.enqueue(queue, data, kind=kind, priority=priority, delay=delay,
                      unique_key=unique_key, max_attempts=max_attempts, tags=list(tags))
    if json_out:
        emit({"id": r.id, "created": r.created})
    else:
        click.echo(f"job {r.id} {'enqueued' if r.created else 'already queued (unique key)'}")
    if kind is None:  # on stderr: --json output stays one object
        click.echo("note: no --kind, so no App task matches this job: a leaseq worker hands "
                   "it back (every 60 s by default) and buries it after unknown_task_grace "
                   "(1 h); give --kind TASK for a worker to run it", err=True)


COUNTS = ("available", "scheduled", "running", "dead", "completed", "cancelled", "discarded")


def age_text(seconds: float | None) -> str:
    """How long the oldest due job has waited, in the largest fitting unit."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def stats_table(stats: dict[str, leaseq.QueueStats]) -> Table:
    table = new_table(title="leaseq queues")
    table.add_column("queue")
    for column in COUNTS:
        table.add_column(column, justify="right")
    table.add_column("oldest due", justify="right")
    for s in stats.values():
        table.add_row(paused_name(s), *(str(getattr(s, c)) for c in COUNTS),
                      age_text(s.oldest_available_age))
    if not stats:
        table.add_row("(no queues yet)", *("" for _ in COUNTS), "")
    else:
        ages = [s.oldest_available_age for s in stats.values()
                if s.oldest_available_age is not None]
        table.add_section()
        table.add_row("total",
                      *(str(sum(getattr(s, c) for s in stats.values())) for c in COUNTS),
                      age_text(max(ages) if ages else None), style="bold")
    return table


@cli.command()
@click.option("--watch", type=float, metavar="SECONDS", help="Refresh every SECONDS.")
@database
@as_json
def stats(watch: float | None, url: str, table_prefix: str, json_out: bool) -> None:
    """Job counts per queue and state."""
    with connect(url, table_prefix) as q:
        if json_out:
            emit([s.as_dict() for s in q.stats().values()])
        elif watch:
            from rich.live import Live

            with Live(stats_table(q.stats()), console=console(), auto_refresh=False) as live:
                while True:
                    time.sleep(watch)
                    live.update(stats_table(q.stats()), refresh=True)
        else:
            console().print(stats_table(q.stats()))


def info_dict(j: leaseq.JobInfo) -> dict[str, Any]:
    return {k: getattr(j, k) for k in j.__dataclass_fields__}


@cli.command()
@click.option("--queue")
@click.option("--state", type=click.Choice(STATES))
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--after", type=click.IntRange(0), default=0, help="Show jobs with id > AFTER.")
@click.option("--kind", help="Only jobs of this task name.")
@click.option("--unique-key", help="Only jobs with this unique key.")
@click.option("--tag", help="Only jobs carrying this tag (enqueue(tags=[...])).")
@database
@as_json
def jobs(queue: str | None, state: str | None, limit: int, after: int, kind: str | None,
         unique_key: str | None, tag: str | None, url: str, table_prefix: str,
         json_out: bool) -> None:
    """List jobs, live and finished, in id order; page with --after <last id>."""
    with connect(url, table_prefix) as q:
        found = q.jobs(queue, state=state, limit=limit, after=after,  # type: ignore[arg-type]
                       kind=kind, unique_key=unique_key, tag=tag)
    if json_out:
        emit([info_dict(j) for j in found])
        return
    table = new_table()
    for column in ("id", "queue", "kind", "tags", "state", "attempts", "error"):
        table.add_column(column)
    for j in found:
        table.add_row(str(j.id), j.queue, j.kind or "", " ".join(j.tags), j.state,
                      f"{j.attempts}/{j.max_attempts}", j.error_line or "")
    console().print(table)
    if len(found) == limit:
        click.echo(f"more: --after {found[-1].id}")


@cli.command()
@click.argument("job_id", type=int)
@database
@as_json
def get(job_id: int, url: str, table_prefix: str, json_out: bool) -> None:
    """Show one job, live or finished."""
    with connect(url, table_prefix) as q:
        j = q.get(job_id)
    if json_out:
        emit(info_dict(j))
        return
    # The error shows as its line, its detail without tracebacks, and the traceback once,
    # at the end (``--json`` keeps every field as stored).
    trace = traceback_of(j)
    for key, value in info_dict(j).items():
        if key == "error_line":
            continue
        if key == "error":
            value = j.error_line
        elif key == "error_detail":
            value = dumps(without_tracebacks(value))
        elif key in ("payload", "result"):
            value = dumps(value)
        click.echo(f"{key:>16}: {value}")
    if trace:
        label = "traceback" if "Traceback (most recent call last)" in trace else "full error"
        click.echo(f"{label:>16}:")
        click.echo(trace.rstrip())


def traceback_of(j: leaseq.JobInfo) -> str | None:
    """The job's traceback (or its error's full text when that is more than its line):
    the detail's, else the last real error's under a discard's ``"previous"``."""
    stored = j.error_detail if isinstance(j.error_detail, dict) else {}
    for detail in (stored, stored.get("previous")):
        if isinstance(detail, dict) and isinstance(detail.get("traceback"), str):
            return str(detail["traceback"])
    if j.error and j.error.strip() != j.error_line:
        return j.error
    return None


def without_tracebacks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_tracebacks(v) for k, v in value.items() if k != "traceback"}
    return value


@cli.command()
@click.argument("queue")
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
@database
@as_json
def kick(queue: str, limit: int, url: str, table_prefix: str, json_out: bool) -> None:
    """Make up to LIMIT dead jobs of QUEUE available again."""
    with connect(url, table_prefix) as q, console().status(f"kicking dead jobs of {queue}"):
        n = q.kick(queue, limit=limit)
    if json_out:
        emit({"queue": queue, "kicked": n})
    else:
        click.echo(f"{plural(n, 'job')} kicked")


def job_verb(name: str, help_text: str, call: Callable[[leaseq.Queue, int], Any]) -> None:
    @cli.command(name=name, help=help_text)
    @click.argument("job_id", type=int)
    @database
    @as_json
    def command(job_id: int, url: str, table_prefix: str, json_out: bool) -> None:
        with connect(url, table_prefix) as q:
            state = call(q, job_id)
        if json_out:
            emit({"id": job_id, "state": state})
        else:
            click.echo(f"job {job_id}: {state}")


def _retry(q: leaseq.Queue, job_id: int) -> str:
    q.retry(job_id)
    return "available"


def _discard(q: leaseq.Queue, job_id: int) -> str:
    q.discard(job_id, reason="discarded from the CLI")
    return "discarded"


job_verb("retry", "Make a dead or scheduled job available now.", _retry)
job_verb("discard", "Move a dead or waiting job to history as discarded.", _discard)
job_verb("cancel", "Cancel a job (a running one is flagged for its worker).",
         lambda q, job_id: q.cancel(job_id))


def pause_end(text: str) -> float | datetime:
    """``--until``: a duration from now (``90``, ``30s``, ``15m``, ``12h``, ``7d``) or an
    ISO 8601 time with its offset (``2026-12-01T09:00:00Z``, ``...+01:00``)."""
    if re.fullmatch(r"\s*\d+(?:\.\d+)?\s*[smhd]?\s*", text):
        return duration(text)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a duration like 30s, 15m, 12h, 7d "
                                 "nor an ISO time like 2026-12-01T09:00:00Z") from None
    if when.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no timezone: add Z (UTC) or an offset "
                                 "such as +01:00")
    return when


def until_text(when: datetime) -> str:
    """A pause's end as the commands print it: UTC, to the second."""
    return when.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def paused_name(s: leaseq.QueueStats) -> str:
    """A queue's name as the tables show it, with its pause."""
    if s.paused_until is not None:
        return f"{s.queue} (paused until {until_text(s.paused_until)})"
    return f"{s.queue} (paused)" if s.paused else s.queue


@cli.command()
@click.argument("queue")
@click.option("--until", "until", type=pause_end, default=None, metavar="WHEN",
              help="End the pause by itself then: a duration from now (30s, 15m, 12h, 7d) "
                   "or an ISO time with its offset (2026-12-01T09:00:00Z). Default: until "
                   "resume.")
@database
@as_json
def pause(queue: str, until: float | datetime | None, url: str, table_prefix: str,
          json_out: bool) -> None:
    """Stop every worker from taking jobs of QUEUE (until --until, or resume)."""
    with connect(url, table_prefix) as q:
        q.pause(queue, until=until)
    # The end as given: the database keeps the exact one (`leaseq stats` shows it), and
    # reading it back would cost a count of every queue's jobs.
    shown: dict[str, Any] = {"queue": queue, "paused": True}
    if isinstance(until, datetime):
        shown["paused_until"] = until_text(until)
    elif until is not None:
        shown["paused_for"] = until
    if json_out:
        emit(shown)
    elif isinstance(until, datetime):
        click.echo(f"queue {queue} paused until {until_text(until)}")
    elif until is not None:
        click.echo(f"queue {queue} paused for {until:g} s")
    else:
        click.echo(f"queue {queue} paused")


@cli.command()
@click.argument("queue")
@database
@as_json
def resume(queue: str, url: str, table_prefix: str, json_out: bool) -> None:
    """Let workers take jobs of a paused QUEUE again (either kind of pause)."""
    with connect(url, table_prefix) as q:
        q.resume(queue)
    if json_out:
        emit({"queue": queue, "paused": False})
    else:
        click.echo(f"queue {queue} resumed")


# -- queue settings --------------------------------------------------------------------------

SETTING_HELP = {
    "max_attempts": "Attempts for jobs enqueued without max_attempts.",
    "base_backoff": "Retry delay after the first failure (90s, 5m).",
    "max_backoff": "Cap of the retry delay.",
    "jitter": "Relative spread of retry delays, 0 <= jitter < 1.",
    "default_lease": "Lease of jobs dequeued without one that have none of their own.",
    "max_lease": "Cap on every lease and heartbeat extension.",
    "max_jobs": "Most live jobs; enqueues beyond it fail with QueueFull.",
    "max_touches": "Most heartbeats that extend one lease.",
    "max_touch_duration": "No heartbeat extends a lease older than this.",
    "min_touch_interval": "Heartbeats sooner than this after the last one write nothing.",
    "dead_retention": "Dead jobs older than this are discarded to history by reclaim.",
    "concurrency_limit": "Most jobs of the queue running at once, over every worker.",
    "rate_per_sec": "Most job starts per second, over every worker (a token bucket).",
    "rate_burst": "Starts the rate limit allows at once after a quiet spell (default 1).",
    "max_snoozes": "Most RetryAfter snoozes of a job; the next one sends it dead.",
}
INTEGER_SETTINGS = ("max_attempts", "max_jobs", "max_touches", "concurrency_limit",
                    "rate_burst", "max_snoozes")


def setting_value(name: str) -> Callable[[str], float | None]:
    """Parses one setting's command-line value: a number (or duration), or ``none`` to
    reset it to the default."""

    def parse(text: str) -> float | None:
        if text.strip().lower() in ("none", "default"):
            return None
        if name in INTEGER_SETTINGS:
            try:
                return int(text)
            except ValueError:
                raise click.BadParameter(f"{text!r} is not a whole number (or none)") from None
        if name in ("jitter", "rate_per_sec"):
            try:
                return float(text)
            except ValueError:
                raise click.BadParameter(f"{text!r} is not a number (or none)") from None
        return duration(text)

    return parse


def config_row(config: leaseq.QueueConfig) -> list[str]:
    return ["-" if getattr(config, n) is None else f"{getattr(config, n):g}" for n in SETTINGS]


SETTINGS = tuple(SETTING_HELP)


@cli.command()
@database
@as_json
def queues(url: str, table_prefix: str, json_out: bool) -> None:
    """Every queue with its settings and counts ("-": the default)."""
    with connect(url, table_prefix) as q:
        stats, configs = q.stats(), q.queue_configs()
    names = sorted(set(stats) | set(configs))
    if json_out:
        emit([{**(configs.get(n) or leaseq.QueueConfig(n)).as_dict(),
               **(stats.get(n) or leaseq.QueueStats(n)).as_dict()} for n in names])
        return
    table = new_table(title="leaseq queues and settings")
    for column in ("queue", "waiting", "running", "dead", "oldest due"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    table.add_column("settings (others default)")
    for n in names:
        s, c = stats.get(n) or leaseq.QueueStats(n), configs.get(n) or leaseq.QueueConfig(n)
        changed = " ".join(f"{k}={v}" for k, v in zip(SETTINGS, config_row(c), strict=True)
                           if v != "-")
        table.add_row(paused_name(s), str(s.available + s.scheduled),
                      str(s.running), str(s.dead), age_text(s.oldest_available_age),
                      changed or "-")
    if not names:
        table.add_row("(no queues yet)", "", "", "", "", "")
    console().print(table)


@cli.group()
def queue() -> None:
    """Show or change one queue's settings (stored in the database)."""


def show_config(config: leaseq.QueueConfig, json_out: bool,
                counts: dict[int, int] | None = None) -> None:
    """A queue's settings; with ``counts`` (``priority_counts``) its due jobs per
    priority too (JSON: ``available_by_priority``, keys as text)."""
    if json_out:
        shown: dict[str, Any] = config.as_dict()
        if counts is not None:
            shown["available_by_priority"] = {str(p): n for p, n in counts.items()}
        emit(shown)
        return
    click.echo(f"queue {config.queue}")
    for name, value in zip(SETTINGS, config_row(config), strict=True):
        click.echo(f"{name:>20}: {value if value != '-' else '- (default)'}")
    if counts is not None:
        click.echo("available by priority" + ("" if counts else ": none"))
        for priority, n in counts.items():
            click.echo(f"{priority:>20}: {n}")


@queue.command(name="show")
@click.argument("name")
@database
@as_json
def queue_show(name: str, url: str, table_prefix: str, json_out: bool) -> None:
    """Show the settings of queue NAME and its available jobs per priority."""
    with connect(url, table_prefix) as q:
        config, counts = q.queue_config(name), q.priority_counts(name)
    show_config(config, json_out, counts)


def setting_options(f: F) -> F:
    for name in reversed(SETTINGS):
        flag = "--" + name.replace("_", "-")
        f = click.option(flag, name, type=setting_value(name), default=None, metavar="VALUE",
                         help=f"{SETTING_HELP[name]} 'none' resets it.")(f)
    return f


@queue.command(name="set")
@click.argument("name")
@setting_options
@database
@as_json
def queue_set(name: str, url: str, table_prefix: str, json_out: bool, **settings: Any) -> None:
    """Change settings of queue NAME; the others stay. Durations take 90s, 15m, 12h, 7d."""
    given = {k: v for k, v in settings.items()
             if click.get_current_context().get_parameter_source(k)
             is not click.core.ParameterSource.DEFAULT}
    if not given:
        raise click.UsageError("name at least one setting to change, e.g. --max-jobs 1000")
    with connect(url, table_prefix) as q:
        show_config(q.configure_queue(name, **given), json_out)


@cli.group()
def server() -> None:
    """Show or change the settings of the whole database (stored there)."""


def show_server(config: leaseq.ServerConfig, json_out: bool) -> None:
    if json_out:
        emit({"max_queues": config.max_queues, "queues": config.queues})
        return
    cap = "- (no cap)" if config.max_queues is None else str(config.max_queues)
    click.echo(f"{'max_queues':>12}: {cap}")
    if config.queues is not None:
        click.echo(f"{'queues':>12}: {config.queues} counted")


@server.command(name="show")
@database
@as_json
def server_show(url: str, table_prefix: str, json_out: bool) -> None:
    """Show the server settings and, under a cap, how many queues count."""
    with connect(url, table_prefix) as q:
        show_server(q.server_config(), json_out)


@server.command(name="set")
@click.option("--max-queues", "max_queues", type=setting_value("max_jobs"), default=None,
              metavar="N", help="Most queues: an enqueue into one more raises TooManyQueues "
                                "(seed 004 MaxTopics). 'none' lifts the cap.")
@database
@as_json
def server_set(max_queues: float | None, url: str, table_prefix: str, json_out: bool) -> None:
    """Change server settings; the others stay. Setting --max-queues counts the queues
    the database holds now."""
    source = click.get_current_context().get_parameter_source("max_queues")
    if source is click.core.ParameterSource.DEFAULT:
        raise click.UsageError("name a setting to change, e.g. --max-queues 100")
    with connect(url, table_prefix) as q:
        show_server(q.configure_server(max_queues=None if max_queues is None
                                       else int(max_queues)), json_out)


@cli.command()
@click.option("--older-than", type=duration, required=True, help="e.g. 7d, 12h, 3600.")
@database
@as_json
def prune(older_than: float, url: str, table_prefix: str, json_out: bool) -> None:
    """Delete finished jobs from history."""
    with connect(url, table_prefix) as q, console().status("pruning history"):
        n = q.prune(older_than=older_than)
    if json_out:
        emit({"pruned": n})
    else:
        click.echo(f"{plural(n, 'history row')} pruned")


# -- worker and demo -------------------------------------------------------------------------


def load_app(target: str) -> leaseq.App:
    """``module:attr`` (attr defaults to ``app``), importable from the current directory."""
    from leaseq.worker.supervisor import load_app as load

    return load(target, error=click.BadParameter)


def process_count(text: str | int) -> int:
    """``--processes``: a whole number >= 1, or ``auto`` for one per CPU this process may
    use."""
    if str(text).strip().lower() == "auto":
        from leaseq.worker.supervisor import cpu_count

        return cpu_count()
    try:
        number = int(str(text).strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither a whole number nor 'auto'") from None
    if number < 1:
        raise click.BadParameter(f"needs at least 1 process, got {number}")
    return number


@cli.command()
@click.argument("app_path", metavar="MODULE:APP")
@click.option("--queues", help="Comma-separated queues (default: those of the app's tasks).")
@click.option("--concurrency", type=click.IntRange(1), default=None,
              help="Jobs run at once [default: 1000 when every task on the worked queues is "
                   "async def, else 10].")
@click.option("--lease", type=float, help="Lease seconds for claimed jobs.")
@click.option("--grace", type=float, default=30.0, show_default=True,
              help="Seconds running jobs get to finish after SIGTERM.")
@click.option("--poll-interval", type=float, default=1.0, show_default=True,
              help="Longest wait between polls of empty queues.")
@click.option("--reclaim-interval", type=float, default=5.0, show_default=True,
              help="Longest pause in seconds between reclaims of expired leases. The app's "
                   "Settings.reclaim_interval caps it when shorter (1 s unless set; None "
                   "leaves it alone), so with default settings the worker reclaims every "
                   "second.")
@click.option("--prune-history-after", type=duration, default=None, metavar="DURATION",
              help="Also prune history (completed, cancelled, discarded jobs) older than "
                   "this, e.g. 7d, 12h, 3600: soon after start, then about hourly. Off by default: "
                   "history is kept until pruned.")
@click.option("--burst", is_flag=True,
              help="Exit 0 once nothing of the worked queues is due: no job is available "
                   "now (jobs held back only by a rate or concurrency limit count as due: "
                   "it waits for them) and none runs in this worker. Scheduled jobs, "
                   "retries this run scheduled for later and jobs of paused queues do not "
                   "keep it running. Exits at once when nothing is due at start.")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True,
              help="json: one JSON object per line (ts, level, logger, msg, pid and the "
                   "record's fields: event, job_id, queue, task, attempt, max_attempts, "
                   "error_type, error, next_run_at, worker_id; docs/workers.md).")
@click.option("--log-jobs", is_flag=True,
              help="Also log one INFO line per job that succeeded (failures, deaths and "
                   "unknown tasks are always logged).")
@click.option("--unknown-task-delay", type=click.FloatRange(0), default=None,
              metavar="SECONDS",
              help="A job of a task this worker does not know (or of no kind) is handed "
                   "back to run again after this long [default: the app's "
                   "unknown_task_delay, 60].")
@click.option("--unknown-task-grace", type=click.FloatRange(0), default=None,
              metavar="SECONDS",
              help="...until it has stayed unknown this long since a worker first handed "
                   "it back; then it is buried (dead) [default: the app's "
                   "unknown_task_grace, 3600; 0 buries at once].")
@click.option("--start-timeout", type=click.FloatRange(0, min_open=True), default=None,
              metavar="SECONDS",
              help="Give up (exit 69) when the database is still unreachable this long "
                   "after start [default: keep trying]. A database that answers but cannot "
                   "be used (bad URL or credentials, unknown database, tables missing or "
                   "older than this leaseq) exits 78 at once.")
@click.option("--url", help="Run on this database, not the app's (LEASEQ_URL never "
                           "overrides a URL the app names; docs/operations.md).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              envvar="LEASEQ_METRICS_PORT",
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port; "
                   "or set LEASEQ_METRICS_PORT). Off by default. Needs leaseq[metrics].")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              envvar="LEASEQ_METRICS_HOST", help="Address the metrics server listens on.")
@click.option("--processes", type=process_count, default="1", show_default=True,
              metavar="N|auto",
              help="Worker processes, each running --concurrency jobs, under a supervisor "
                   "that restarts one that crashes and stops them all gracefully on "
                   "SIGTERM/SIGINT (auto: one per CPU this process may use). More processes "
                   "pay off for CPU-bound handlers and very short jobs (docs/workers.md).")
def worker(app_path: str, queues: str | None, concurrency: int | None, lease: float | None,
           grace: float, poll_interval: float, reclaim_interval: float,
           prune_history_after: float | None, burst: bool, log_level: str, log_format: str,
           log_jobs: bool, unknown_task_delay: float | None,
           unknown_task_grace: float | None, start_timeout: float | None,
           url: str | None, metrics_port: int | None, metrics_host: str,
           processes: int) -> None:
    """Run the tasks of MODULE:APP until SIGTERM or SIGINT.

    History is kept unless --prune-history-after is given (or `leaseq prune` runs).
    --metrics-port serves the worker's metrics and the queue counts (docs/operations.md);
    with --processes, one endpoint sums every process (docs/workers.md)."""
    from leaseq.worker import logs

    if processes > 1:
        # Lines of the supervisor and of each worker process say which process wrote them.
        import multiprocessing

        multiprocessing.current_process().name = "leaseq-supervisor"
    logs.configure(log_level, log_format, processes=processes > 1)
    app = load_app(app_path)
    if url:
        app.url = url
    names = [n.strip() for n in queues.split(",") if n.strip()] if queues else None
    from leaseq.worker.supervisor import Supervisor, WorkerOptions

    options = WorkerOptions(app_path, url=url, queues=tuple(names) if names else None,
                            concurrency=concurrency, lease=lease, grace=grace,
                            poll_interval=poll_interval, reclaim_interval=reclaim_interval,
                            prune_after=prune_history_after, burst=burst, log_level=log_level,
                            log_format=log_format, log_jobs=log_jobs,
                            unknown_task_delay=unknown_task_delay,
                            unknown_task_grace=unknown_task_grace, start_timeout=start_timeout)
    if processes > 1:
        options.build(app)  # bad options (no queues to work) fail here, not in N processes
        sys.exit(Supervisor(options, processes, metrics_port=metrics_port,
                            metrics_host=metrics_host, app=app).run())
    recorder = None
    if metrics_port is not None:
        # Imported here: without --metrics-port the worker never loads prometheus-client.
        from leaseq.metrics import WorkerMetrics

        recorder = WorkerMetrics()
        # The app's own client, opened by the first scrape (not at start) and shared with
        # handlers that enqueue: no connection pool of its own.
        recorder.watch(lambda: app.queue.stats(),
                       transactions=lambda: app.queue.oldest_transaction_age())
        recorder.serve(metrics_port, metrics_host)
    sys.exit(options.build(app, metrics=recorder).run())


@cli.command()
@click.option("--url", default=None, show_default=f"{URL_ENV}, else a fresh ./leaseq-demo.db",
              help="Run on this database.",
              callback=lambda ctx, param, value: resolve_url(override=value, default="") or None)
@click.option("--jobs", "count", type=click.IntRange(20, 5000), default=300, show_default=True)
def demo(url: str | None, count: int) -> None:
    """Run a worker over a few hundred demo jobs and show where each ended."""
    from leaseq.cli.demo import run

    run(url, count, console())


@cli.command()
@url_option("sqlite:///leaseq-bench.db", "Database to measure (fresh tables, dropped after).")
@click.option("--jobs", type=click.IntRange(100), default=20_000, show_default=True)
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes for the drain.")
@click.option("--concurrency", type=click.IntRange(1), default=None,
              help="Jobs each worker runs at once [default: the worker's].")
@click.option("--seconds", type=click.FloatRange(0.5), default=10.0, show_default=True,
              help="How long to measure pickup latency.")
@as_json
def bench(url: str, jobs: int, workers: int, concurrency: int | None, seconds: float,
          json_out: bool) -> None:
    """Measure enqueue, drain and pickup latency on a database."""
    from rich.console import Console
    from rich.progress import Progress

    from leaseq.bench import run_all

    with Progress(console=Console(stderr=True), transient=True) as progress:
        bar = progress.add_task("starting", total=1)

        def report(stage: str, done: int, total: int) -> None:
            progress.update(bar, description=stage, completed=done, total=total)

        figures = run_all(url, jobs, workers, concurrency, report, seconds)
    if json_out:
        emit(figures)
        return
    table = new_table(title=f"leaseq bench on {figures['url']}")
    table.add_column("workload")
    table.add_column("result", justify="right")
    table.add_row("enqueue, one at a time", f"{figures['enqueue_single_per_s']:,} jobs/s")
    table.add_row("enqueue_many, batches of 1,000", f"{figures['enqueue_batch_per_s']:,} jobs/s")
    slots = concurrency or "default concurrency"
    table.add_row(f"drain {jobs:,} no-op jobs, {workers} worker(s) x {slots}",
                  f"{figures['drain_per_s']:,} jobs/s")
    table.add_row(f"1,000 async jobs of asyncio.sleep(1), 1 worker x {slots}",
                  f"{figures['naps_seconds']} s")
    pickup = figures["pickup_ms"]
    table.add_row("pickup latency at 200 jobs/s",
                  f"p50 {pickup['p50']} ms, p95 {pickup['p95']} ms, p99 {pickup['p99']} ms")
    console().print(table)


cli.add_command(dashboard_command)
cli.add_command(schedules_command)


def main() -> None:
    """Entry point: leaseq errors become one line on stderr and a documented exit code."""
    try:
        cli(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except leaseq.LeaseqError as exc:
        click.echo(f"leaseq: {type(exc).__name__}: {exc}", err=True)
        if isinstance(exc, leaseq.JobNotFound):
            sys.exit(4)
        sys.exit(3 if isinstance(exc, leaseq.BackendUnavailable) else 1)
