"""What the worker tells its operator: the log lines of its jobs and the two formats.

Loggers (stdlib ``logging``): ``leaseq.worker`` for the worker's own life (start, stop,
the database going away) and ``leaseq.worker.jobs`` for its jobs: a failed attempt at
WARNING, a job going dead at ERROR with the user's traceback, a job of an unknown task
handed back at WARNING, and with ``log_jobs`` one INFO line per job that succeeded.
Each record carries its fields as attributes (``extra=``): ``event``, ``job_id``,
``queue``, ``task``, ``attempt``, ``max_attempts``, ``error_type``, ``error``,
``next_run_at``, ``worker_id`` and, for a dead job, ``traceback``. ``JsonFormatter``
writes them as one JSON object a line (``leaseq worker --log-format json``);
``TextFormatter`` writes the message, which says the same in words (docs/workers.md).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from leaseq._core.job import Job, JobState
from leaseq._core.outcome import Outcome
from leaseq._core.trace import format_user

jobs_log = logging.getLogger("leaseq.worker.jobs")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""``--log-format text``, one process."""
PROCESS_TEXT_FORMAT = "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
"""``--log-format text`` under ``--processes``: each line names the process that wrote it."""
ERROR_LINE = 300
"""Characters of an exception's message kept in a log line (the job keeps all of it)."""

# Attributes every LogRecord has: anything else on a record came with extra=.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg``,
    ``pid``, then the record's fields (``extra=``) and, with ``exc_info``, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, timezone.utc)
        out: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        if record.processName not in ("MainProcess", None):
            out["process"] = record.processName
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, and a dead job's traceback on the lines after its message."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace = getattr(record, "traceback", None)
        if isinstance(trace, str) and trace:
            text += "\n" + trace.rstrip("\n")
        return text


def _pool_noise(record: logging.LogRecord) -> bool:
    """psycopg's pool logs each failed reconnect of its own at WARNING: during an outage,
    several a second next to the worker's one line per attempt (docs/workers.md). Those
    go to DEBUG; anything else it says passes as it is."""
    if record.levelno == logging.WARNING and record.msg.startswith(
            ("error connecting in", "reconnection attempt in pool",
             "discarding closed connection", "discarding broken connection")):
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)
    return True


def configure(level: str, fmt: str = "text", processes: bool = False) -> None:
    """The root logger's handler for ``leaseq worker``: ``fmt`` ``text`` or ``json``, on
    stderr. psycopg's pool's reconnect lines are moved to DEBUG (``_pool_noise``)."""
    pool_log = logging.getLogger("psycopg.pool")
    if _pool_noise not in pool_log.filters:
        pool_log.addFilter(_pool_noise)
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter(PROCESS_TEXT_FORMAT if processes else TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= ERROR_LINE else line[:ERROR_LINE - 1] + "…"


def _fields(job: Job, task: str | None, worker_id: str, event: str) -> dict[str, Any]:
    return {"event": event, "job_id": job.id, "queue": job.queue, "task": task or job.kind,
            "attempt": job.attempts, "max_attempts": job.max_attempts,
            "worker_id": worker_id}


def _exception(outcome: Outcome) -> tuple[str, str]:
    """``(type, message)`` of what the attempt failed with."""
    exc = outcome.exc
    if outcome.note is not None:
        return str(outcome.note["type"]), _short(outcome.error or "")
    if exc is not None:
        return type(exc).__name__, _short(str(exc) or type(exc).__name__)
    return "Error", _short((outcome.error or "").strip().splitlines()[-1:][0]
                           if outcome.error else "")


def written(job: Job, task: str | None, worker_id: str, outcome: Outcome,
            state: JobState | None, delay: float | None, ran: float | None,
            log_jobs: bool) -> None:
    """Logs what the worker wrote for ``job``'s attempt: a retry (``state`` available or
    scheduled after a nack, ``delay`` seconds from now), a snooze (``RetryAfter``), a
    death (a nack that used the last attempt, a ``Bury``, a snooze past
    ``max_snoozes``), a discard, a hand-back of an unknown task, or (only with
    ``log_jobs``) a success."""
    name = task or job.kind or "no kind"
    where = f"job {job.id} ({name}) on {job.queue}"
    if outcome.action == "ack":
        if log_jobs and jobs_log.isEnabledFor(logging.INFO):
            took = "" if ran is None else f" in {ran:.3f} s"
            jobs_log.info("%s succeeded%s (attempt %d/%d)", where, took, job.attempts,
                          job.max_attempts,
                          extra={**_fields(job, task, worker_id, "job_succeeded"),
                                 "duration": ran})
        return
    if outcome.action == "release":
        if outcome.note is None:  # a cancel, a lost lease, shutdown: logged where they arise
            return
        when = _next_run(delay or 0.0)
        note = outcome.note
        jobs_log.warning("%s handed back: %s; offered again at %s, buried if still unknown "
                         "%g s after %s", where, note["message"], when, note["grace"],
                         note["first_seen"],
                         extra={**_fields(job, task, worker_id, "job_unknown_task"),
                                "error_type": "UnknownTask", "error": note["message"],
                                "next_run_at": when, "first_seen": note["first_seen"]})
        return
    if outcome.action == "snooze" and state in ("available", "scheduled"):
        # Asked for by the handler, not a failure: INFO, and no exception to show.
        when = _next_run(delay or 0.0)
        held = " with its queue" if outcome.scope == "queue" else ""
        jobs_log.info("%s snoozed%s until %s (snooze %d; no attempt used): %s", where, held,
                      when, job.snoozes + 1, outcome.exc,
                      extra={**_fields(job, task, worker_id, "job_snoozed"),
                             "next_run_at": when, "scope": outcome.scope})
        return
    error_type, error = _exception(outcome)
    fields = {**_fields(job, task, worker_id, ""), "error_type": error_type, "error": error}
    if outcome.action == "nack" and state in ("available", "scheduled"):
        when = _next_run(delay or 0.0)
        jobs_log.warning("%s attempt %d/%d failed: %s: %s; retry at %s", where, job.attempts,
                         job.max_attempts, error_type, error, when,
                         extra={**fields, "event": "job_failed", "next_run_at": when})
    elif outcome.action == "discard":
        jobs_log.warning("%s discarded: %s", where, error,
                         extra={**fields, "event": "job_discarded"})
    elif state == "cancelled":
        jobs_log.info("%s failed and was cancelled: %s: %s", where, error_type, error,
                      extra={**fields, "event": "job_cancelled"})
    else:
        trace = format_user(outcome.exc) if outcome.exc is not None else outcome.error
        why = (f"after attempt {job.attempts}/{job.max_attempts}"
               if outcome.action == "nack" else
               f"after {job.snoozes} snoozes (the queue's max_snoozes)"
               if outcome.action == "snooze" else "(buried)")
        jobs_log.error("%s dead %s: %s: %s", where, why, error_type, error,
                       extra={**fields, "event": "job_dead", "traceback": trace})


def _next_run(delay: float) -> str:
    """When a job given back ``delay`` seconds from now runs again (this host's clock,
    UTC, to the second: for a reader, the database keeps the exact time)."""
    at = datetime.now(timezone.utc) + timedelta(seconds=delay)
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")
