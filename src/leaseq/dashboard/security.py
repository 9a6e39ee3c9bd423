"""Who may read and who may act: the token, the session cookie and the CSRF token.

With a token, every request proves it knows it: an ``Authorization: Bearer`` header (for
scripts and Prometheus), or the cookie the login form sets. The cookie holds an HMAC of the
token, never the token itself. Without a token (only allowed on loopback by the CLI) anyone
who can reach the port may read.

A state change is a POST and needs either the bearer token (a browser never sends it on
its own, so a forged cross-site request cannot carry it) or the CSRF token, which is
rendered into the pages and which another site cannot read. A POST whose ``Origin`` names
another host is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

COOKIE = "leaseq_session"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"


class Auth:
    """The dashboard's token, with the session and CSRF values derived from it."""

    def __init__(self, token: str | None) -> None:
        self.token = token or None
        # Without a token the CSRF value still has to be unguessable: a per-process secret.
        secret = self.token or secrets.token_urlsafe(32)
        self._key = hashlib.sha256(b"leaseq-dashboard\0" + secret.encode()).digest()
        self.session = self._mac("session")
        self.csrf = self._mac("csrf")

    def _mac(self, purpose: str) -> str:
        return hmac.new(self._key, purpose.encode(), hashlib.sha256).hexdigest()

    @property
    def required(self) -> bool:
        return self.token is not None

    def bearer(self, request: Request) -> bool:
        """The request carries the token in an ``Authorization: Bearer`` header."""
        if self.token is None:
            return False
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        )

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode(), self.token.encode()
        )

    def may_read(self, request: Request) -> bool:
        if self.token is None:
            return True
        cookie = request.cookies.get(COOKIE, "")
        return self.bearer(request) or hmac.compare_digest(cookie.encode(), self.session.encode())

    def csrf_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


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
    if "\\" in target or any(ord(ch) < 0x20 for ch in target):
        return home
    return target
