"""Redis behind Sentinel: ``redis+sentinel://`` URLs and the clients that follow a failover.

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/SERVICE[/db][?options]``
(``rediss+sentinel://`` for TLS) names the Sentinels (port 26379 unless given) and the
service they monitor. The credentials before ``@`` and the query options (as on a
``redis://`` URL: ``client_name``, ``socket_timeout``, ...) are for the data nodes, the
primary leaseq writes to; ``sentinel_username`` and ``sentinel_password`` in the query are
for the Sentinels themselves, which have a ``requirepass`` of their own (none by default).

The clients are redis-py's ``master_for`` clients: every new connection asks the
Sentinels for the current primary (``SENTINEL MASTERS``), and idle pooled connections to a
replaced primary are closed when the answer changes. That is all redis-py does, so a pool
whose connections stay open keeps using a replaced primary: one that still believes it
is the primary (a manual failover leaves it so for about 10 s, a partition for as long
as it lasts) answers reads and takes writes that the new primary never sees, and one that
became a replica answers reads from what it holds (its old data, until it has resynced
from the new primary). Here (design §64), for the primary's
pool:

- a new connection whose server says it is a replica is refused (``NotPrimary``, from the
  epoch hook's reply: no extra round trip);
- a ``READONLY`` reply makes the pool forget the primary and close all its connections
  to it, not only the one that got it;
- about once a second (``CONFIRM_EVERY``) the first connection taken from a pool in use
  asks the Sentinels again, which closes the connections to a replaced primary, and
  checks that its server still says it is the primary; between two such checks no call
  pays anything (a comparison of two floats);
- the async pool closes a connection to a replaced primary when it is given back, as the
  sync one does (redis-py's async pool never asks).
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.connection
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from leaseq.backends._urls import refuse_unknown
from leaseq.errors import ConfigurationError

SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
SENTINEL_PORT = 26379
FORM = "redis+sentinel://[:password@]host:port[,host:port...]/SERVICE[/db]"
# Query options for the Sentinels, not the data nodes: removed before redis-py reads the rest.
SENTINEL_AUTH = {"sentinel_username": "username", "sentinel_password": "password"}
UNKNOWN = "no such master"  # in Sentinel's reply to SENTINEL MASTER for a service it lacks


@dataclass(frozen=True)
class Target:
    """What a ``redis+sentinel://`` URL names."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    options: Mapping[str, Any] = field(default_factory=dict)
    """For the data nodes: db, username, password, TLS and the URL's query options."""
    sentinel_options: Mapping[str, Any] = field(default_factory=dict)
    """For the Sentinels: username, password, TLS."""

    @property
    def where(self) -> str:
        """How errors name it: Sentinels and service, never a credential."""
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        return f"{hosts}/{self.service} (Sentinel)"


def parse(url: str) -> Target | None:
    """The ``Target`` of a ``redis+sentinel://`` or ``rediss+sentinel://`` URL; None for
    any other URL. Raises ``ConfigurationError`` naming what is wrong with a malformed one
    (no Sentinel, no service, a bad port, a database that is not a number)."""
    scheme, sep, rest = url.partition("://")
    plain = SCHEMES.get(scheme.lower())
    if plain is None or not sep:
        return None
    rest, _, query = rest.partition("?")
    rest = rest.split("#", 1)[0]
    address, _, path = rest.partition("/")
    userinfo, at, hosts = address.rpartition("@")
    shown = f"{scheme}://{hosts}/{path}"  # without the credentials
    sentinels = tuple(_sentinel(item, shown) for item in hosts.split(",") if item)
    if not sentinels:
        raise ConfigurationError(f"{shown!r} names no Sentinel; use {FORM}")
    service, _, db = path.partition("/")
    service = unquote(service)
    if not service:
        raise ConfigurationError(
            f"{shown!r} names no service (the name the Sentinels monitor); use {FORM}"
        )
    db = db.rstrip("/")
    if db and not db.isdigit():
        raise ConfigurationError(f"{shown!r}: the database must be a number, not {db!r}")
    pairs = parse_qsl(query, keep_blank_values=True)
    refuse_unknown(f"{shown}?{query}", {*SENTINEL_AUTH, *url_options()}, "Redis Sentinel")
    sentinel_options: dict[str, Any] = {
        SENTINEL_AUTH[key]: value for key, value in pairs if key in SENTINEL_AUTH
    }
    rest_query = urlencode([(key, value) for key, value in pairs if key not in SENTINEL_AUTH])
    # redis-py reads the credentials and the options exactly as for a redis:// URL; the
    # host is a placeholder, since the Sentinels say where the primary is.
    try:
        options = redis.connection.parse_url(  # type: ignore[no-untyped-call]
            f"{plain}://{userinfo}{at}primary/{db or '0'}"
            + (f"?{rest_query}" if rest_query else "")
        )
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis Sentinel URL {shown!r}: {exc}") from exc
    for key in ("host", "port", "connection_class"):
        options.pop(key, None)
    if plain == "rediss":
        # SentinelConnectionPool picks its TLS connection class from ssl=True; the TLS
        # options of the query (ssl_ca_certs, ...) serve the Sentinels too.
        options["ssl"] = True
        sentinel_options["ssl"] = True
        sentinel_options.update({k: v for k, v in options.items() if k.startswith("ssl_")})
    return Target(sentinels, service, options, sentinel_options)


