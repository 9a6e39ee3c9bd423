"""Refusing query parameters a backend does not know (design §44).

A misspelt option (``?wait_replica=1``, ``?keepalive_idle=5``) must not be dropped in
silence, nor escape as a driver's ``TypeError`` at the first connect: every backend checks
its URL's parameter names against the ones it accepts, before anything connects, and
raises ``ConfigurationError`` naming the stranger and listing the accepted names. Only
the standard library here.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import unquote_plus

from leaseq._core.redact import credentials
from leaseq.errors import ConfigurationError


def names(url: str) -> list[str]:
    """The query parameter names of ``url``, decoded, in the order written."""
    # After the credentials: a password may hold a raw ? (leaseq._core.redact).
    query = credentials(url)[2].partition("?")[2].partition("#")[0]
    return [unquote_plus(part.partition("=")[0]) for part in query.split("&") if part]


def refuse_unknown(url: str, accepted: Collection[str], backend: str) -> None:
    """Raises ``ConfigurationError`` when ``url`` has a query parameter not in
    ``accepted``; ``backend`` names the kind of URL in the message."""
    unknown = [name for name in names(url) if name not in accepted]
    if not unknown:
        return
    listed = ", ".join(sorted(accepted)) if accepted else "none"
    plural = "s" if len(unknown) > 1 else ""
    raise ConfigurationError(
        f"unknown query parameter{plural} {', '.join(map(repr, unknown))} in a {backend} "
        f"URL; accepted: {listed}"
    )
