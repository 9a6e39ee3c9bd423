"""Reaching the database: at start, and again after it went away.

What will not fix itself ends the worker at once, with one ERROR line and exit code
``EX_CONFIG`` (78, sysexits.h): a bad URL or a missing driver, an unknown database, a
refused user or password, tables never created, a schema older than this leaseq needs.
The ``--processes`` supervisor does not restart a child that exits so. What may fix
itself (a server that does not answer yet, a network in the way) is retried with
exponential backoff, one WARNING per attempt: at start for ``start_timeout`` seconds if
given (then exit code ``EX_UNAVAILABLE``), for ever later on (design §53).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from leaseq._aclient import AsyncQueue
from leaseq._core.redact import redact_url
from leaseq._core.version import VERSION
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseqError,
    SchemaMissing,
)

log = logging.getLogger("leaseq.worker")

EX_CONFIG = 78
"""Exit code of a worker that cannot run as configured (sysexits.h ``EX_CONFIG``)."""
EX_UNAVAILABLE = 69
"""Exit code of a worker whose database stayed unreachable for ``--start-timeout``
(sysexits.h ``EX_UNAVAILABLE``)."""
RETRY_FIRST = 0.5
"""Seconds before the second attempt to reach an unreachable database..."""
RETRY_MAX = 30.0
"""...doubling each attempt up to this."""


class CannotRun(LeaseqError):
    """The worker must stop: ``exit_code`` says why (``EX_CONFIG``, ``EX_UNAVAILABLE``)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def fatal(exc: LeaseqError) -> bool:
    """An error no retry cures: the configuration, the credentials or the schema."""
    return isinstance(exc, (ConfigurationError, AuthenticationFailed, SchemaMissing))


def retry_delay(attempt: int) -> float:
    """Seconds to wait after the ``attempt``-th failed attempt in a row: 0.5, 1, 2, ... up
    to ``RETRY_MAX``, ±20 % so a fleet that lost its database does not return in step."""
    return min(RETRY_MAX, RETRY_FIRST * 2.0 ** min(attempt - 1, 16)) * random.uniform(0.8, 1.2)


def one_line(exc: BaseException) -> str:
    """An error's text on one line: a driver's may span several (the statement, a hint)."""
    return " ".join(str(exc).split())


def cannot_run(exc: LeaseqError, url: str) -> CannotRun:
    """The one line a fatal error becomes."""
    return CannotRun(f"cannot run on {redact_url(url)}: {type(exc).__name__}: {one_line(exc)}",
                     EX_CONFIG)


async def reach(aq: AsyncQueue, url: str, start_timeout: float | None,
                stopping: Callable[[], bool]) -> None:
    """Waits until the database answers and its schema is the one this leaseq needs;
    ``CannotRun`` when it never will (or not within ``start_timeout`` seconds)."""
    began = time.monotonic()
    attempt = 0
    while True:
        try:
            versions = await aq._schema_versions()
            break
        except LeaseqError as exc:
            if fatal(exc) or not isinstance(exc, BackendError):
                raise cannot_run(exc, url) from exc
            attempt += 1
            delay = retry_delay(attempt)
            waited = time.monotonic() - began
            if start_timeout is not None:  # the last attempt is made at the deadline
                delay = min(delay, start_timeout - waited)
            if delay <= 0:
                raise CannotRun(f"database {redact_url(url)} still unreachable after "
                                f"{waited:.0f} s (--start-timeout {start_timeout:g}): "
                                f"{one_line(exc)}",
                                EX_UNAVAILABLE) from exc
            what = "unreachable" if isinstance(exc, BackendUnavailable) else "failed"
            log.warning("database %s %s (%s); attempt %d failed, retrying in %.1f s",
                        redact_url(url), what, one_line(exc), attempt, delay,
                        extra={"event": "database_unreachable", "attempt": attempt,
                               "retry_in": round(delay, 3)})
            until = time.monotonic() + delay
            while time.monotonic() < until:
                if stopping():
                    return
                await asyncio.sleep(min(0.1, max(0.0, until - time.monotonic())))
    if attempt:
        log.info("database %s reachable after %d failed attempts", redact_url(url), attempt)
    if versions is None:
        return
    recorded, needed = versions
    if recorded < needed:
        raise CannotRun(
            f"the schema at {redact_url(url)} is at migration {recorded}, leaseq "
            f"{VERSION} needs migration {needed}: run `leaseq migrate` (with this "
            "leaseq) first", EX_CONFIG)
    if recorded > needed:
        log.warning("the schema at %s is at migration %d, newer than the %d this leaseq %s "
                    "knows: a newer leaseq migrated it; carrying on, but upgrade this worker",
                    redact_url(url), recorded, needed, VERSION)