@functools.cache
def connection_options() -> frozenset[str]:
    """The option names a redis-py connection (TLS included) or its pool accepts: any
    other name in the query would fail at the first connect with a ``TypeError``."""
    names = {"max_connections", "timeout"}
    for cls in redis.connection.SSLConnection.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # a builtin's __init__
            continue
        names.update(p.name for p in parameters
                     if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self")
    return frozenset(names)


# Connection keywords that take Python objects (or that leaseq sets itself): a URL's text
# cannot be one, so they are not URL options.
_NOT_FROM_URLS = frozenset({
    "command_packer", "credential_provider", "event_dispatcher", "parser", "parser_class",
    "redis_connect_func", "retry", "socket_keepalive_options", "socket_type", "driver_info",
    "himport_registry", "ssl_ocsp_context", "host", "port", "decode_responses",
})


@functools.cache
def url_options() -> frozenset[str]:
    """The query parameters redis-py reads from a ``redis://`` URL for its connections
    (``client_name``, ``socket_timeout``, ``ssl_ca_certs``, ...): its URL parsers' names
    and its connection options that a text value can set. Internal ones (the maintenance
    notifications' bookkeeping) are left out."""
    names = set(connection_options()) | set(redis.connection.URL_QUERY_ARGUMENT_PARSERS)
    return frozenset(name for name in names if name not in _NOT_FROM_URLS
                     and not name.startswith(("maint", "orig_", "oss_")))


def _sentinel(item: str, shown: str) -> tuple[str, int]:
    parts = urlsplit(f"//{item}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port == -1 or not parts.hostname or (port is not None and not 0 < port < 65536):
        raise ConfigurationError(f"{shown!r}: bad Sentinel address {item!r} (host:port)")
    return parts.hostname, port or SENTINEL_PORT


def _sentinel_kwargs(target: Target, timeout: float | None) -> dict[str, Any]:
    # A Sentinel that accepts the connection and then hangs must not hold a caller for
    # ever: the connect timeout bounds its replies too. redis-py's retries are off, as
    # for the data nodes; the next connection asks again.
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 0), **target.sentinel_options}


CONFIRM_EVERY = 1.0
"""Seconds between two confirmations of the primary by a pool in use: the first
connection taken after this long asks the Sentinels which node is the primary and checks
that its own server says it is one. So a call that starts more than about this long after
the Sentinels switched to a new primary (``+switch-master``) is served by it (design
§64): one question to a Sentinel and one script run per second and pool, never one per
call."""
CONFIRM_BACKOFF = 30.0
"""At most this many seconds between two confirmations while no Sentinel answers
(doubling from ``CONFIRM_EVERY``): the primary may well be fine, and a Sentinel that
does not answer holds the call that asks it up to ``connect_timeout`` per Sentinel."""
Check = Callable[[Any], Any]
"""The epoch hook's ``check``: runs on a connection, raises ``NotPrimary`` on a replica."""


class NotPrimary(redis.exceptions.ConnectionError):
    """The server a Sentinel client's connection reached is not the primary: a replica
    (seen when the connection opened, or at a confirmation) or a demoted primary that
    answered ``READONLY``. A ``ConnectionError``, so the call is handled as after a
    dropped connection: a repeatable one runs again on a new connection, which asks the
    Sentinels again; a write that is not repeated raises ``OutcomeUnknown``."""


