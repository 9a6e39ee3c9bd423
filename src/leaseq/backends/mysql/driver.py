"""MySQL 8.0.1+ and MariaDB 10.6+ over PyMySQL (sync) and aiomysql (async).

Sessions run READ COMMITTED. Deadlocks (1213) and lock wait timeouts (1205) are retried
as whole transactions with jitter and never reach the caller. MySQL has no
``UPDATE ... RETURNING`` and no reliable way to learn the ids of a multi-row insert under
``innodb_autoinc_lock_mode=2``, so a batch insert tags its rows (``lease_token`` starts at
a random tag) and reads the ids back by tag.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

import pymysql
from pymysql.constants import CLIENT

from leaseq._core import redact
from leaseq._core.settings import Settings
from leaseq.backends import _sockets
from leaseq.backends._sql import epoch
from leaseq.backends._sql.backend import SqlBackend
from leaseq.backends._sql.ops import Dialect, SqlOps
from leaseq.backends._sql.plan import Plan, Result, Stmt, drive, load_migrations
from leaseq.backends._sql.routine import routine_text
from leaseq.backends._sql.runner import AsyncRunner, Pool, PooledSyncRunner
from leaseq.backends._urls import refuse_unknown
from leaseq.backends.base import NewJob, RenewOutcome
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseqError,
    SchemaMissing,
)

T = TypeVar("T")
PACKAGE = "leaseq.backends.mysql"
DEADLOCK, LOCK_WAIT_TIMEOUT = 1213, 1205
DUPLICATE_KEY = 1062
NO_SUCH_TABLE = 1146
DISCONNECTS = {2003, 2006, 2013, 2055, 0}
IDLE_CLOSED = 4031
"""MySQL 8.0.24+ (ER_CLIENT_INTERACTION_TIMEOUT): the server closed a session idle past
``wait_timeout`` and wrote this error to it first, so the next statement on that pooled
connection reads it instead of 2013. The statement never reached a live session and the
session's open transaction, if any, was rolled back: nothing was applied (design §60).
MariaDB closes such a session without a word (2013/2006)."""
BATCH_BYTES = 4 * 1024 * 1024  # per multi-row INSERT; stays far below max_allowed_packet
ISOLATION = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
READ_TIMEOUT = 60.0
URL_OPTIONS = frozenset({"read_timeout", "write_timeout", "charset",
                         "idle_transaction_timeout", *_sockets.NAMES})
"""The query parameters a MySQL URL may carry: all read by leaseq (``connect_args``,
``idle_setup``, ``tcp_options``)."""
"""Seconds a read or a write on a connection may wait (``read_timeout`` and
``write_timeout`` in the URL override it): it ends a connection whose server has gone
silent while its kernel still acknowledges (a frozen server or proxy), which TCP's own
checks never notice. Far above any statement of leaseq's, so it never cuts one short;
migrations run without it (a big ``ALTER TABLE`` may take longer)."""
EPOCH = datetime(1970, 1, 1)  # naive, as DATETIME(6) values read back are


class MysqlDialect(Dialect):
    name = "mysql"
    package = PACKAGE
    paramstyle = "pyformat"
    returning = False

    def span(self, seconds: float) -> Any:
        return round(seconds * 1_000_000)

    def ts(self, value: datetime | None) -> Any:
        return None if value is None else value.astimezone(timezone.utc).replace(tzinfo=None)

    def ids(self, ids: Sequence[int]) -> Any:
        return tuple(ids)

    def names(self, names: Sequence[str]) -> Any:
        return tuple(names)

    def pairs(self, pairs: Sequence[tuple[int, int]]) -> Any:
        return tuple(tuple(pair) for pair in pairs)

    def later(self, now: Any, seconds: float) -> Any:
        # DATE_ADD(now, INTERVAL span MICROSECOND), in Python: both exact to the µs.
        return now + timedelta(microseconds=self.span(seconds))

    def dt(self, value: Any) -> datetime | None:
        # The claim's and the renewal's reads return times as microseconds since the
        # epoch: PyMySQL decodes an integer far faster than a DATETIME.
        if isinstance(value, int):
            return self.clock(value).replace(tzinfo=timezone.utc)
        return super().dt(value)

    def clock(self, value: Any) -> datetime:
        return EPOCH + timedelta(microseconds=value)  # naive UTC, as DATETIME(6) binds

    def row(self, job: NewJob) -> dict[str, Any]:
        return {**super().row(job), "tag": 0}


class MysqlOps(SqlOps):
    """A claim first finds where each queue's due jobs begin (``claim_starts``), so that
    its locking read starts there instead of at the not-yet-purged entries of jobs
    claimed before. A batch renewal reads before it writes, for want of ``RETURNING``;
    reclaim finds expired dead jobs queue by queue."""

    def claim_branches(
        self, queues: Sequence[str], gated: Collection[str] = ()
    ) -> Plan[list[dict[str, Any]]]:
        # gated: the queues claimed without a worked-out take (claim_candidates' :gate).
        r = yield self.d.each("claim_starts", [{"queue": queue, "gate": int(queue in gated)}
                                               for queue in queues], {})
        return [{"queue": queue, "from_priority": priority, "from_at": at, "from_id": job_id}
                for queue, priority, at, job_id in r.rows]

    def due_row(self, queue: str) -> Plan[tuple[Any, ...]]:
        """A skip scan over the queue's priorities, one probe each (``first_due``), then
        the settings row."""
        earliest: float | None = None
        after = -(2**40)  # below every sort_priority (-priority of an INT)
        while True:
            r = yield Stmt("first_due", {"queue": queue, "after": after})
            if not r.rows:
                break
            after, seconds = r.rows[0]
            earliest = float(seconds) if earliest is None else min(earliest, float(seconds))
        settings = yield Stmt("next_due", {"queue": queue})
        return (earliest, *settings.rows[0])

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Plan[list[RenewOutcome]]:
        """Read first, then write: without ``UPDATE ... RETURNING`` the renewed leases
        would have to be read back, and a read after the update could no longer tell a
        job this update renewed from one it left alone.

        Two statements, as many as before touch limits: one locking read of the held rows
        with their touch counts, their queues' limits and the database's clock
        (``leases_held``), judged by ``touch_verdict``; then one fenced ``UPDATE`` per
        distinct extension of the jobs to extend, to that clock plus the extension,
        computed as the database would, so what it stores is reported without a re-read.
        """
        pairs = list(dict.fromkeys((job_id, token) for job_id, token, _ in items))
        params = {"ids": self.d.ids([i for i, _ in pairs]), "pairs": self.d.pairs(pairs)}
        r = yield Stmt("leases_held", params)
        held = {(int(row[0]), int(row[1])): row for row in r.rows}
        outcomes: dict[tuple[int, int], RenewOutcome] = {}
        extend_by: dict[float, list[tuple[int, int]]] = {}
        now = self.d.clock(r.rows[0][11]) if r.rows else None  # the same on every row
        for job_id, token, extend in items:
            row = held.pop((job_id, token), None)  # a job listed twice is renewed once
            if row is None:
                continue
            verdict, outcomes[job_id, token] = self.touch(job_id, token, row)
            if verdict == "extend":
                max_lease = row[10]
                seconds = extend if max_lease is None else min(extend, max_lease)
                extend_by.setdefault(seconds, []).append((job_id, token))
                until = self.d.later(now, seconds)  # what renew_held_many stores
                outcomes[job_id, token] = (cast(datetime, self.d.dt(until)), bool(row[3]))
        for seconds, keys in extend_by.items():
            params = {"ids": self.d.ids([i for i, _ in keys]), "pairs": self.d.pairs(keys),
                      "until": self.d.later(now, seconds), "now": now}
            renewed = (yield Stmt("renew_held_many", params)).rowcount
            if renewed != len(keys):
                # leases_held locked these rows, so all of them match.
                raise BackendError(f"renewed {renewed} of {len(keys)} held leases; rolled back")
        return [outcomes.get((job_id, token)) for job_id, token, _ in items]

    def expired_dead(self, limit: int) -> Plan[list[int]]:
        """A plain read of the queues that set a ``dead_retention`` (usually none: then
        nothing more), then one locking read of each one's dead jobs; see
        ``expired_dead`` in queries.sql for why not one statement."""
        r = yield Stmt("retention_queues")
        if not r.rows:
            return []
        branches = [{"queue": queue, "retention": self.d.span(seconds)}
                    for queue, seconds in r.rows]
        r = yield self.d.each("expired_dead", branches, {"limit": limit})
        return sorted(int(row[0]) for row in r.rows)[:limit]


def code(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL, aiomysql or mysqlclient exception."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def retryable(exc: BaseException) -> bool:
    return code(exc) in (DEADLOCK, LOCK_WAIT_TIMEOUT)


def disconnected(exc: BaseException) -> bool:
    """The server went away or killed this connection (2006/2013, KILL: 1927, MySQL's
    idle timeout: 4031)."""
    return (code(exc) in (*DISCONNECTS, 1927, IDLE_CLOSED)
            or isinstance(exc, pymysql.err.InterfaceError))


def unapplied(exc: BaseException) -> bool:
    """The server closed the session before this transaction could commit anything
    (``IDLE_CLOSED``): any operation may run again on a new connection."""
    return code(exc) == IDLE_CLOSED


def translate(exc: BaseException, where: str) -> LeaseqError:
    if isinstance(exc, LeaseqError):
        return exc
    number, text = code(exc), str(exc)
    if number in (DEADLOCK, LOCK_WAIT_TIMEOUT):
        return BackendError(f"MySQL at {where} kept reporting conflicts, gave up: {text}")
    if number == 1146:
        return SchemaMissing(f"leaseq tables missing in {where} ({text}): run `leaseq migrate`")
    if number in (1045, 1044, 1698):
        return AuthenticationFailed(f"MySQL at {where} refused the credentials: {text}")
    if number == 1049:
        return ConfigurationError(f"MySQL at {where}: unknown database ({text})")
    if number in DISCONNECTS or isinstance(exc, (pymysql.err.OperationalError,
                                                 pymysql.err.InterfaceError)):
        return BackendUnavailable(f"MySQL at {where} is unavailable: {text}")
    return BackendError(f"MySQL at {where} failed: {text}")


def multirow(escape: Callable[[Any], Any], sql: str, rows: Sequence[Mapping[str, Any]]
             ) -> list[tuple[str, int, int]]:
    """Chunks of one multi-row INSERT each: ``[(sql, row_count, tag), ...]``.

    The VALUES tuple of ``insert_job`` is repeated once per row, every value escaped by
    the driver (what ``executemany`` does, but with SQL expressions inside VALUES).
    """
    head, _, values = sql.partition("VALUES")
    chunks: list[tuple[str, int, int]] = []
    parts: list[str] = []
    size, tag = 0, 0
    for row in rows:
        if not parts:
            tag = secrets.randbits(62) + 1
        part = values % {k: escape(v) for k, v in {**row, "tag": tag}.items()}
        parts.append(part)
        size += len(part)
        if size >= BATCH_BYTES:
            chunks.append((head + "VALUES" + ",".join(parts), len(parts), tag))
            parts, size = [], 0
    if parts:
        chunks.append((head + "VALUES" + ",".join(parts), len(parts), tag))
    return chunks


def connect_args(url: str, settings: Settings) -> dict[str, Any]:
    # The credentials first, up to the URL's last @: urlsplit would end them at a raw #,
    # / or ? of a password and read the rest as host, path or query.
    user, password, bare = redact.credentials(url)
    parts = urlsplit(bare)
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigurationError(f"{redact.redact_url(url)!r} names no database: use "
                                 "mysql://user@host/dbname")
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        port = parts.port or 3306
    except ValueError:
        raise ConfigurationError(f"{redact.redact_url(url)!r} has a port that is not a "
                                 "number") from None
    return {
        "read_timeout": _seconds(options, "read_timeout"),
        "write_timeout": _seconds(options, "write_timeout"),
        "host": parts.hostname or "127.0.0.1",
        "port": port,
        "user": user or "root",
        "password": password,
        "database": database,
        "charset": options.get("charset", "utf8mb4"),
        "autocommit": False,
        # Affected rows = matched rows, as on PostgreSQL and SQLite.
        "client_flag": CLIENT.FOUND_ROWS,
        "connect_timeout": settings.connect_timeout,
        "init_command": ISOLATION,
    }


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(redact.credentials(url)[2]).query)


def tcp_options(url: str) -> dict[int, int]:
    """The socket options (``_sockets``: keepalives, ``tcp_user_timeout``) of every
    connection to ``url``, with the URL's overrides (``keepalives_idle=`` and so on)."""
    return _sockets.options({k: v[-1] for k, v in _query(url).items()})


