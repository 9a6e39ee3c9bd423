"""The one redaction of database URLs, for everything a person or a log may see: the CLI's
banners, the worker's start line, error texts, the dashboard's pages and ``repr``.

A URL's password may hold any character, raw ``#``, ``/``, ``?`` and ``@`` included
(``postgresql://app:pa#s/w?d@db/x`` connects), so nothing here parses the URL with
``urlsplit``, whose network location ends at the first of those. The rule instead:

- everything between ``scheme://`` and the **last** ``@`` before the path is the user
  information and is shown as ``***`` (user name included: it is half a credential);
- the value of any query option whose name holds ``password``, ``secret``, ``token`` or
  ``key``, or whose decoded value holds ``://`` (a URL of its own, such as PostgreSQL's
  ``listen_url``, with its own password), is shown as ``***``;
- a libpq ``key=value`` string (no ``://``) gets the same treatment for its options.

Masking too much is the safe failure: a query option holding a raw ``@`` hides the host
as well. Pure logic, no I/O, so every layer may use it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

MASK = "***"
_NO_USERINFO = ("sqlite:", "memory:")
_SECRET_NAMES = ("password", "secret", "token", "key")
_LIBPQ_OPTION = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|\S*)")


def _secret_option(name: str, value: str) -> bool:
    lowered = unquote_plus(name).lower()
    return any(word in lowered for word in _SECRET_NAMES) or "://" in unquote_plus(value)


def _split(url: str) -> tuple[str, str, str, str]:
    """``(scheme://, userinfo, @, rest)``; userinfo and ``@`` are empty when the URL has
    none. The user information ends at the last ``@`` of the URL: a password may hold
    ``/``, ``?`` and ``#``, and a host never holds ``@``."""
    scheme, sep, after = url.partition("://")
    if not sep:
        return "", "", "", url
    userinfo, at, rest = after.rpartition("@")
    return scheme + sep, userinfo, at, rest


def _redact_query(query: str) -> str:
    parts = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        parts.append(f"{name}={MASK}" if eq and _secret_option(name, value) else part)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its user information (everything between the scheme
    and the last ``@``) as ``***``, and every secret-looking query option's value as
    ``***`` (see the module's docstring). A URL without secrets comes back unchanged.

    >>> redact_url("postgresql://app:pa#s/w?d@db:5432/jobs?sslpassword=x&application_name=a")
    'postgresql://***@db:5432/jobs?sslpassword=***&application_name=a'
    """
    head, _, at, rest = _split(url)
    if head.lower().startswith(_NO_USERINFO):
        return url  # a file path may hold an @
    if not head:
        return _LIBPQ_OPTION.sub(
            lambda m: f"{m['name']}={MASK}" if _secret_option(m["name"], m["value"])
            else m[0], url)
    path, sep, query = rest.partition("?")
    shown = head + (MASK + at if at else "") + path
    return shown + sep + _redact_query(query) if sep else shown


def where(url: str) -> str:
    """The hosts and path of ``url`` (``db:5432/jobs``, ``h1:5432,h2:5432/jobs``), for
    error messages: without the user information and without the query string, which
    may hold a password."""
    head, _, _, rest = _split(url)
    if head.lower().startswith(_NO_USERINFO):
        return url.partition("://")[2].partition("?")[0]
    if not head:
        return "(a connection string)"
    return rest.partition("?")[0].partition("#")[0]


def secrets_of(url: str) -> list[str]:
    """The secret parts of ``url``: its password, the password's pieces between reserved
    characters (a driver that misread the URL may quote one piece alone) and the values of
    secret-looking query options, each as written and percent-decoded. Parts shorter than
    4 characters are left out: they would mask ordinary words in a message."""
    found: list[str] = []
    _, userinfo, _, rest = _split(url)
    password = userinfo.partition(":")[2]
    for given in {password, unquote_plus(password)} - {""}:
        found.append(given)
        found.extend(re.split(r"[/?#@:&=]", given))
    for part in rest.partition("?")[2].split("&"):
        name, eq, value = part.partition("=")
        if eq and value and _secret_option(name, value):
            found.extend({value, unquote_plus(value)})
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message, a log line) with every secret of ``url``
    replaced by ``***``: a misparsed URL can put its password into a driver's message."""
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text
