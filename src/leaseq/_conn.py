"""The caller's connection behind ``conn=``.

``enqueue``, ``enqueue_many`` and ``ack`` take ``conn=`` to write in the caller's own
transaction. A backend joins a DB-API connection (psycopg, PyMySQL, sqlite3); a
framework's wrapper of one (SQLAlchemy, Django) is unwrapped here to the driver
connection underneath, so the backends never learn about frameworks.

SQLAlchemy is never imported here unless the caller already did: an object is taken for
a SQLAlchemy one by the modules of its classes, and only then are SQLAlchemy's classes
imported to tell a ``Connection`` from a ``Session``. The unwrapping first makes sure
SQLAlchemy's own transaction has begun (as executing a statement would), so leaseq's
statements land in it and commit or roll back with it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import weakref
from typing import Any

from leaseq.backends.capabilities import Capabilities
from leaseq.errors import ConfigurationError

# aiosqlite connections already seen usable from another thread (see _aiosqlite).
_cross_thread: weakref.WeakSet[Any] = weakref.WeakSet()


def caller_connection(conn: Any, caps: Capabilities | None = None) -> Any:
    """The DB-API connection that ``conn`` is or wraps, for a ``Queue`` on a backend with
    ``caps`` (None: any).

    A SQLAlchemy ``Connection`` or ``Session`` (or ``scoped_session``) gives its driver
    connection, inside its transaction (begun here if it was not yet); a pooled raw
    connection (``engine.raw_connection()``) gives the driver connection it proxies.
    Anything else is returned as it is, for the backend to check.

    Raises:
        ConfigurationError: ``conn`` is a SQLAlchemy object this cannot join: an
            ``Engine``, an asyncio object, a closed connection, or one to another kind of
            database or through a driver leaseq does not drive.
    """
    if not _is_sqlalchemy(conn):
        return conn
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.orm import Session, scoped_session
    from sqlalchemy.pool import PoolProxiedConnection

    if isinstance(conn, PoolProxiedConnection):
        # engine.raw_connection(): a DB-API connection the caller drives itself.
        return conn.driver_connection
    if isinstance(conn, (Session, scoped_session)):
        conn = conn.connection()  # begins the session's transaction when it has none
    elif isinstance(conn, Engine):
        raise _engine_error(conn, "with engine.begin() as conn:")
    elif not isinstance(conn, Connection):
        if _is_async_sqlalchemy(conn):
            raise ConfigurationError(
                f"conn is a SQLAlchemy {type(conn).__name__}, an asyncio object: pass it "
                "to an AsyncQueue (leaseq.connect_async), or pass a sync Connection or "
                "Session to Queue"
            )
        raise _unknown_error(conn)
    if conn.closed:
        raise ConfigurationError("conn is a closed SQLAlchemy Connection")
    _check_dialect(conn.dialect, caps, is_async=False)
    if not conn.in_transaction():
        conn.begin()  # what SQLAlchemy's autobegin does on the first statement
    return conn.connection.driver_connection


async def acaller_connection(conn: Any, caps: Capabilities | None = None) -> Any:
    """The asyncio driver connection that ``conn`` is or wraps, for an ``AsyncQueue``.

    A SQLAlchemy ``AsyncConnection`` or ``AsyncSession`` (or ``async_scoped_session``)
    gives its driver connection (psycopg ``AsyncConnection``, aiomysql ``Connection``,
    or for aiosqlite the ``sqlite3.Connection`` it runs) inside its transaction, begun
    here if it was not yet. Anything else is returned as it is, for the backend to check.

    Raises:
        ConfigurationError: as ``caller_connection``, for a sync SQLAlchemy object too.
    """
    if isinstance(conn, _aiosqlite_type()):
        return await _aiosqlite(conn, caps)
    if not _is_sqlalchemy(conn):
        return conn
    from sqlalchemy.ext.asyncio import (
        AsyncConnection,
        AsyncEngine,
        AsyncSession,
        async_scoped_session,
    )
    from sqlalchemy.pool import PoolProxiedConnection

    if isinstance(conn, PoolProxiedConnection):
        # await async_conn.get_raw_connection(): the caller drives it itself.
        return await _driver(conn.driver_connection, caps)
    if isinstance(conn, (AsyncSession, async_scoped_session)):
        conn = await conn.connection()  # begins the session's transaction when it has none
    elif isinstance(conn, AsyncEngine):
        raise _engine_error(conn, "async with engine.begin() as conn:")
    elif not isinstance(conn, AsyncConnection):
        if _is_async_sqlalchemy(conn):
            raise _unknown_error(conn)
        raise ConfigurationError(
            f"conn is a sync SQLAlchemy {type(conn).__name__}: an AsyncQueue joins an "
            "AsyncConnection or AsyncSession (sqlalchemy.ext.asyncio); pass the sync one "
            "to a Queue (leaseq.connect)"
        )
    if conn.closed:
        raise ConfigurationError("conn is a closed SQLAlchemy AsyncConnection")
    _check_dialect(conn.dialect, caps, is_async=True)
    if not conn.in_transaction():
        await conn.begin()  # what SQLAlchemy's autobegin does on the first statement
    raw = await conn.get_raw_connection()
    return await _driver(raw.driver_connection, caps)


async def _driver(driver: Any, caps: Capabilities | None) -> Any:
    """An asyncio driver connection as the backend joins it."""
    if isinstance(driver, _aiosqlite_type()):
        return await _aiosqlite(driver, caps)
    return driver


def _is_sqlalchemy(conn: Any) -> bool:
    """True when ``conn``'s class, or one it derives from, is SQLAlchemy's."""
    if "sqlalchemy" not in sys.modules:
        return False  # nothing can be a SQLAlchemy object before SQLAlchemy is imported
    return any(cls.__module__.startswith("sqlalchemy.") for cls in type(conn).__mro__)


def _is_async_sqlalchemy(conn: Any) -> bool:
    return any(cls.__module__.startswith("sqlalchemy.ext.asyncio")
               for cls in type(conn).__mro__)


def _engine_error(engine: Any, how: str) -> ConfigurationError:
    return ConfigurationError(
        f"conn is a SQLAlchemy {type(engine).__name__}, which has no transaction to join: "
        f"pass a Connection or Session in a transaction (`{how}`)"
    )


def _unknown_error(conn: Any) -> ConfigurationError:
    return ConfigurationError(
        f"conn is a SQLAlchemy {type(conn).__name__}: pass a Connection or Session "
        "(Queue) or an AsyncConnection or AsyncSession (AsyncQueue)"
    )


def _check_dialect(dialect: Any, caps: Capabilities | None, is_async: bool) -> None:
    """Refuses a connection to another kind of database, or through another driver,
    than the queue's backend drives: the job would be written somewhere else, or not."""
    name, driver = dialect.name, dialect.driver
    if caps is None:
        return
    drivers = caps.drivers
    if drivers is None or name not in drivers.dialects:
        raise ConfigurationError(
            f"conn is a SQLAlchemy connection to {name} ({name}+{driver}), but this queue "
            f"is on {caps.name}: conn= joins a transaction of the queue's own database"
        )
    if driver not in (drivers.async_ if is_async else drivers.sync):
        raise ConfigurationError(
            f"conn is a SQLAlchemy connection through {name}+{driver}, a driver leaseq "
            f"cannot write with: use a {drivers.async_url if is_async else drivers.sync_url} "
            "URL for the engine"
        )


