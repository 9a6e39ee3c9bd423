"""``settings.LEASEQ`` read and checked, a Django database's settings as a leaseq URL, and
the ``App`` built from them.

    LEASEQ = {"DATABASE": "default"}            # leaseq's tables in a Django database
    LEASEQ = {"URL": "postgresql://.../jobs"}   # or in a database Django does not use
    LEASEQ = {"DATABASE": "default", "SETTINGS": {"table_prefix": "jobs_", "lease": 60}}

Only a ``DATABASE`` is joined: an enqueue or ack inside that database's
``transaction.atomic()`` writes through Django's own connection, in Django's transaction.
The URL is read from the database's settings when the queue first opens (not at import),
so it names whatever database Django's connection names then, a test database included.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

import leaseq
from leaseq import App, ConfigurationError, Queue

KEYS = ("DATABASE", "URL", "SETTINGS")
"""The keys ``settings.LEASEQ`` may have."""

# Django's own OPTIONS of its PostgreSQL backend: not libpq parameters, so not in the URL.
_DJANGO_PG_OPTIONS = frozenset({
    "isolation_level", "pool", "server_side_binding", "assume_role", "cursor_factory",
})


@dataclass(frozen=True)
class Config:
    """``settings.LEASEQ``, checked."""

    database: str | None
    """Alias of the Django database leaseq's tables live in and whose transactions an
    enqueue joins; None when only ``url`` is given."""
    url: str | None
    """A leaseq URL used instead of the database's settings."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """``leaseq.Settings`` fields (``table_prefix``, ``lease``, ``pool_size``, ...)."""

    @property
    def alias(self) -> str:
        """The Django database whose ``manage.py migrate`` creates leaseq's tables."""
        return self.database or DEFAULT_DB_ALIAS


def read_config() -> Config:
    """``settings.LEASEQ`` (``{"DATABASE": "default"}`` when absent), checked.

    Raises:
        ConfigurationError: Django's settings are not configured, or ``LEASEQ`` has an
            unknown key, a wrong type or a database alias ``DATABASES`` lacks.
    """
    try:
        raw = getattr(django_settings, "LEASEQ", None)
        databases = django_settings.DATABASES
    except (ImproperlyConfigured, ImportError) as exc:  # no settings, or none importable
        raise ConfigurationError(
            f"leaseq.contrib.django needs Django's settings (DJANGO_SETTINGS_MODULE): {exc}"
        ) from exc
    if raw is None:
        raw = {"DATABASE": DEFAULT_DB_ALIAS}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"settings.LEASEQ must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigurationError(
            f"settings.LEASEQ has unknown keys {unknown}; it takes {', '.join(KEYS)}")
    database, url = raw.get("DATABASE"), raw.get("URL")
    if database is None and url is None:
        database = DEFAULT_DB_ALIAS
    if database is not None and (not isinstance(database, str) or database not in databases):
        raise ConfigurationError(
            f"settings.LEASEQ['DATABASE'] must name a database of settings.DATABASES "
            f"({', '.join(sorted(databases))}), got {database!r}")
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"settings.LEASEQ['URL'] must be a string, got {url!r}")
    options = raw.get("SETTINGS") or {}
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"settings.LEASEQ['SETTINGS'] must be a dict of leaseq.Settings fields, "
            f"got {options!r}")
    try:
        leaseq.Settings(**options)  # checked now, with the key named, not at first enqueue
    except TypeError as exc:
        raise ConfigurationError(f"settings.LEASEQ['SETTINGS']: {exc}") from exc
    return Config(database, url, dict(options))


def database_url(vendor: str, params: Mapping[str, Any], alias: str = "?") -> str:
    """The leaseq URL of a Django database: its connection's ``vendor`` and
    ``settings_dict``.

    Raises:
        ConfigurationError: A backend leaseq does not run on, an in-memory SQLite
            database, or a MySQL database reached through a socket or an option file.
    """
    # Django's vendor names (connection.vendor), not leaseq's backend names.
    urls: dict[str, Callable[[], str]] = {
        "sqlite": lambda: _sqlite_url(params, alias),
        "postgresql": lambda: _postgres_url(params),
        "mysql": lambda: _mysql_url(params, alias),
    }
    if vendor in urls:
        return urls[vendor]()
    raise ConfigurationError(
        f"Django database {alias!r} is {vendor}; leaseq runs on PostgreSQL, MySQL/MariaDB "
        "and SQLite (or set settings.LEASEQ['URL'])")


def _netloc(params: Mapping[str, Any], default_host: str) -> str:
    user = quote(str(params.get("USER") or ""), safe="")
    password = params.get("PASSWORD")
    if password:
        user += ":" + quote(str(password), safe="")
    host = str(params.get("HOST") or default_host)
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    port = params.get("PORT")
    where = f"{host}:{port}" if port else host
    return f"{user}@{where}" if user else where


def _postgres_url(params: Mapping[str, Any]) -> str:
    options = {k: v for k, v in (params.get("OPTIONS") or {}).items()
               if k not in _DJANGO_PG_OPTIONS and isinstance(v, (str, int, float))}
    host = str(params.get("HOST") or "")
    if host.startswith("/"):
        # A Unix socket directory goes in the query: it is no host name.
        options["host"] = host
        params = {**params, "HOST": ""}
    name = quote(str(params.get("NAME") or ""), safe="")
    query = f"?{urlencode(options)}" if options else ""
    return f"postgresql://{_netloc(params, '')}/{name}{query}"


