"""Storage backends behind one contract (``base.Backend``), chosen by URL scheme."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from leaseq._core.settings import Settings
from leaseq.backends.capabilities import Capabilities, Drivers
from leaseq.backends.postgres.url import NO_PUSH
from leaseq.errors import ConfigurationError

_memory_stores: dict[str, Any] = {}
_memory_lock = threading.Lock()

SCHEMES = (
    "sqlite:///path.db, postgresql://user@host/db, mysql://user@host/db, "
    "redis://host:6379/0, redis+cluster://host:7000, redis+sentinel://host:26379/service "
    "or memory://"
)


def create_backend(url: str, settings: Settings, use_async: bool) -> Any:
    """A backend for ``url``: a ``Backend``, or an ``AsyncBackend`` when ``use_async``."""
    family = _family(url)
    if family == "memory":
        return _memory(url, use_async)
    if family == "sqlite":
        from leaseq.backends.sqlite.driver import create

        return create(url, settings, use_async)
    module, extra, driver = _DRIVERS[family]
    return _optional(module, extra, driver).create(url, settings, use_async)


_FAMILIES = {
    "memory": "memory", "sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres",
    "mysql": "mysql", "mariadb": "mysql", "redis": "redis", "rediss": "redis",
    "redis+sentinel": "redis", "rediss+sentinel": "redis",
    "redis+cluster": "redis_cluster", "rediss+cluster": "redis_cluster",
}
"""URL scheme to the kind of backend serving it (a Redis Cluster is Redis without turns)."""

_DRIVERS = {
    "postgres": ("leaseq.backends.postgres.driver", "postgres", "psycopg"),
    "mysql": ("leaseq.backends.mysql.driver", "mysql", "PyMySQL"),
    "redis": ("leaseq.backends.redis.driver", "redis", "redis-py"),
    "redis_cluster": ("leaseq.backends.redis.driver", "redis", "redis-py"),
}


def _family(url: str) -> str:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"not a leaseq URL: {url!r}; use {SCHEMES}")
    scheme = url.split("://", 1)[0].lower()
    try:
        return _FAMILIES[scheme]
    except KeyError:
        raise ConfigurationError(
            f"unsupported URL scheme {scheme!r} in {url!r}; use {SCHEMES}") from None


def capabilities_for(url: str) -> Capabilities:
    """What the backend of ``url`` has besides its operations (push wake-ups, turns,
    the connections ``conn=`` joins, ...): ``backends.capabilities``. Imports no driver:
    each callable loads its backend's module when first called."""
    return _CAPABILITIES[_family(url)]


def _lazy(module: str, name: str) -> Any:
    """``module.name``, imported on the first call: the registry must not import a
    driver (psycopg, PyMySQL, redis-py) that a client of another backend never needs."""
    import importlib

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args)

    call.__qualname__ = f"{module}.{name}"
    return call


_PG, _MY, _RE, _SQ = (f"leaseq.backends.{name}" for name in ("postgres", "mysql", "redis",
                                                               "sqlite"))
_REDIS = Capabilities(
    "redis",
    listener=_lazy(f"{_RE}.listen", "listen"),
    done_listener=_lazy(f"{_RE}.listen", "listen_done"),
    take_turns=_lazy(f"{_RE}.listen", "take_turns"),
)
_CAPABILITIES = {
    "memory": Capabilities("memory", group_commit=False),
    "sqlite": Capabilities(
        "sqlite",
        listener=_lazy(f"{_SQ}.listen", "listen"),
        done_listener=_lazy(f"{_SQ}.listen", "listen_done"),
        drivers=Drivers(frozenset({"sqlite"}), frozenset({"pysqlite"}),
                        frozenset({"aiosqlite"}), "sqlite:///", "sqlite+aiosqlite:///",
                        joins_aiosqlite=True),
    ),
    "postgres": Capabilities(
        "postgres",
        listener=_lazy(f"{_PG}.listen", "listen"),
        done_listener=_lazy(f"{_PG}.listen", "listen_done"),
        push_url=_lazy(f"{_PG}.listen", "push_url"),
        take_turns=_lazy(f"{_PG}.listen", "take_turns"),
        no_push=NO_PUSH,
        drivers=Drivers(frozenset({"postgresql"}), frozenset({"psycopg"}),
                        frozenset({"psycopg", "psycopg_async"}), "postgresql+psycopg://",
                        "postgresql+psycopg://"),
    ),
    "mysql": Capabilities(
        "mysql",
        take_turns=_lazy(f"{_MY}.turn", "take_turns"),
        turn_without_push=True,
        drivers=Drivers(frozenset({"mysql", "mariadb"}), frozenset({"pymysql", "mysqldb"}),
                        frozenset({"aiomysql"}), "mysql+pymysql://", "mysql+aiomysql://"),
    ),
    "redis": _REDIS,
    # A Cluster's keys live on several primaries: the turn's key would pick one of them,
    # and its workers answer every wake-up instead.
    "redis_cluster": replace(_REDIS, take_turns=None),
}

DDL_DIALECTS = ("mysql", "postgres", "sqlite")
"""The dialects ``leaseq schema --dialect`` prints (``ddl``)."""


def ddl(dialect: str, table_prefix: str) -> str:
    """The DDL of ``dialect`` (one of ``DDL_DIALECTS``) under ``table_prefix``, with the
    SQL enqueue function or procedure where the dialect has one."""
    from leaseq.backends._sql.ddl import ddl as text

    return text(dialect, table_prefix)


def _optional(module: str, extra: str, driver: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"the {extra} backend needs {driver}: pip install 'leaseq[{extra}]' ({exc})"
        ) from exc


def _memory(url: str, use_async: bool) -> Any:
    from leaseq.backends._urls import refuse_unknown
    from leaseq.backends.memory import AsyncMemoryBackend, MemoryBackend

    name = url.split("://", 1)[1]
    # memory:// takes no options: a "?" would otherwise end up in the store's name.
    refuse_unknown(url, (), "memory://")
    with _memory_lock:
        # memory:// alone is a private store per client; memory://name is shared by every
        # client in the process that names it.
        store = _memory_stores.setdefault(name, MemoryBackend()) if name else MemoryBackend()
    return AsyncMemoryBackend(store) if use_async else store