def _aiosqlite_type() -> type[Any] | tuple[()]:
    """aiosqlite's ``Connection`` class when aiosqlite is imported, else nothing."""
    module = sys.modules.get("aiosqlite")
    return () if module is None else module.Connection


async def _aiosqlite(conn: Any, caps: Capabilities | None) -> sqlite3.Connection:
    """The ``sqlite3.Connection`` an aiosqlite connection runs in its own thread.

    An AsyncQueue on SQLite runs each operation in a worker thread
    (``ThreadedAsyncRunner``), so the connection must allow use from another thread:
    SQLAlchemy opens file databases with ``check_same_thread=False``; a plain
    ``aiosqlite.connect`` does not unless told. The caller awaits this enqueue or ack,
    so aiosqlite's own thread is idle with it meanwhile.
    """
    if caps is not None and (caps.drivers is None or not caps.drivers.joins_aiosqlite):
        raise ConfigurationError(
            f"conn is an aiosqlite connection, but this queue is on {caps.name}: conn= joins "
            "a transaction of the queue's own database"
        )
    try:
        inner = conn._conn  # aiosqlite's sqlite3 connection (it has no public name)
    except (AttributeError, ValueError):  # ValueError: aiosqlite's "no active connection"
        inner = None
    if not isinstance(inner, sqlite3.Connection):
        raise ConfigurationError(
            "conn is an aiosqlite connection whose sqlite3 connection leaseq cannot reach "
            "(closed, or an aiosqlite version that hides it)"
        )
    if conn not in _cross_thread:
        try:
            await asyncio.to_thread(inner.execute, "SELECT 1")
        except sqlite3.ProgrammingError as exc:
            raise ConfigurationError(
                "conn is an aiosqlite connection bound to its own thread: open it with "
                "check_same_thread=False so an AsyncQueue can write in its transaction "
                f"({exc})"
            ) from exc
        _cross_thread.add(conn)
    return inner
