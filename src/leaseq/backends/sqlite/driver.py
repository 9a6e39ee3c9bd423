"""SQLite: the embedded default. WAL mode, one ``BEGIN IMMEDIATE`` transaction per write,
times as REAL unix seconds. The async client runs each whole plan in a worker thread."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from leaseq._core.settings import Settings
from leaseq.backends._sql.backend import SqlBackend
from leaseq.backends._sql.ops import Dialect, SqlOps
from leaseq.backends._sql.plan import Plan, Result, Stmt, drive, load_migrations
from leaseq.backends._sql.runner import Pool, PooledSyncRunner, ThreadedAsyncRunner
from leaseq.backends._urls import refuse_unknown
from leaseq.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseqError,
    SchemaMissing,
)

T = TypeVar("T")
PACKAGE = "leaseq.backends.sqlite"


class SqliteDialect(Dialect):
    name = "sqlite"
    package = PACKAGE
    paramstyle = "named"
    # A compound SELECT takes ORDER BY/LIMIT only at its end: each branch is a subquery.
    branch = "SELECT * FROM ({})"

    def ts(self, value: datetime | None) -> Any:
        return None if value is None else value.timestamp()

    def dt(self, value: Any) -> datetime | None:
        return None if value is None else datetime.fromtimestamp(value, timezone.utc)

    def ids(self, ids: Sequence[int]) -> Any:
        return json.dumps(list(ids))

    def names(self, names: Sequence[str]) -> Any:
        return json.dumps(list(names))

    def pairs(self, pairs: Sequence[tuple[int, int]]) -> Any:
        return json.dumps([list(pair) for pair in pairs])

    def later(self, now: Any, seconds: float) -> Any:
        return now + seconds  # REAL + REAL: the same IEEE addition SQLite would make


class SqliteRunner(PooledSyncRunner[sqlite3.Connection]):
    def __init__(self, path: str, dialect: SqliteDialect, settings: Settings) -> None:
        self.path = path
        self.d = dialect
        self.timeout = settings.connect_timeout
        super().__init__(Pool(self.connect, sqlite3.Connection.close, settings.pool_size,
                              settings.connect_timeout))

    def connect(self, create: bool = False) -> sqlite3.Connection:
        """A connection to the database file; only ``migrate`` (``create``) makes the file,
        so a read (``leaseq stats`` in the wrong directory) leaves no empty database
        behind and says to migrate instead."""
        try:
            # isolation_level=None: leaseq issues BEGIN/COMMIT itself.
            target, uri = (self.path, False) if create else (
                Path(self.path).absolute().as_uri() + "?mode=rw", True)
            conn = sqlite3.connect(target, timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False, uri=uri)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a crash of any process; only an OS crash or power
            # loss can drop the last commits (docs/design.md, "SQLite durability").
            conn.execute("PRAGMA synchronous=NORMAL")
            return conn
        except sqlite3.Error as exc:
            if not create and not Path(self.path).exists():
                raise SchemaMissing(
                    f"no SQLite database at {self.path!r}: run `leaseq migrate` or "
                    "Queue.migrate() to create it") from exc
            raise BackendUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from exc

    def begin(self, conn: sqlite3.Connection, write: bool) -> None:
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def execute(self, conn: sqlite3.Connection, stmt: Stmt) -> Result:
        sql = self.d.q[stmt.name]
        if stmt.many:
            params: Sequence[Any] = stmt.params  # type: ignore[assignment]
            conn.executemany(sql, params)
            # One writer holds the database, so the batch got consecutive AUTOINCREMENT ids.
            last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
            return Result([(i,) for i in range(last - len(params) + 1, last + 1)], len(params))
        cur = conn.execute(sql, stmt.params)
        rows = cur.fetchall()
        return Result(rows, cur.rowcount, cur.lastrowid)

    def commit(self, conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")

    def do_rollback(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def run_in_caller(self, conn: Any, plan: Plan[T]) -> T:
        if not isinstance(conn, sqlite3.Connection):
            raise ConfigurationError(
                f"conn must be a sqlite3.Connection for a SQLite queue, got {type(conn).__name__}"
            )
        if not conn.in_transaction:
            # Open the caller's transaction now, so the job commits or rolls back with it.
            conn.execute("BEGIN IMMEDIATE")
        conn.execute("SAVEPOINT leaseq")
        try:
            result = drive(plan, lambda stmt: self.execute(conn, stmt))
        except BaseException:
            conn.execute("ROLLBACK TO leaseq")
            conn.execute("RELEASE leaseq")
            raise
        conn.execute("RELEASE leaseq")
        return result

    def retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in str(exc) or "busy" in str(exc)
        )

    def is_disconnect(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc)

    def translate(self, exc: BaseException) -> LeaseqError:
        if isinstance(exc, LeaseqError):
            return exc
        text = str(exc)
        if "no such table" in text:
            return SchemaMissing(
                f"leaseq tables missing in {self.path!r} ({text}): run `leaseq migrate` "
                "or Queue.migrate()"
            )
        if isinstance(exc, sqlite3.OperationalError):
            return BackendUnavailable(f"SQLite database {self.path!r} failed: {text}")
        return BackendError(f"SQLite database {self.path!r} failed: {text}")

    def migrate(self) -> list[str]:
        q = self.d.q
        applied: list[str] = []
        try:
            conn = self.connect(create=True)
            try:
                conn.execute("BEGIN IMMEDIATE")  # serialises concurrent migrators
                conn.execute(q["migrations_table"])
                done = {v for (v,) in conn.execute(q["applied_versions"])}
                for version, name, statements in load_migrations(PACKAGE, self.d.prefix):
                    if version not in done:
                        for sql in statements:
                            conn.execute(sql)
                        conn.execute(q["record_version"], {"version": version, "name": name})
                        applied.append(f"{version:04d}_{name}")
                conn.execute("COMMIT")
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise self.translate(exc) from exc
        return applied


def sqlite_path(url: str) -> str:
    """``sqlite:///jobs.db`` → ``jobs.db``; ``sqlite:////var/jobs.db`` → ``/var/jobs.db``."""
    rest = url.split("://", 1)[1]
    path = rest[1:] if rest.startswith("/") else rest
    path = path.split("?", 1)[0]
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"{url!r} names no database file; use sqlite:///path/to/jobs.db, or memory:// "
            "for an in-process queue"
        )
    return path


def create(url: str, settings: Settings, use_async: bool) -> SqlBackend:
    # The path is all a SQLite URL says: sqlite_path used to drop a query unread.
    refuse_unknown(url, (), "sqlite://")
    dialect = SqliteDialect(settings.table_prefix)
    runner = SqliteRunner(sqlite_path(url), dialect, settings)
    face: Any = ThreadedAsyncRunner(runner) if use_async else runner
    return SqlBackend("sqlite", SqlOps(dialect), face)
