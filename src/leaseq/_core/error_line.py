"""A job's error as people read it: one line, the exception's ``Type: message``.

``JobInfo.error_line``, ``str(JobFailed)``, ``leaseq jobs`` and the dashboard's job lists
all show this line; the full text (a traceback) stays in ``JobInfo.error`` and
``error_detail``. It imports nothing of leaseq's, so ``leaseq.errors`` and
``leaseq._core.job`` can both use it.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_LINE = 200
"""Characters of the line at most; a longer one ends in "…"."""
TRACEBACK_HEAD = "Traceback (most recent call last):"


def error_line(error: str | None, detail: object) -> str | None:
    """The one line that says what went wrong, or None when nothing did.

    From ``detail`` (``JobInfo.error_detail``) when it names the exception's type:
    ``Type: first line of the message``. Otherwise from the stored text: the exception
    line at the end of a traceback, else the text's first line. A discard's detail keeps
    the last real error under ``"previous"``: the line is then ``reason (last error:
    Type: message)``. At most ``MAX_LINE`` characters.
    """
    if error is None and not detail:
        return None
    line = _line(error, detail)
    previous = detail.get("previous") if isinstance(detail, Mapping) else None
    if isinstance(previous, Mapping):
        message = previous.get("message")
        before = _line(message if isinstance(message, str) else None, previous)
        if before:
            line = f"{line} (last error: {before})" if line else before
    if not line:
        return None
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def _line(error: str | None, detail: object) -> str:
    if isinstance(detail, Mapping):
        kind, message = detail.get("type"), detail.get("message")
        if isinstance(kind, str) and kind:
            first = _first(message) if isinstance(message, str) else ""
            return f"{kind}: {first}" if first else kind
        if not error and isinstance(message, str):
            error = message
    text = (error or "").strip()
    if text.startswith(TRACEBACK_HEAD):
        # The exception line ends a traceback; with chained exceptions, the last one's.
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-1].strip()
    return _first(text)


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