class Schedule:
    """When a pool next confirms the primary (``CONFIRM_EVERY``), backing off while no
    Sentinel answers (``CONFIRM_BACKOFF``). Shared by the threads of a sync pool: ``due``
    is true for one caller per period. ``clock``: seconds, ``time.monotonic`` but in
    tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Not at once: a new pool has no connection, and each new one asks the Sentinels.
        self.next = clock() + CONFIRM_EVERY
        self.failures = 0
        self.lock = threading.Lock()

    def due(self) -> bool:
        """True, once, when a confirmation is due; the next is then due a period later."""
        now = self.clock()
        if now < self.next:  # the hot path: no lock
            return False
        with self.lock:
            if now < self.next:
                return False  # another thread took this one
            self.next = now + CONFIRM_EVERY
            return True

    def answered(self, ok: bool) -> None:
        """Whether the Sentinels answered the confirmation ``due`` started: if not, the
        next one waits 2, 4, ... seconds, at most ``CONFIRM_BACKOFF``."""
        self.failures = 0 if ok else self.failures + 1
        if self.failures:
            self.next = self.clock() + min(CONFIRM_BACKOFF,
                                           CONFIRM_EVERY * 2 ** self.failures)


# What keeps a confirmation from learning anything: no Sentinel answers, every one says
# it monitors no such service (an operator re-adding it), or refuses the credentials.
# The connections in hand are kept then: the primary they reach may well be fine.
UNANSWERED = (redis.exceptions.RedisError, ConfigurationError)


class PrimaryConnection(redis.sentinel.SentinelManagedConnection):
    """redis-py's Sentinel connection, which also makes its pool forget the primary
    (``forget``) when it finds a replica there: refused when it opens (the epoch hook's
    ``NotPrimary``) or answered ``READONLY`` (redis-py closes only this connection and
    raises a ``ConnectionError``; here it is a ``NotPrimary``)."""

    def pool(self) -> Any:
        """The pool that made this connection (redis-py holds a weak reference)."""
        return self.connection_pool.connection_pool_ref()

    def connect(self) -> None:
        try:
            super().connect()  # type: ignore[no-untyped-call]
        except NotPrimary:
            if (pool := self.pool()) is not None:
                pool.forget()
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.exceptions.ConnectionError as exc:
            if not isinstance(exc.__context__, redis.exceptions.ReadOnlyError):
                raise
            if (pool := self.pool()) is not None:
                pool.forget()
            raise demoted(self) from exc.__context__


class PrimarySSLConnection(PrimaryConnection, redis.connection.SSLConnection):
    """``PrimaryConnection`` over TLS."""


class AsyncPrimaryConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """``PrimaryConnection`` for asyncio (its ``connection_pool`` is a weak proxy of the
    pool itself)."""

    async def connect(self) -> None:
        try:
            await super().connect()  # type: ignore[no-untyped-call]
        except NotPrimary:
            await self.connection_pool.forget()
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except redis.exceptions.ConnectionError as exc:
            if not isinstance(exc.__context__, redis.exceptions.ReadOnlyError):
                raise
            await self.connection_pool.forget()
            raise demoted(self) from exc.__context__


class AsyncPrimarySSLConnection(AsyncPrimaryConnection, redis.asyncio.connection.SSLConnection):
    """``AsyncPrimaryConnection`` over TLS."""


def demoted(conn: Any) -> NotPrimary:
    """What a ``READONLY`` reply on a primary's connection says."""
    return NotPrimary(f"Redis at {conn.host}:{conn.port} answered READONLY: it is a replica "
                      "now, no longer the primary (a failover)")


def primary_options(kwargs: dict[str, Any], plain: type, tls: type) -> Check | None:
    """Takes leaseq's ``confirm`` out of a Sentinel pool's ``kwargs`` and picks its
    connection class (``plain`` or, with ``ssl``, ``tls``), as redis-py picks its own."""
    kwargs["connection_class"] = tls if kwargs.pop("ssl", False) else plain
    confirm: Check | None = kwargs.pop("confirm", None)
    return confirm


# redis-py's pools are untyped; their methods are reached through ``base: Any = super()``
# rather than with an ignore on every call.


