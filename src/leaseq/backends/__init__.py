"""Storage backends behind one contract (``base.Backend``), chosen by URL scheme."""

from __future__ import annotations

import threading
from typing import Any

from leaseq._core.settings import Settings
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
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"not a leaseq URL: {url!r}; use {SCHEMES}")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        return _memory(url, use_async)
    if scheme == "sqlite":
        from leaseq.backends.sqlite.driver import create

        return create(url, settings, use_async)
    if scheme in ("postgresql", "postgres"):
        module = _optional("leaseq.backends.postgres.driver", "postgres", "psycopg")
        return module.create(url, settings, use_async)
    if scheme in ("mysql", "mariadb"):
        module = _optional("leaseq.backends.mysql.driver", "mysql", "PyMySQL")
        return module.create(url, settings, use_async)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel",
                  "rediss+sentinel"):
        module = _optional("leaseq.backends.redis.driver", "redis", "redis-py")
        return module.create(url, settings, use_async)
    raise ConfigurationError(f"unsupported URL scheme {scheme!r} in {url!r}; use {SCHEMES}")


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
