"""Every enqueue option, declared once: its name, where it is stored, and each entry where
it is deliberately absent and why.

A job reaches the database through eight entries: ``Queue.enqueue`` and
``AsyncQueue.enqueue`` (``enqueue``), an item of ``enqueue_many``, ``@app.task(...)``
(``task``), ``Task.options(...)`` (``options``), a chain or group step (``step``: made by
``task.options(...).s(...)``), ``POST /api/queues/{name}/jobs`` (``http``) and the SQL
function or procedure ``<prefix>enqueue`` (``sql``). Each keeps its own explicit, typed
signature (IDE completion, mypy), and ``tests/test_options.py`` holds every entry to this
list: an option missing from an entry without a reason here, or a reason for an option
the entry has after all, fails it. A new option is added here first, and the test then
names each entry that still lacks it.

Pure data, no I/O: every layer may read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

ENTRIES: Mapping[str, str] = MappingProxyType({
    "enqueue": "Queue.enqueue and AsyncQueue.enqueue",
    "enqueue_many": "an item of Queue.enqueue_many and AsyncQueue.enqueue_many",
    "task": "@app.task(...)",
    "options": "Task.options(...)",
    "step": "a chain or group step, task.options(...).s(...)",
    "http": "POST /api/queues/{name}/jobs",
    "sql": "<prefix>enqueue in SQL",
})

_TASK_PAYLOAD = "a task's payload is the call's arguments"
_TASK_KIND = "a task's kind is its name (@app.task(name=...))"
_PER_CALL = "a time is a property of one call, not of every call of the task: .options()"
_CONN_OWN = "a flow is written in a transaction of its own: chain(...).enqueue(conn=...)"
_STEP_UNIQUE = ("a twin standing in for a step would leave its flow waiting forever "
                "(Signature refuses it)")
_NOT_OVER_WIRE = "a connection is a Python object: it cannot travel in a request"
_SQL_IN_TX = "the SQL function runs in the caller's own transaction already"


@dataclass(frozen=True)
class Option:
    """One enqueue option.

    Attributes:
        name: The keyword every entry spells it with.
        stored: Where it is kept: the ``NewJob`` field the backends write (None for an
            option that is not stored, such as ``conn``).
        absent: Entry name to why the option is deliberately not offered there.
    """

    name: str
    stored: str | None
    absent: Mapping[str, str] = field(default_factory=dict)


OPTIONS: tuple[Option, ...] = (
    Option("queue", "queue"),
    Option("payload", "payload", {
        "task": _TASK_PAYLOAD, "options": _TASK_PAYLOAD, "step": _TASK_PAYLOAD}),
    Option("kind", "kind", {"task": _TASK_KIND, "options": _TASK_KIND, "step": _TASK_KIND}),
    Option("priority", "priority"),
    Option("delay", "delay", {"task": _PER_CALL}),
    Option("run_at", "run_at", {
        "task": _PER_CALL,
        "sql": "SQL says when with delay (an interval), counted by the database's clock",
    }),
    Option("unique_key", "unique_key", {"step": _STEP_UNIQUE}),
    Option("unique_for", "unique_for", {
        "step": _STEP_UNIQUE,
        "sql": "not offered in SQL yet: a finished twin is found only by Python and HTTP "
               "producers",
    }),
    Option("unique_scope", "unique_global", {
        "step": _STEP_UNIQUE,
        "http": "not offered over HTTP yet: a key there is unique in its queue",
        "sql": "not offered in SQL yet: a key there is unique in its queue",
    }),
    Option("max_attempts", "max_attempts"),
    Option("lease", "lease", {
        "options": "a task's lease is the task's (@app.task(lease=...))",
        "step": "a task's lease is the task's (@app.task(lease=...))",
        "http": "a lease is the worker's business: the task or the queue settings set it",
        "sql": "a lease is the worker's business: the task or the queue settings set it",
    }),
    Option("headers", "headers", {
        "task": "headers are per call: .options(headers=...)",
        "sql": "triggers write plain jobs; headers come from Python and HTTP",
    }),
    Option("tags", "tags"),
    Option("conn", None, {
        "enqueue_many": "one transaction for the whole batch: enqueue_many(..., conn=)",
        "task": "a connection is per call: .options(conn=...)",
        "step": _CONN_OWN,
        "http": _NOT_OVER_WIRE,
        "sql": _SQL_IN_TX,
    }),
)
"""Every enqueue option, in the order the entries list them."""

TASK_SETTINGS = frozenset({"name", "timeout", "backoff", "on_failure", "on_dead"})
"""``@app.task`` parameters that configure the task rather than its jobs' enqueue (the
``backoff`` of ``.options`` travels as a header)."""


def offered(entry: str) -> frozenset[str]:
    """The option names ``entry`` must take: every option not declared absent there."""
    if entry not in ENTRIES:
        raise KeyError(f"unknown entry {entry!r}; known: {', '.join(ENTRIES)}")
    return frozenset(o.name for o in OPTIONS if entry not in o.absent)


def absent(entry: str) -> Mapping[str, str]:
    """Option name to the reason it is absent from ``entry``."""
    return {o.name: o.absent[entry] for o in OPTIONS if entry in o.absent}