class BlockingSentinelPool(redis.sentinel.SentinelConnectionPool,
                           redis.BlockingConnectionPool):
    """redis-py's Sentinel pool with the blocking pool's checkout (at most
    ``max_connections``, and a caller waits up to ``timeout`` for a free one, as leaseq's
    pool does on a plain ``redis://`` URL) and the checks on the primary of design §64.
    ``confirm``: the epoch hook's ``check`` (``sync_client``)."""

    def __init__(self, service_name: str, sentinel_manager: Any, **kwargs: Any) -> None:
        self.confirm = primary_options(kwargs, PrimaryConnection, PrimarySSLConnection)
        base: Any = super()
        base.__init__(service_name, sentinel_manager, **kwargs)

    def reset(self) -> None:
        """redis-py's reset (also after a fork), and a new ``Schedule``."""
        base: Any = super()
        base.reset()
        self.schedule = Schedule()

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """A connection to the primary; about once a second, confirmed (``CONFIRM_EVERY``)."""
        base: Any = super()
        if not self.schedule.due():
            return base.get_connection(*args, **kwargs)
        try:
            # redis-py's own: on a changed answer the idle connections are closed, and
            # the ones in use when they are given back (owns_connection).
            base.get_master_address()
            self.schedule.answered(True)
        except UNANSWERED:
            self.schedule.answered(False)
        connection = base.get_connection(*args, **kwargs)
        if self.confirm is None:
            return connection
        try:
            self.confirm(connection)
            return connection
        except NotPrimary:
            self.forget()  # the Sentinels named a replica: its other connections go too
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            connection.disconnect()
        except BaseException:
            base.release(connection)
            raise
        # Nothing of the caller's was sent: a new connection, whose hook refuses a replica.
        base.release(connection)
        return base.get_connection(*args, **kwargs)

    def forget(self) -> None:
        """Forgets the primary: the idle connections close now, the ones in use when they
        are given back, and the next one asks the Sentinels (after a ``READONLY``, or a
        primary found to be a replica)."""
        # master_address None: owns_connection is then false for every connection.
        self.proxy.reset()  # type: ignore[no-untyped-call]
        self.disconnect(inuse_connections=False)

    def disconnect(self, inuse_connections: bool = True) -> None:
        """All connections, or (as the Sentinel pool asks when the primary moved) only
        the idle ones, which the sync blocking pool of redis-py 5.0 cannot do."""
        if inuse_connections:
            super().disconnect()
            return
        for connection in [c for c in list(self.pool.queue) if c is not None]:
            connection.disconnect()


class AsyncBlockingSentinelPool(redis.asyncio.sentinel.SentinelConnectionPool,
                                redis.asyncio.BlockingConnectionPool):
    """``BlockingSentinelPool`` for asyncio."""

    def __init__(self, service_name: str, sentinel_manager: Any, **kwargs: Any) -> None:
        self.confirm = primary_options(kwargs, AsyncPrimaryConnection,
                                       AsyncPrimarySSLConnection)
        base: Any = super()
        base.__init__(service_name, sentinel_manager, **kwargs)
        self.schedule = Schedule()  # redis-py's async pool does not call reset here

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        """See ``BlockingSentinelPool.get_connection``."""
        base: Any = super()
        if not self.schedule.due():
            return await base.get_connection(*args, **kwargs)
        try:
            await base.get_master_address()
            self.schedule.answered(True)
        except UNANSWERED:
            self.schedule.answered(False)
        connection = await base.get_connection(*args, **kwargs)
        if self.confirm is None:
            return connection
        try:
            await self.confirm(connection)
            return connection
        except NotPrimary:
            await self.forget()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            await connection.disconnect()
        except BaseException:
            await self.release(connection)
            raise
        await self.release(connection)
        return await base.get_connection(*args, **kwargs)

    async def release(self, connection: Any) -> None:
        """Gives ``connection`` back, closed first when it reaches a replaced primary, as
        the sync pool does (``owns_connection``): redis-py's async pool never asks (and
        its ``owns_connection`` calls a parent method the async pool lacks)."""
        if self.master_address != (connection.host, connection.port):
            await connection.disconnect()
        base: Any = super()
        await base.release(connection)

    async def forget(self) -> None:
        """See ``BlockingSentinelPool.forget``."""
        self.master_address = None
        await self.disconnect(inuse_connections=False)


class Sentinel(redis.sentinel.Sentinel):
    """redis-py's ``Sentinel``, whose failure to find the primary says why
    (``missing``)."""

    def discover_master(self, service_name: str) -> Any:
        try:
            return super().discover_master(service_name)  # type: ignore[no-untyped-call]
        except redis.sentinel.MasterNotFoundError as exc:
            answers = []
            for sentinel in self.sentinels:
                try:
                    answer = sentinel.execute_command(  # type: ignore[no-untyped-call]
                        "SENTINEL MASTER", service_name)
                except redis.RedisError as error:
                    answer = error
                answers.append((_address(sentinel), answer))
            raise missing(service_name, answers, type(exc)) from exc