def idle_setup(url: str) -> str | None:
    """The statement that bounds how long the server keeps a session idle inside a
    transaction (``_sockets.IDLE_IN_TRANSACTION``; the URL's ``idle_transaction_timeout``
    overrides it, 0 turns it off), run once per new connection to MariaDB. MySQL has no
    such setting: None there (``setup`` asks the server which it is)."""
    given = _query(url).get("idle_transaction_timeout", [None])[-1]
    seconds = _sockets.IDLE_IN_TRANSACTION if given is None else given
    if not str(seconds).isdigit():
        raise ConfigurationError(f"idle_transaction_timeout must be a whole number of "
                                 f"seconds in a MySQL URL, got {given!r}")
    return f"SET SESSION idle_transaction_timeout = {int(seconds)}" if int(seconds) else None


def mariadb(conn: Any) -> bool:
    return "mariadb" in str(conn.get_server_info()).lower()


def _seconds(options: dict[str, str], name: str) -> float:
    value = options.get(name)
    if value is None:
        return READ_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds in a MySQL "
                                 f"URL, got {value!r}")
    return seconds


def open_sync(args: dict[str, Any], tcp: dict[int, int], idle: str | None,
              migrating: bool = False) -> Any:
    """A PyMySQL connection with ``args`` (``connect_args``), its socket set up to notice
    a dead network (``tcp``, from ``tcp_options``) and, on MariaDB, ``idle`` run
    (``idle_setup``). ``migrating``: without read and write timeouts."""
    if migrating:
        args = {**args, "read_timeout": None, "write_timeout": None}
    conn = pymysql.connect(**args)
    _sockets.apply(conn._sock, tcp)
    if idle is not None and not migrating and mariadb(conn):
        with conn.cursor() as cur:
            cur.execute(idle)
        conn.commit()
    return conn


