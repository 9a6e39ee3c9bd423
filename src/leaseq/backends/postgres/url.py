"""leaseq's own options in a PostgreSQL URL, taken out before psycopg sees it (libpq
refuses query parameters it does not know).

``pgbouncer=true`` (Prisma's spelling) says a transaction-mode pooler (PgBouncer,
Supavisor, RDS Proxy) sits between leaseq and the server: no server-side prepared
statements then, and no LISTEN on the pooled URL. ``listen_url=`` (URL-encoded) names a
direct or session-pooled URL for the push wake-ups' LISTEN connections. Only the standard
library here: the clients read these options without importing psycopg.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote_plus

from leaseq.backends import _sockets
from leaseq.errors import ConfigurationError

FLAG = "pgbouncer"
LISTEN = "listen_url"
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


NO_PUSH = (
    "pgbouncer=true without a listen_url: push wake-ups need a session, so this client's "
    "waits poll (a worker picks up a new job within its poll interval, 1 s by default; a "
    "blocking dequeue within 20 ms; a result wait within 0.5 s); add listen_url=<direct "
    "URL, URL-encoded> to the URL or pass listen_url= for push wake-ups"
)
"""Logged once per client that would listen but cannot (``Capabilities.no_push``)."""


@dataclass(frozen=True)
class PostgresUrl:
    """A PostgreSQL URL with leaseq's options taken out.

    Attributes:
        dsn: The URL psycopg connects with: the given one without ``pgbouncer`` and
            ``listen_url``, every other parameter as it was written.
        pgbouncer: True when the URL says ``pgbouncer=true``.
        listen_url: The URL's ``listen_url``, decoded and checked, or None.
    """

    dsn: str
    pgbouncer: bool = False
    listen_url: str | None = None


def parse(url: str) -> PostgresUrl:
    """Splits leaseq's options off ``url``; raises ``ConfigurationError`` for a
    ``pgbouncer`` value that is not a boolean or a ``listen_url`` that cannot listen."""
    base, sep, query = url.partition("?")
    if not sep or (FLAG not in query and LISTEN not in query):
        return PostgresUrl(url)
    kept: list[str] = []
    pgbouncer, listen = False, None
    for part in query.split("&"):
        key, _, value = part.partition("=")
        name = unquote_plus(key)
        if name == FLAG:
            pgbouncer = _flag(unquote_plus(value))
        elif name == LISTEN:
            listen = listen_target(unquote_plus(value))
        else:
            kept.append(part)
    dsn = f"{base}?{'&'.join(kept)}" if kept else base
    return PostgresUrl(dsn, pgbouncer, listen)


def with_tcp_defaults(dsn: str) -> str:
    """``dsn`` with leaseq's dead-connection defaults (``leaseq.backends._sockets``:
    keepalives, ``tcp_user_timeout``, ``connect_timeout``) added as libpq parameters,
    each only where the URL does not set it: a user's value always wins. The runners'
    pools and the LISTEN connections connect with the result; libpq applies them to the
    socket itself, so they cost nothing per statement."""
    if "://" not in dsn:  # a "key=value ..." connection string
        return dsn
    base, _, query = dsn.partition("?")
    given = {unquote_plus(part.partition("=")[0]) for part in query.split("&") if part}
    defaults = {"keepalives": 1, "keepalives_idle": _sockets.KEEPALIVE_IDLE,
                "keepalives_interval": _sockets.KEEPALIVE_INTERVAL,
                "keepalives_count": _sockets.KEEPALIVE_COUNT,
                "tcp_user_timeout": _sockets.TCP_USER_TIMEOUT_MS,
                # The pool's and the listener's connects: psycopg's own default (130 s)
                # would leave a connect begun in a dead network waiting for a SYN retry
                # long after the network healed.
                "connect_timeout": _sockets.CONNECT_TIMEOUT}
    added = [f"{name}={value}" for name, value in defaults.items() if name not in given]
    if not added:
        return dsn
    return f"{base}?{'&'.join([part for part in query.split('&') if part] + added)}"


def listen_target(url: str) -> str:
    """The URL a LISTEN connection uses for the ``listen_url`` option ``url``: a
    PostgreSQL URL reaching a session (the server itself, or a session-mode pooler)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(
            "listen_url must be a postgresql:// URL that reaches the server directly or "
            "through a session-mode pooler"
        )
    inner = parse(url)
    if inner.pgbouncer:
        raise ConfigurationError(
            "listen_url must not say pgbouncer=true: LISTEN needs a session of its own, "
            "so point it at the server directly or at a session-mode pooler"
        )
    return inner.dsn


def redact(url: str) -> str:
    """``url`` with the value of its ``listen_url`` parameter (a URL of its own, password
    and all) shown as ``***``, for reprs, logs and the dashboard."""
    base, sep, query = url.partition("?")
    if not sep or LISTEN not in query:
        return url
    parts = [f"{LISTEN}=***" if unquote_plus(part.partition("=")[0]) == LISTEN else part
             for part in query.split("&")]
    return f"{base}?{'&'.join(parts)}"


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"pgbouncer must be true or false in a PostgreSQL URL, got "
                             f"{value!r}")
