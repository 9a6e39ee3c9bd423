"""Who may reach, read and act: the ``Host`` check, the tokens, sessions, CSRF tokens and
the throttle on wrong credentials (docs/security.md has the threat model).

- **Host.** A request whose ``Host`` names a host the dashboard does not serve is refused
  with 400 before anything else runs: a web page on another site cannot reach a
  dashboard on loopback by pointing its own name at 127.0.0.1 (DNS rebinding).
- **Tokens.** With a token, every request proves it knows it: an ``Authorization: Bearer``
  header (scripts), or the session cookie the login form sets. A metrics token may read
  ``/metrics`` and nothing else. Without a token (``create_app`` mounted behind the
  caller's own authentication) anyone who passes the ``Host`` check may read.
- **Sessions.** The cookie holds a random session id, its expiry and a MAC under a key
  made from the token and a secret of this process: changing the token or restarting
  the process ends every session, logout ends one. The token is never in the cookie.
- **CSRF.** A state change is a POST and needs the bearer token (a browser never sends
  it by itself) or the session's own CSRF token, rendered only into the pages of that
  session. A POST whose ``Origin`` names another host is refused as well.
- **Throttle.** Five wrong credentials (login form or bearer) from one address within a
  minute get 429 for the rest of that minute; each failure is logged at WARNING. The
  counts are per process.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the CLI reads this module's limits without the dashboard extra
    from starlette.requests import Request

log = logging.getLogger("leaseq.dashboard")

COOKIE = "leaseq_session"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a dashboard on loopback answers to when nothing else is allowed."""
MIN_TOKEN_LENGTH = 16
"""Characters a token needs when the dashboard listens beyond loopback."""
SESSION_MAX_AGE = 12 * 3600
"""Seconds a login lasts by default."""
FAILURES = 5
"""Wrong credentials from one address within ``FAILURE_WINDOW`` seconds before 429."""
FAILURE_WINDOW = 60.0
THROTTLED_ADDRESSES = 10_000
"""Addresses whose failures are remembered; the oldest is forgotten past that."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header, lower-cased and without its port (``[::1]:8787`` is
    ``::1``); None when the header is empty or malformed."""
    header = header.strip().lower()
    if header.startswith("["):
        name, bracket, rest = header[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return name or None
    name, colon, port = header.rpartition(":")
    if not colon:
        name = header
    elif not port.isdigit():
        return None
    if not name or any(ch in name for ch in "/@\\ \t"):
        return None
    return name


class HostCheck:
    """ASGI middleware: 400 for an HTTP request whose ``Host`` is not among ``allowed``
    (names without ports, compared case-insensitively; a leading ``*.`` allows every
    subdomain). ``allowed=None`` lets every host through."""

    def __init__(self, app: ASGIApp, allowed: Collection[str] | None) -> None:
        self.app = app
        self.exact = None if allowed is None else {
            name.lower().strip("[]") for name in allowed if not name.startswith("*.")}
        self.suffixes = () if allowed is None else tuple(
            name.lower()[1:] for name in allowed if name.startswith("*."))

    def allows(self, header: str) -> bool:
        if self.exact is None:
            return True
        name = host_name(header)
        return name is not None and (name in self.exact or (name.endswith(self.suffixes)
                                     and bool(self.suffixes)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exact is None:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"host", b"").decode("latin-1")
        if self.allows(given):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": {"type": "BadHost", "message": (
            "this dashboard does not answer to that Host header; start it with "
            "--allowed-host NAME (or pass allowed_hosts=) to serve that name")}}).encode()
        await send({"type": "http.response.start", "status": 400, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]})
        await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Session:
    """A login: its random id and when it ends (seconds since the epoch)."""

    id: str
    expires: int


@dataclass(frozen=True)
class Identity:
    """Who a request is. ``kind``: ``open`` (no token is configured), ``bearer`` (the
    token in an ``Authorization`` header), ``session`` (a login cookie), ``metrics``
    (the metrics token) or ``anonymous``."""

    kind: str
    session: Session | None = None

    @property
    def may_read(self) -> bool:
        return self.kind in ("open", "bearer", "session")