def bind(sql: str, params: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """Expand tuple parameters (``IN :ids``) into one element each, and tuples of tuples
    (``(id, lease_token) IN :pairs``) into row constructors: the one place where MySQL
    statement text depends on the call.

    Integers are written into the text as Python formats them, which is exactly what the
    driver's escaping would produce (a batched ack binds hundreds of ids and tokens, and
    escaping them one by one was a visible share of a worker's time); every other value
    stays a bound parameter."""
    if not any(isinstance(v, tuple) for v in params.values()):
        return sql, params
    flat = dict(params)
    for key, value in params.items():
        if isinstance(value, tuple):
            del flat[key]
            sql = sql.replace(f"%({key})s", _expand(key, value, flat))
    return sql, flat


def _expand(key: str, value: tuple[Any, ...], flat: dict[str, Any]) -> str:
    """``(a, ...)`` for a tuple of values, ``((a, b), ...)`` for a tuple of tuples."""
    if all(type(v) is int for v in value):  # not bool, not an int subclass
        return "(" + ",".join(map(str, value)) + ")"
    if all(type(v) is tuple for v in value) and {type(x) for v in value for x in v} <= {int}:
        return "(" + ",".join([f"({','.join(map(str, v))})" for v in value]) + ")"
    parts = []
    for i, item in enumerate(value):
        if isinstance(item, tuple):
            parts.append(_expand(f"{key}_{i}", item, flat))
        else:
            name = f"{key}_{i}"
            flat[name] = item
            parts.append(f"%({name})s")
    return "(" + ",".join(parts) + ")"


_timeout: Any = getattr(asyncio, "timeout", None)  # Python 3.11+


async def bounded(step: Awaitable[T], seconds: float | None) -> T:
    """``step``, given up after ``seconds`` (aiomysql's reads have no timeout of their
    own) as PyMySQL's ``read_timeout`` gives up: with a disconnect error (2013), so the
    connection is discarded, never rolled back or reused."""
    try:
        if seconds is None:
            return await step
        if _timeout is not None:  # no extra task per statement
            async with _timeout(seconds):
                return await step
        return await asyncio.wait_for(step, seconds)
    except asyncio.TimeoutError:
        raise pymysql.err.OperationalError(
            2013, f"Lost connection to MySQL server: no reply in {seconds:g} s "
                  "(read_timeout)") from None


def check_caller(conn: Any) -> None:
    module = type(conn).__module__
    if not (module.startswith(("pymysql", "MySQLdb", "aiomysql")) and hasattr(conn, "cursor")):
        raise ConfigurationError(
            f"conn must be a PyMySQL, mysqlclient or aiomysql connection for a MySQL queue, "
            f"got {type(conn).__name__}"
        )


class MysqlRunner(PooledSyncRunner[Any]):
    def __init__(self, url: str, dialect: MysqlDialect, settings: Settings) -> None:
        self.d = dialect
        self.where = redact.where(url)
        self.args = connect_args(url, settings)
        self.tcp = tcp_options(url)
        self.idle = idle_setup(url)
        self.checked = epoch.Checked()
        super().__init__(Pool(self.connect, lambda c: c.close(), settings.pool_size,
                              settings.connect_timeout))
        self.pool.put(self.pool.get())  # connect now: a bad URL fails here, with its reason

    def before(self, conn: Any, write: bool) -> None:
        if write and self.checked.due(conn):
            self.verify(conn)

    def verify(self, conn: Any) -> None:
        """Compares ``@@server_id`` with the stored epoch and moves the ids on a change
        (§59): one statement, once per connection. A failure releases the named lock
        (a dead connection has lost it anyway)."""
        def run(stmt: Stmt) -> Result:
            return self.execute(conn, stmt)

        try:
            seen = drive(epoch.seen(), run)  # in the plan's transaction, which follows
            if not seen.settled:
                drive(epoch.move(self.d.prefix, epoch.MYSQL), run)
                conn.commit()
        except Exception as exc:
            with contextlib.suppress(Exception):
                conn.rollback()
                run(Stmt("epoch_unlock", {"key": epoch.LOCK_KEY + self.d.prefix}))
            if code(exc) != NO_SUCH_TABLE:  # a schema from before migration 0011
                raise
            seen = epoch.Seen("", "", 0)
        if seen.server is not None:
            self.checked.used(conn)

    def verify_caller(self, conn: Any) -> None:
        """``verify`` for a caller's connection: the read joins the caller's transaction;
        a move runs on a pooled connection, never inside it."""
        try:
            seen = drive(epoch.seen(), lambda stmt: self.execute(conn, stmt))
        except Exception as exc:
            if code(exc) != NO_SUCH_TABLE:
                raise
            seen = epoch.Seen(None, None, None)
        if not seen.settled:
            own = self.pool.get()
            broken = True
            try:
                self.verify(own)
                broken = False
            finally:
                self.pool.put(own, broken=broken)
        self.checked.used(conn)

    def connect(self, migrating: bool = False) -> Any:
        try:
            return open_sync(self.args, self.tcp, self.idle, migrating)
        except Exception as exc:
            raise translate(exc, self.where) from exc

    def begin(self, conn: Any, write: bool) -> None:
        """Nothing to send: sessions run with autocommit off, so the first statement opens
        the transaction, and every plan ends in COMMIT or ROLLBACK. An explicit BEGIN would
        cost a round trip per operation."""

    def execute(self, conn: Any, stmt: Stmt) -> Result:
        sql = self.d.q[stmt.name]
        with conn.cursor() as cur:
            if stmt.many:
                ids: list[tuple[int]] = []
                for chunk, _count, tag in multirow(conn.escape, sql, stmt.params):  # type: ignore[arg-type]
                    cur.execute(chunk)
                    cur.execute(self.d.q["batch_ids"], {"first": cur.lastrowid, "tag": tag})
                    ids += cur.fetchall()
                return Result(ids, len(ids))
            try:
                cur.execute(*bind(sql, stmt.params))  # type: ignore[arg-type]
            except Exception as exc:
                if stmt.duplicate_ok and code(exc) == DUPLICATE_KEY:
                    return Result([], 0, duplicate=True)
                raise
            rows = list(cur.fetchall()) if cur.description else []
            return Result(rows, cur.rowcount, cur.lastrowid)

    def commit(self, conn: Any) -> None:
        conn.commit()

    def do_rollback(self, conn: Any) -> None:
        conn.rollback()

    def run_in_caller(self, conn: Any, plan: Plan[T]) -> T:
        check_caller(conn)
        if self.checked.due(conn):
            self.verify_caller(conn)
        own = bool(conn.get_autocommit())
        with conn.cursor() as cur:
            cur.execute("BEGIN" if own else "SAVEPOINT leaseq")
            try:
                result = drive(plan, lambda stmt: self.execute(conn, stmt))
            except BaseException:
                cur.execute("ROLLBACK" if own else "ROLLBACK TO SAVEPOINT leaseq")
                raise
            cur.execute("COMMIT" if own else "RELEASE SAVEPOINT leaseq")
        return result

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc)

    def is_disconnect(self, exc: BaseException) -> bool:
        return disconnected(exc)

    def disconnected(self, exc: BaseException) -> bool:
        return disconnected(exc)

    def unapplied(self, exc: BaseException) -> bool:
        return unapplied(exc)

    def recover(self) -> None:
        self.pool.discard_idle()  # after a restart the idle connections are dead too
        self.checked.reset()  # a proxy in front may keep the others, to a new server

    def translate(self, exc: BaseException) -> LeaseqError:
        return translate(exc, self.where)

    def migrate(self) -> list[str]:
        q, key = self.d.q, {"key": f"leaseq:migrate:{self.d.prefix}"}
        applied: list[str] = []
        conn = self.connect(migrating=True)
        try:
            conn.autocommit(True)  # MySQL DDL commits implicitly; the named lock serialises
            with conn.cursor() as cur:
                cur.execute(q["migrate_lock"], key)
                try:
                    cur.execute(q["migrations_table"])
                    cur.execute(q["applied_versions"])
                    done = {v for (v,) in cur.fetchall()}
                    for version, name, statements in load_migrations(PACKAGE, self.d.prefix):
                        if version not in done:
                            for sql in statements:
                                cur.execute(sql)
                            cur.execute(q["record_version"], {"version": version, "name": name})
                            applied.append(f"{version:04d}_{name}")
                    install_routine(cur, self.d)
                finally:
                    cur.execute(q["migrate_unlock"], key)
            self.checked.reset()  # the epoch table may be new: compare again
        except LeaseqError:
            raise
        except Exception as exc:
            raise self.translate(exc) from exc
        finally:
            conn.close()
        return applied


