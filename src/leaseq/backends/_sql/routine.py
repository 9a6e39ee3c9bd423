"""The stored enqueue routine of each SQL dialect (``<dialect>/enqueue.sql``): its text as
``migrate`` installs it, and the fingerprint that tells whether the installed one is this
version's. No driver is imported, so ``leaseq schema`` can print it anywhere."""

from __future__ import annotations

from leaseq.backends._sql.plan import fingerprint, load_routine, routine_constants

PACKAGES = {"postgres": "leaseq.backends.postgres", "mysql": "leaseq.backends.mysql"}
ROUTINE_SIGNATURE = "(text, jsonb, text, integer, interval, text, integer, text[])"
"""The argument types of PostgreSQL's ``<prefix>enqueue``, as ``regprocedure`` spells
them. An option is appended here, last and with a default, whenever one joins the SQL
entry (``tags`` did, issue 31); the installer drops the other overloads."""
MARK = "@@fingerprint@@"


def routine_params(dialect: str, prefix: str) -> dict[str, str]:
    """What each parameter of the client's enqueue statements is inside the routine: its
    variables, or NULL for what the routine does not take."""
    params = {
        "queue": "v_queue", "kind": "v_kind", "payload": "v_payload",
        "priority": "v_priority", "max_attempts": "v_max_attempts",
        "unique_key": "v_unique_key", "delay": "v_delay", "run_at": "NULL", "lease": "NULL",
        "headers": "NULL", "tags": "v_tags",
    }
    if dialect == "postgres":
        return {**params, "channel": f"'{prefix}jobs'", "cap": "v_cap + 1"}
    return {**params, "tag": "0"}


def routine_text(dialect: str, prefix: str) -> tuple[str, str]:
    """The ``CREATE`` statement of ``<prefix>enqueue`` for ``dialect`` ("postgres" or
    "mysql"), and the mark its comment carries: ``leaseq enqueue <fingerprint>``, the
    fingerprint of the rest of the text. MySQL's text holds the mark (``COMMENT``);
    PostgreSQL's installer sets it with ``COMMENT ON FUNCTION``."""
    text = load_routine(PACKAGES[dialect], prefix, routine_params(dialect, prefix),
                        {**routine_constants(), "comment": MARK})
    mark = f"leaseq enqueue {fingerprint(text)}"
    return text.replace(MARK, mark), mark