def _mysql_url(params: Mapping[str, Any], alias: str) -> str:
    options = params.get("OPTIONS") or {}
    host = str(params.get("HOST") or "")
    if host.startswith("/") or "unix_socket" in options or "read_default_file" in options:
        raise ConfigurationError(
            f"Django database {alias!r} is reached through a socket or an option file; "
            "leaseq connects over TCP: set settings.LEASEQ['URL'] = 'mysql://user:pw@host/db'")
    name = quote(str(params.get("NAME") or ""), safe="")
    charset = options.get("charset")
    query = f"?{urlencode({'charset': charset})}" if charset else ""
    return f"mysql://{_netloc(params, '127.0.0.1')}/{name}{query}"


def _sqlite_url(params: Mapping[str, Any], alias: str) -> str:
    name = str(params.get("NAME") or "")
    if not name or name == ":memory:" or "mode=memory" in name:
        raise ConfigurationError(
            f"Django database {alias!r} is an in-memory SQLite database, which leaseq's "
            "workers cannot reach: give it a file (for Django's test runner: "
            "DATABASES[...]['TEST'] = {'NAME': 'test.sqlite3'}), or set "
            "settings.LEASEQ['URL']")
    # Absolute, so a worker started from another directory opens the same file.
    return "sqlite:///" + os.path.abspath(name)


def joiner(alias: str) -> Callable[[], Any]:
    """The ``Queue.default_conn`` of a queue in Django database ``alias``: inside that
    database's ``transaction.atomic()``, its DB-API connection, so an enqueue or ack joins
    Django's transaction and commits or rolls back with it; outside, None.

    Outside an atomic block leaseq writes on its own connections: Django's would be in
    autocommit there, so joining it would add no atomicity, and it would cost concurrent
    enqueues their group commit and open a Django connection in every thread that
    enqueues (the worker's too) that Django never closes.
    """

    def current() -> Any:
        wrapper = connections[alias]
        if not wrapper.in_atomic_block:
            return None
        # As Django does for its own queries: an atomic block that caught a database error
        # must be left before anything else is written in it.
        wrapper.validate_no_broken_transaction()
        wrapper.ensure_connection()
        return _driver_connection(wrapper.vendor, wrapper.connection, alias)

    return current


def _driver_connection(vendor: str, conn: Any, alias: str) -> Any:
    """The DB-API connection under Django's, if leaseq can write in it."""
    driver = type(conn).__module__.split(".")[0]
    # Django's vendor name -> the one driver module leaseq writes with, and how to get it.
    wanted = {
        "postgresql": ("psycopg", f"Django database {alias!r} runs on {driver}; leaseq joins "
                       "Django's transaction through psycopg 3 only: `pip install "
                       "'psycopg[binary]'` (Django 4.2+ then uses it instead of psycopg2), or "
                       "enqueue outside transaction.atomic()"),
        "mysql": ("pymysql", f"Django database {alias!r} runs on {driver} (mysqlclient); "
                  "leaseq joins Django's transaction through PyMySQL only: call "
                  "pymysql.install_as_MySQLdb() in settings, or enqueue outside "
                  "transaction.atomic()"),
    }.get(vendor)
    if wanted is not None and driver != wanted[0]:
        raise ConfigurationError(wanted[1])
    return conn


class DjangoApp(App):
    """The ``App`` of a Django project (``leaseq.contrib.django.app``).

    Its URL comes from ``settings.LEASEQ`` and is read when the queue first opens; with a
    ``DATABASE``, its queue's enqueues and acks inside that database's
    ``transaction.atomic()`` join Django's transaction. ``async_queue`` never joins:
    Django's atomic blocks are sync only.
    """

    def __init__(self, config: Config) -> None:
        super().__init__(config.url, **config.settings)
        self.config = config
        self._url: str | None = config.url  # App.__init__ set it to the SQLite default
        self._joins = joiner(config.database) if config.database is not None else None

    @property
    def url(self) -> str:
        """The database URL: ``LEASEQ['URL']``, one set by hand (``worker --url``), else
        the URL of ``LEASEQ['DATABASE']`` from Django's settings of it now."""
        if self._url is not None:
            return self._url
        wrapper = connections[self.config.alias]
        return database_url(wrapper.vendor, wrapper.settings_dict, self.config.alias)

    @url.setter
    def url(self, value: str) -> None:
        self._url = value

    @property
    def queue(self) -> Queue:
        """The app's ``Queue``, opened on first use, joining Django's transactions."""
        queue = super().queue
        if self._joins is not None:
            queue.default_conn = self._joins
        return queue


def setup() -> None:
    """``django.setup()`` unless Django's apps are ready or being loaded (a ``tasks.py``
    importing ``app`` while Django imports it): a worker process started outside
    ``manage.py`` (``--processes`` children, ``leaseq worker leaseq.contrib.django:app``)
    gets its apps, and so its tasks, this way. DJANGO_SETTINGS_MODULE names the settings."""
    from django.apps import apps

    if apps.ready or apps.loading:
        return
    import django

    try:
        django.setup()
    except ImproperlyConfigured as exc:
        raise ConfigurationError(f"cannot set Django up for leaseq: {exc}") from exc


_app: DjangoApp | None = None
_app_lock = threading.Lock()


def get_app() -> DjangoApp:
    """The project's app, built from ``settings.LEASEQ`` on first use."""
    global _app
    with _app_lock:
        if _app is None:
            _app = DjangoApp(read_config())
        return _app


def migrate_database(connection: Any) -> None:
    """Create or upgrade leaseq's tables when ``connection`` (a Django connection being
    migrated) is the database ``settings.LEASEQ`` names; other databases get none."""
    config = read_config()
    if connection.alias != config.alias:
        return
    url = config.url or database_url(connection.vendor, connection.settings_dict,
                                     connection.alias)
    queue = leaseq.connect(url, **config.settings)
    try:
        queue.migrate()
    finally:
        queue.close()
