"""Tracebacks as the task's author reads them: from their own first frame.

A handler's exception travels through leaseq's worker (the job's asyncio task, the
handler thread, the payload conversion) and asyncio before it reaches the user's code;
those frames say nothing about the failure and pushed the user's own below the fold
(issue 30). They are cut from the front of the stored and logged traceback. Where no
frame is the user's (leaseq itself raised: a payload that is not an object), the whole
traceback stays."""

from __future__ import annotations

import os
import sysconfig
import traceback
from types import TracebackType

_LEASEQ = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
_INSTALLED = ("site-packages", "dist-packages")  # may sit under the stdlib directory


def _ours(filename: str) -> bool:
    """A frame of leaseq or of the standard library (asyncio, concurrent.futures)."""
    path = os.path.abspath(filename)
    if path.startswith(_LEASEQ):
        return True
    return path.startswith(_STDLIB) and not any(part in path for part in _INSTALLED)


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from its first frame that is neither leaseq's nor the standard library's;
    ``tb`` itself when there is none."""
    first = tb
    while first is not None and _ours(first.tb_frame.f_code.co_filename):
        first = first.tb_next
    return first or tb


def format_user(exc: BaseException) -> str:
    """``traceback.format_exception`` of ``exc`` from the user's first frame."""
    return "".join(traceback.format_exception(type(exc), exc, user_frames(exc.__traceback__)))