def install_routine(cur: Any, d: MysqlDialect) -> None:
    """Creates ``<prefix>enqueue_with`` and the frozen ``<prefix>enqueue`` that calls it
    unless this version's are installed (each COMMENT holds the fingerprint of their
    text), so a second ``migrate`` changes nothing. MySQL has no ``CREATE OR REPLACE
    PROCEDURE``: an upgrade drops and creates them, and a CALL in between fails (once,
    per upgrade that changes them)."""
    text, mark = routine_text("mysql", d.prefix)
    marks = []
    for name in (f"{d.prefix}enqueue_with", f"{d.prefix}enqueue"):
        cur.execute(d.q["routine_comment"], {"name": name})
        row = cur.fetchone()
        marks.append(None if row is None else row[0])
    if marks == [mark, mark]:
        return
    cur.execute(d.q["drop_routine"])
    cur.execute(d.q["drop_routine_with"])
    for statement in text.split("\n//\n"):  # enqueue.sql's separator (DELIMITER //)
        cur.execute(statement)


class AsyncMysqlRunner(AsyncRunner):
    def __init__(self, url: str, dialect: MysqlDialect, settings: Settings) -> None:
        self.url, self.d, self.settings = url, dialect, settings
        self.where = redact.where(url)
        self.args = connect_args(url, settings)
        self.tcp = tcp_options(url)
        self.idle = idle_setup(url)
        self.checked = epoch.Checked()

    async def verify(self, conn: Any) -> None:
        """See ``MysqlRunner.verify``."""
        def run(stmt: Stmt) -> Awaitable[Result]:
            return self.execute(conn, stmt)

        try:
            seen = await self.adrive(epoch.seen(), run)
            if not seen.settled:
                await self.adrive(epoch.move(self.d.prefix, epoch.MYSQL), run)
                await conn.commit()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await conn.rollback()
                await run(Stmt("epoch_unlock", {"key": epoch.LOCK_KEY + self.d.prefix}))
            if code(exc) != NO_SUCH_TABLE:
                raise
            seen = epoch.Seen("", "", 0)
        if seen.server is not None:
            self.checked.used(conn)

    async def verify_caller(self, conn: Any) -> None:
        """See ``MysqlRunner.verify_caller``."""
        try:
            seen = await self.adrive(epoch.seen(), lambda stmt: self.execute(conn, stmt))
        except Exception as exc:
            if code(exc) != NO_SUCH_TABLE:
                raise
            seen = epoch.Seen(None, None, None)
        if not seen.settled:
            pool = await self.pool()
            own = await bounded(pool.acquire(), self.settings.connect_timeout)
            try:
                await self._setup(own)
                await self.verify(own)
            finally:
                pool.release(own)
        self.checked.used(conn)

    async def open_pool(self) -> Any:
        import aiomysql

        args = dict(self.args)
        args["db"] = args.pop("database")
        # aiomysql has no read or write timeouts: run_once bounds each operation itself.
        for name in ("read_timeout", "write_timeout"):
            del args[name]
        try:
            return await aiomysql.create_pool(minsize=1, maxsize=self.settings.pool_size, **args)
        except Exception as exc:
            raise translate(exc, self.where) from exc

    async def _setup(self, conn: Any) -> None:
        """Sets up a pooled connection once, on first use, as ``open_sync`` does."""
        if getattr(conn, "_leaseq_setup", False):
            return
        writer = getattr(conn, "_writer", None)
        if writer is not None:
            _sockets.apply(writer.transport.get_extra_info("socket"), self.tcp)
        if self.idle is not None and mariadb(conn):
            async with conn.cursor() as cur:
                await cur.execute(self.idle)
            await conn.commit()
        conn._leaseq_setup = True

    async def execute(self, conn: Any, stmt: Stmt) -> Result:
        sql = self.d.q[stmt.name]
        limit = self.args["read_timeout"]
        async with conn.cursor() as cur:
            if stmt.many:
                ids: list[tuple[int]] = []
                for chunk, _count, tag in multirow(conn.escape, sql, stmt.params):  # type: ignore[arg-type]
                    await bounded(cur.execute(chunk), limit)
                    await bounded(cur.execute(self.d.q["batch_ids"],
                                              {"first": cur.lastrowid, "tag": tag}), limit)
                    ids += await cur.fetchall()
                return Result(ids, len(ids))
            try:
                await bounded(cur.execute(*bind(sql, stmt.params)), limit)  # type: ignore[arg-type]
            except Exception as exc:
                if stmt.duplicate_ok and code(exc) == DUPLICATE_KEY:
                    return Result([], 0, duplicate=True)
                raise
            # Rows are read with the statement (aiomysql's default cursor buffers them).
            rows = list(await cur.fetchall()) if cur.description else []
            return Result(rows, cur.rowcount, cur.lastrowid)

    async def run_once(self, plan: Plan[T], write: bool, single: bool = False) -> T:
        pool = await self.pool()
        # aiomysql's acquire has no timeout, and makes its connections one at a time under
        # one lock: on a dead network every caller would queue behind every connect.
        # Bounded as the other pools are: connect_timeout.
        wait = self.settings.connect_timeout
        try:
            conn = await bounded(pool.acquire(), wait)
        except pymysql.err.OperationalError:
            raise pymysql.err.OperationalError(
                2003, f"Can't connect to MySQL server: no connection within {wait:g} s "
                      "(connect_timeout)") from None
        broken = False
        try:
            await self._setup(conn)
            if write and self.checked.due(conn):
                await self.verify(conn)
            # No BEGIN: autocommit is off, the first statement opens the transaction
            # (see MysqlRunner.begin).
            result = await self.adrive(plan, lambda stmt: self.execute(conn, stmt))
            await bounded(conn.commit(), self.args["read_timeout"])
            return result
        except BaseException as exc:
            # A dead connection is closed, not rolled back: a ROLLBACK sent on it would
            # wait as long as the statement did.
            broken = disconnected(exc) or isinstance(exc, asyncio.CancelledError)
            if not broken:
                try:
                    await conn.rollback()
                except Exception:
                    broken = True
            raise
        finally:
            if broken:
                conn.close()
            pool.release(conn)

    async def run_in_caller(self, conn: Any, plan: Plan[T]) -> T:
        check_caller(conn)
        if self.checked.due(conn):
            await self.verify_caller(conn)
        own = bool(conn.get_autocommit())
        async with conn.cursor() as cur:
            await cur.execute("BEGIN" if own else "SAVEPOINT leaseq")
            try:
                result = await self.adrive(plan, lambda stmt: self.execute(conn, stmt))
            except BaseException:
                await cur.execute("ROLLBACK" if own else "ROLLBACK TO SAVEPOINT leaseq")
                raise
            await cur.execute("COMMIT" if own else "RELEASE SAVEPOINT leaseq")
        return result

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc)

    def disconnected(self, exc: BaseException) -> bool:
        return disconnected(exc)

    def unapplied(self, exc: BaseException) -> bool:
        return unapplied(exc)

    async def recover(self) -> None:
        if self._pool is not None:
            await self._pool.clear()  # closes the idle connections
        self.checked.reset()

    def translate(self, exc: BaseException) -> LeaseqError:
        return translate(exc, self.where)

    async def migrate(self) -> list[str]:
        # DDL is rare and short: run it with the sync code in a thread.
        runner = MysqlRunner(self.url, self.d, self.settings)
        try:
            return await asyncio.to_thread(runner.migrate)
        finally:
            runner.close()
            self.checked.reset()  # the epoch table may be new: check it again

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            await self._pool.wait_closed()


def create(url: str, settings: Settings, use_async: bool) -> SqlBackend:
    # PyMySQL takes no URL: a parameter nobody reads would be dropped in silence.
    refuse_unknown(url, URL_OPTIONS, "MySQL")
    dialect = MysqlDialect(settings.table_prefix)
    runner: Any = (AsyncMysqlRunner if use_async else MysqlRunner)(url, dialect, settings)
    return SqlBackend("mysql", MysqlOps(dialect), runner)
