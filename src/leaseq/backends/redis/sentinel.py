"""Redis behind Sentinel: ``redis+sentinel://`` URLs and the clients that follow a failover.

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/SERVICE[/db][?options]``
(``rediss+sentinel://`` for TLS) names the Sentinels (port 26379 unless given) and the
service they monitor. The credentials before ``@`` and the query options (as on a
``redis://`` URL: ``client_name``, ``socket_timeout``, ...) are for the data nodes, the
primary leaseq writes to; ``sentinel_username`` and ``sentinel_password`` in the query are
for the Sentinels themselves, which have a ``requirepass`` of their own (none by default).

The clients are redis-py's ``master_for`` clients: every new connection asks the
Sentinels for the current primary (``SENTINEL MASTERS``), idle pooled connections to a
replaced primary are closed when the answer changes, and a ``READONLY`` reply (a demoted
primary still holding the connection) drops that connection and surfaces as a
``ConnectionError``, so the next connection rediscovers. Nothing here runs on the hot
path: the lookup happens only when a connection is opened.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
import redis.asyncio
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


class BlockingSentinelPool(redis.sentinel.SentinelConnectionPool,
                           redis.BlockingConnectionPool):
    """redis-py's Sentinel pool with the blocking pool's checkout: at most
    ``max_connections``, and a caller waits up to ``timeout`` for a free one, as leaseq's
    pool does on a plain ``redis://`` URL."""

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


def sync_client(target: Target, options: Mapping[str, Any]) -> tuple[Any, Any]:
    """A ``redis.Redis`` on the current primary with a ``BlockingSentinelPool`` (options:
    ``pool_options``, which the URL's own override), and its ``Sentinel``. To close: the
    client, its ``connection_pool`` (older redis-py leaves it open), ``close_sentinels``."""
    manager = Sentinel(  # type: ignore[no-untyped-call]
        target.sentinels,
        sentinel_kwargs=_sentinel_kwargs(target, options.get("socket_connect_timeout")),
    )
    client = manager.master_for(  # type: ignore[no-untyped-call]
        target.service, connection_pool_class=BlockingSentinelPool,
        **{**options, **target.options},
    )
    return client, manager


def async_client(target: Target, options: Mapping[str, Any]) -> tuple[Any, Any]:
    """``sync_client`` for asyncio (``aclose_sentinels``)."""
    manager = AsyncSentinel(  # type: ignore[no-untyped-call]
        target.sentinels,
        sentinel_kwargs=_sentinel_kwargs(target, options.get("socket_connect_timeout")),
    )
    client = manager.master_for(target.service,
                                connection_pool_class=AsyncBlockingSentinelPool,
                                **{**options, **target.options})
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
