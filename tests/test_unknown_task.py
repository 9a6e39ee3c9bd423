"""The pure decision about a job of an unknown task (``_core/outcome.unknown_task``) and
the traceback trimming (``_core/trace``), without a database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from leaseq._core import outcome as decide
from leaseq._core.trace import format_user

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_first_sight_hands_back_with_a_note_of_when() -> None:
    out = decide.unknown_task("new.task", ["a", "b"], now=T0, delay=60, grace=3600)
    assert (out.action, out.delay) == ("release", 60)
    assert out.note is not None and out.note["first_seen"] == T0.isoformat()
    assert out.note["type"] == "UnknownTask" and out.note["kind"] == "new.task"
    assert "no task named 'new.task'" in str(out.error) and "registered: a, b" in str(out.error)
    call = decide.calls(None, out, None)  # type: ignore[arg-type]
    assert call[0][0] == "release" and call[0][2]["error"] == out.note


def test_within_the_grace_it_keeps_its_first_sight() -> None:
    later = T0 + timedelta(seconds=3599)
    out = decide.unknown_task("x", [], first_seen=T0, now=later, delay=5, grace=3600)
    assert out.action == "release" and out.note is not None
    assert out.note["first_seen"] == T0.isoformat()


def test_past_the_grace_counted_from_the_first_sight_it_is_buried() -> None:
    out = decide.unknown_task("x", [], first_seen=T0, now=T0 + timedelta(seconds=3600),
                              grace=3600)
    assert out.action == "bury" and "handed back for 3600 s" in str(out.error)
    assert decide.calls(None, out, None)[0][0] == "bury"  # type: ignore[arg-type]


def test_no_grace_buries_at_once_and_a_kindless_job_says_so() -> None:
    out = decide.unknown_task(None, ["a"], now=T0, grace=0)
    assert out.action == "bury" and str(out.error).startswith("the job has no kind")


def test_first_seen_is_read_back_only_from_our_note() -> None:
    note = {"type": "UnknownTask", "first_seen": T0.isoformat()}
    assert decide.first_seen_unknown(note) == T0
    assert decide.first_seen_unknown({"message": "boom"}) is None
    assert decide.first_seen_unknown({"type": "UnknownTask", "first_seen": "soon"}) is None
    assert decide.first_seen_unknown(None) is None


def _users_code() -> None:
    raise ValueError("boom")


def test_a_traceback_starts_at_the_first_frame_that_is_not_leaseqs() -> None:
    try:
        _users_code()
    except ValueError as exc:
        text = format_user(exc)
    frames = [line for line in text.splitlines() if line.lstrip().startswith("File ")]
    assert __file__ in frames[0] and text.rstrip().endswith("ValueError: boom")