class AsyncSentinel(redis.asyncio.sentinel.Sentinel):
    """``Sentinel`` for asyncio."""

    async def discover_master(self, service_name: str) -> Any:
        try:
            return await super().discover_master(service_name)
        except redis.asyncio.sentinel.MasterNotFoundError as exc:
            answers = []
            for sentinel in self.sentinels:
                try:
                    answer = await sentinel.execute_command(  # type: ignore[no-untyped-call]
                        "SENTINEL MASTER", service_name)
                except redis.RedisError as error:
                    answer = error
                answers.append((_address(sentinel), answer))
            raise missing(service_name, answers, type(exc)) from exc


def _address(client: Any) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


def missing(service: str, answers: list[tuple[str, Any]],
            not_found: type[Exception]) -> Exception:
    """Why no primary of ``service`` was found, from each Sentinel's answer to
    ``SENTINEL MASTER`` (asked only then: never on the hot path). A
    ``ConfigurationError`` when every Sentinel answered and none monitors ``service``; an
    ``AuthenticationError`` when every one refused the credentials; else ``not_found``
    (redis-py's ``MasterNotFoundError``, a ``ConnectionError``: the primary may be back in
    a moment, as after a failover) naming each Sentinel's view."""
    if answers and all(isinstance(a, redis.ResponseError) and UNKNOWN in str(a).lower()
                       for _, a in answers):
        return ConfigurationError(
            f"the Redis Sentinels monitor no service {service!r}: check the name after "
            f"the hosts in the URL ({FORM})"
        )
    refused = [a for _, a in answers
               if isinstance(a, (redis.AuthenticationError, redis.exceptions.AuthorizationError))]
    if answers and len(refused) == len(answers):
        # Not retried, and translated to AuthenticationFailed, as for a data node.
        return redis.AuthenticationError(
            f"the Redis Sentinels refused the credentials ({refused[0]}): their password "
            "goes in the URL's sentinel_password= (and sentinel_username=); the one "
            "before @ is the data nodes'"
        )
    views = []
    for address, answer in answers:
        if isinstance(answer, redis.ResponseError):
            views.append(f"{address} answered {answer}")
        elif isinstance(answer, Exception):
            views.append(f"{address} is unreachable ({answer})")
        else:
            flags = answer.get("flags", "")
            flags = flags if isinstance(flags, str) else ",".join(sorted(flags))
            views.append(f"{address} sees {answer.get('ip')}:{answer.get('port')} as {flags}")
    return not_found(f"no primary for service {service!r} (a failover under way, or no "
                     f"Sentinel reachable): {'; '.join(views)}")


def sync_client(target: Target, options: Mapping[str, Any],
                confirm: Check | None = None) -> tuple[Any, Any]:
    """A ``redis.Redis`` on the current primary with a ``BlockingSentinelPool`` (options:
    ``pool_options``, which the URL's own override), and its ``Sentinel``. ``confirm``:
    the epoch hook's ``check``, which the pool runs about once a second; without it (a
    side connection) the pool still asks the Sentinels. To close: the client, its
    ``connection_pool`` (older redis-py leaves it open), ``close_sentinels``."""
    manager = Sentinel(  # type: ignore[no-untyped-call]
        target.sentinels,
        sentinel_kwargs=_sentinel_kwargs(target, options.get("socket_connect_timeout")),
    )
    client = manager.master_for(  # type: ignore[no-untyped-call]
        target.service, connection_pool_class=BlockingSentinelPool, confirm=confirm,
        **{**options, **target.options},
    )
    return client, manager


def async_client(target: Target, options: Mapping[str, Any],
                 confirm: Check | None = None) -> tuple[Any, Any]:
    """``sync_client`` for asyncio (``aclose_sentinels``); ``confirm`` is a coroutine
    function."""
    manager = AsyncSentinel(  # type: ignore[no-untyped-call]
        target.sentinels,
        sentinel_kwargs=_sentinel_kwargs(target, options.get("socket_connect_timeout")),
    )
    client = manager.master_for(target.service,
                                connection_pool_class=AsyncBlockingSentinelPool,
                                confirm=confirm, **{**options, **target.options})
    return client, manager


def close_sentinels(manager: Any) -> None:
    """Closes the connections ``manager`` (a ``Sentinel``) holds to the Sentinels:
    redis-py's own ``Sentinel.close`` only came with 8.1."""
    for sentinel in manager.sentinels:
        sentinel.close()


async def aclose_sentinels(manager: Any) -> None:
    """``close_sentinels`` for an ``AsyncSentinel``."""
    for sentinel in manager.sentinels:
        await sentinel.aclose()
