"""Every entry of a job takes every enqueue option declared in ``leaseq._core.options``,
except where the declaration says why not (issue 31, item 1). A new option is declared
first; this test then names each entry that still lacks it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import leaseq
from leaseq import tasks
from leaseq._core import options
from leaseq._shared import _ENQUEUE_KEYS
from leaseq.dashboard.enqueue import FIELDS

SRC = Path(leaseq.__file__).parent


def parameters(function: Any, *dropped: str) -> set[str]:
    names = set(inspect.signature(function).parameters)
    return names - {"self", *dropped}


def sql_parameters(dialect: str) -> set[str]:
    """The parameter names of ``<prefix>enqueue`` as the dialect's file declares them."""
    text = (SRC / "backends" / dialect / "enqueue.sql").read_text()
    head = re.search(r"CREATE (?:OR REPLACE FUNCTION|PROCEDURE) \{prefix\}enqueue\((.*?)\n\)",
                     text, re.S)
    assert head, dialect
    names = set()
    for line in head[1].splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] in ("IN", "OUT"):
            if words[0] == "OUT":
                continue
            words = words[1:]
        names.add(words[0].removeprefix("p_"))
    return names


def entry_options() -> dict[str, set[str]]:
    """What each entry takes today, read from its signature or its declared fields."""
    task_options = parameters(tasks.Task.options) - options.TASK_SETTINGS
    return {
        "enqueue": parameters(leaseq.Queue.enqueue),
        "enqueue_many": set(_ENQUEUE_KEYS),
        "task": parameters(leaseq.App.task, "fn") - options.TASK_SETTINGS,
        "options": task_options,
        # A step is made by .options(...).s(): it takes what .options takes, less what
        # Signature refuses (checked below, by trying each).
        "step": task_options - set(options.absent("step")),
        "http": {"queue", *FIELDS},  # the queue is the path's
        "sql": sql_parameters("postgres"),
    }


@pytest.mark.parametrize("entry", list(options.ENTRIES))
def test_every_entry_takes_every_option_it_does_not_say_why_it_lacks(entry: str) -> None:
    has = entry_options()[entry]
    known = {o.name for o in options.OPTIONS}
    missing = options.offered(entry) - has
    assert not missing, (f"{options.ENTRIES[entry]} lacks {sorted(missing)}: add them, or "
                         "say why in leaseq/_core/options.py")
    stale = set(options.absent(entry)) & has
    assert not stale, (f"{options.ENTRIES[entry]} takes {sorted(stale)}, which "
                       "_core/options.py says it lacks: drop the reason")
    unknown = has - known
    assert not unknown, (f"{options.ENTRIES[entry]} takes {sorted(unknown)}, which no "
                         "declaration in _core/options.py names")


def mysql_options() -> set[str]:
    """What ``<prefix>enqueue_with`` takes on MySQL/MariaDB: queue and payload, then each
    key its options object is read by (``'$.name'``)."""
    text = (SRC / "backends" / "mysql" / "enqueue.sql").read_text()
    body = text.split("CREATE PROCEDURE {prefix}enqueue_with(", 1)[1].split("\n//\n")[0]
    return {"queue", "payload", *re.findall(r"'\$\.([a-z_]+)'", body)}


def test_the_async_client_and_the_mysql_procedure_match_their_twins() -> None:
    assert parameters(leaseq.AsyncQueue.enqueue) == parameters(leaseq.Queue.enqueue)
    assert mysql_options() == sql_parameters("postgres")


def test_the_frozen_mysql_procedure_keeps_its_eight_arguments() -> None:
    """``<prefix>enqueue`` on MySQL/MariaDB never changes (a new argument would break
    every CALL): new options go to ``enqueue_with``'s options object only."""
    assert sql_parameters("mysql") == {"queue", "payload", "kind", "priority", "delay",
                                       "unique_key", "max_attempts"}


STEP_REFUSALS = {"unique_key": "k", "unique_for": 60, "unique_scope": "global",
                 "conn": object()}


def test_a_step_refuses_what_the_declaration_says_it_lacks() -> None:
    app = leaseq.App("memory://options-steps")

    @app.task
    def step(n: int) -> int:
        return n

    offered_by_options = parameters(tasks.Task.options) - options.TASK_SETTINGS
    refused = set(options.absent("step")) & offered_by_options
    assert refused == set(STEP_REFUSALS)
    for name, value in STEP_REFUSALS.items():
        with pytest.raises(leaseq.InvalidArgument):
            step.options(**{name: value}).s(1)
    step.options(priority=3, queue="q", delay=1, max_attempts=2).s(1)


def test_every_absence_has_a_reason_and_names_a_known_entry() -> None:
    for option in options.OPTIONS:
        for entry, why in option.absent.items():
            assert entry in options.ENTRIES, (option.name, entry)
            assert len(why) > 20, (option.name, entry)
    with pytest.raises(KeyError):
        options.offered("fax")
