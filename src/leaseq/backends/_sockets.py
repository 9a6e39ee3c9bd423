"""Dead-connection detection shared by every server backend (design §37).

A connection whose packets silently stop (a dead router, a firewall or NAT that dropped
its state, a failover that moved the address) sends no RST: without help a blocked read
waits for ever and a sent request is retransmitted for about 15 minutes. Every connection
leaseq opens to PostgreSQL, MySQL/MariaDB or Redis therefore gets, unless its URL says
otherwise:

* TCP keepalives after ``KEEPALIVE_IDLE`` s of silence, every ``KEEPALIVE_INTERVAL`` s,
  ``KEEPALIVE_COUNT`` of them: an idle connection (a pooled one, a LISTEN or pub/sub
  connection, one waiting for a reply whose request got through) is found dead;
* ``TCP_USER_TIMEOUT_MS``: data sent and not acknowledged for that long ends the
  connection (a request sent into the void), and keepalive probes unanswered that long.

Neither fires on a healthy but slow server: its kernel acknowledges the request and the
probes while the statement runs, however long. So these can be short; the bound they
give is about ``DETECTION`` seconds. Only the standard library here.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import unquote_plus

KEEPALIVE_IDLE = 5
KEEPALIVE_INTERVAL = 2
KEEPALIVE_COUNT = 3
TCP_USER_TIMEOUT_MS = 10_000
IDLE_IN_TRANSACTION = 10
"""Seconds the server lets one of leaseq's sessions sit idle inside a transaction before
it ends the session (PostgreSQL ``idle_in_transaction_session_timeout``, MariaDB
``idle_transaction_timeout``). A client cut off between two statements of a transaction
(a renewal's locking read and its write, say) leaves the server waiting for the next
statement, holding the rows' locks, for hours (``wait_timeout``, the server's own
keepalives): no other worker can take those jobs over until the session ends. leaseq's
statements follow each other within milliseconds, so this never ends a live session."""
CONNECT_TIMEOUT = 10
"""Seconds a PostgreSQL connect may take (libpq's ``connect_timeout``; the other
backends take ``Settings.connect_timeout``)."""
DETECTION = max(KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT,
                TCP_USER_TIMEOUT_MS / 1000)
"""Seconds after which a silent connection is given up, at most (11)."""

NAMES = ("keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout")
"""The URL parameters that override the defaults, libpq's names (``tcp_user_timeout`` in
milliseconds, the others in seconds), read by the MySQL backend too."""


def options(overrides: dict[str, str] | None = None) -> dict[int, int]:
    """The ``IPPROTO_TCP`` socket options to set (``{option: value}``), the defaults with
    any of ``NAMES`` in ``overrides``; options this platform lacks are left out (macOS
    has no ``TCP_USER_TIMEOUT``, for one)."""
    given = overrides or {}
    for name, value in given.items():
        if name in NAMES and not (value.isdigit() and int(value) >= (name != "tcp_user_timeout")):
            from leaseq.errors import ConfigurationError

            raise ConfigurationError(f"{name} must be a whole number (>= 1, or 0 for "
                                     f"tcp_user_timeout: the system's) in the URL, "
                                     f"got {value!r}")
    values = {
        "TCP_KEEPIDLE": int(given.get("keepalives_idle", KEEPALIVE_IDLE)),
        "TCP_KEEPINTVL": int(given.get("keepalives_interval", KEEPALIVE_INTERVAL)),
        "TCP_KEEPCNT": int(given.get("keepalives_count", KEEPALIVE_COUNT)),
        "TCP_USER_TIMEOUT": int(given.get("tcp_user_timeout", TCP_USER_TIMEOUT_MS)),
    }
    return {getattr(socket, name): value for name, value in values.items()
            if hasattr(socket, name)}


def split(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without the ``NAMES`` parameters, and their values: for a driver that
    would refuse parameters it does not know (redis-py)."""
    base, sep, query = url.partition("?")
    if not sep or not any(name in query for name in NAMES):
        return url, {}
    kept, found = [], {}
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if unquote_plus(key) in NAMES:
            found[unquote_plus(key)] = unquote_plus(value)
        elif part:
            kept.append(part)
    return (f"{base}?{'&'.join(kept)}" if kept else base), found


def apply(sock: Any, opts: dict[int, int]) -> None:
    """Turns keepalives on for ``sock`` and sets ``opts`` (from ``options``)."""
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in opts.items():
        sock.setsockopt(socket.IPPROTO_TCP, option, value)