class Throttle:
    """Wrong credentials per client address within a sliding window."""

    def __init__(self, limit: int = FAILURES, window: float = FAILURE_WINDOW) -> None:
        self.limit = limit
        self.window = window
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str, now: float) -> deque[float]:
        times = self._failures.get(address)
        if times is None:
            return deque()
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times:
            del self._failures[address]
        return times

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may try again; None when it may now."""
        now = time.monotonic()
        times = self._recent(address, now)
        if len(times) < self.limit:
            return None
        return max(1, math.ceil(self.window - (now - times[-self.limit])))

    def fail(self, address: str) -> None:
        now = time.monotonic()
        times = self._failures.setdefault(address, deque(maxlen=self.limit))
        times.append(now)
        self._failures.move_to_end(address)
        while len(self._failures) > THROTTLED_ADDRESSES:
            self._failures.popitem(last=False)


def client_address(request: Request) -> str:
    """The client's address: the socket's peer, or the forwarded one when uvicorn was
    told to trust the proxy that sent it (``--forwarded-allow-ips``)."""
    return request.client.host if request.client else "unknown"


class Auth:
    """The dashboard's tokens, its sessions and CSRF tokens, and the throttle."""

    def __init__(self, token: str | None, *, metrics_token: str | None = None,
                 public_metrics: bool = False, session_max_age: int = SESSION_MAX_AGE,
                 secure_cookies: bool = False) -> None:
        self.token = token or None
        self.metrics_token = metrics_token or None
        self.public_metrics = public_metrics
        self.session_max_age = session_max_age
        self.secure_cookies = secure_cookies
        self.throttle = Throttle()
        # A secret of this process in the key: a restart ends every session, and a stolen
        # cookie does not let anyone test guesses of the token offline.
        secret = secrets.token_bytes(32)
        self._key = hashlib.sha256(b"leaseq-dashboard\0" + (self.token or "").encode()
                                   + b"\0" + secret).digest()
        self._revoked: dict[str, int] = {}

    @property
    def required(self) -> bool:
        return self.token is not None

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def _same(given: str, expected: str) -> bool:
        return hmac.compare_digest(given.encode(), expected.encode())

    # -- credentials ---------------------------------------------------------------------

    def token_matches(self, given: str) -> bool:
        return self.token is not None and self._same(given, self.token)

    @staticmethod
    def given_bearer(request: Request) -> str | None:
        """The token of an ``Authorization: Bearer`` header (any case), or None."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        scheme, _, given = header.partition(" ")
        return given.strip() if scheme.lower() == "bearer" else ""

    def identify(self, request: Request) -> Identity | None:
        """Who sent ``request``; None when it carried a wrong credential (counted by the
        throttle and logged)."""
        given = self.given_bearer(request)
        if given is not None:
            if self.token is not None and self._same(given, self.token):
                return Identity("bearer")
            if self.metrics_token is not None and self._same(given, self.metrics_token):
                return Identity("metrics")
            if self.token is None and self.metrics_token is None:
                return Identity("open")  # a header this app never asked for
            self.failed(request, "a wrong bearer token")
            return None
        if self.token is None:
            return Identity("open")
        session = self.session(request)
        return Identity("session", session) if session else Identity("anonymous")

    def failed(self, request: Request, what: str) -> None:
        address = client_address(request)
        self.throttle.fail(address)
        log.warning("leaseq dashboard: %s from %s (%s %s)", what, address, request.method,
                    request.url.path)

    def retry_after(self, request: Request) -> int | None:
        return self.throttle.retry_after(client_address(request))

    # -- sessions ------------------------------------------------------------------------

    def new_session(self) -> tuple[Session, str]:
        """A new login and its cookie value."""
        session = Session(secrets.token_urlsafe(18), int(time.time()) + self.session_max_age)
        mac = self._mac("session", session.id, str(session.expires))
        return session, f"{session.id}.{session.expires}.{mac}"

    def session(self, request: Request) -> Session | None:
        """The request's live login, or None (no cookie, a forged or expired one, or one
        ended by logout)."""
        sid, _, rest = request.cookies.get(COOKIE, "").partition(".")
        expires, _, mac = rest.partition(".")
        if not sid or not expires.isdigit() or not self._same(
                mac, self._mac("session", sid, expires)):
            return None
        if int(expires) <= time.time() or sid in self._revoked:
            return None
        return Session(sid, int(expires))

    def end(self, session: Session) -> None:
        """Logout: the session's cookie no longer works, wherever it was copied to."""
        now = time.time()
        self._revoked = {sid: at for sid, at in self._revoked.items() if at > now}
        self._revoked[session.id] = session.expires

    # -- CSRF ----------------------------------------------------------------------------

    def csrf(self, identity: Identity | None) -> str:
        """The CSRF token a page of ``identity`` carries: the session's own, one per
        process without a token, and none for anybody else."""
        if identity is None:
            return ""
        if identity.session is not None:
            return self._mac("csrf", identity.session.id)
        return self._mac("csrf") if identity.kind == "open" else ""

    def csrf_matches(self, identity: Identity, given: str | None) -> bool:
        expected = self.csrf(identity)
        return bool(given) and bool(expected) and self._same(str(given), expected)


def same_origin(request: Request) -> bool:
    """False when a browser says the request comes from a page of another host."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def safe_next(target: str | None, base: str) -> str:
    """Where to go after a login or a form action: a path of this dashboard, never another
    site (``//evil.example`` or ``https://...`` are replaced by the overview)."""
    home = base + "/"
    if not target or not target.startswith(home) or target.startswith("//"):
        return home
    if "\\" in target or any(ord(ch) < 0x20 for ch in target) or "/../" in target:
        return home
    return target
