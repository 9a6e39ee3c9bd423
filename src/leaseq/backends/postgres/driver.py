"""PostgreSQL over psycopg 3 and psycopg_pool: one pool per client, READ COMMITTED,
deadlocks and serialization failures retried as whole transactions."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from leaseq._core import redact
from leaseq._core.settings import Settings
from leaseq.backends import _sockets
from leaseq.backends._sql import epoch
from leaseq.backends._sql.backend import SqlBackend
from leaseq.backends._sql.ops import Dialect, SqlOps, touch_refusal
from leaseq.backends._sql.plan import Plan, Result, Stmt, drive, load_migrations
from leaseq.backends._sql.routine import ROUTINE_SIGNATURE, routine_text
from leaseq.backends._sql.runner import AsyncRunner, SyncRunner
from leaseq.backends._urls import refuse_unknown
from leaseq.backends.base import NewJob, RenewOutcome
from leaseq.backends.postgres.url import (
    FLAG,
    LISTEN,
    PostgresUrl,
    parse,
    with_tcp_defaults,
)
from leaseq.errors import (
    AuthenticationFailed,
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    LeaseqError,
    SchemaMissing,
)

T = TypeVar("T")
PACKAGE = "leaseq.backends.postgres"
# Retry the whole transaction on these: deadlock, serialization failure, lock not available.
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure,
             pg_errors.LockNotAvailable)


class PostgresDialect(Dialect):
    name = "postgres"
    package = PACKAGE
    paramstyle = "pyformat"

    def row(self, job: NewJob) -> dict[str, Any]:
        # Workers LISTEN on "<prefix>jobs"; the insert notifies it.
        return {**super().row(job), "channel": f"{self.prefix}jobs"}

    def pairs(self, pairs: Sequence[tuple[int, int]]) -> Any:
        # One JSON array of [id, token] (json_array_elements unpacks it): psycopg has no
        # adapter for a list of row values.
        return json.dumps([list(pair) for pair in pairs])


class PostgresOps(SqlOps):
    """PostgreSQL claims a batch and completes a job in one statement each."""

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0, limited: Sequence[str] = (),
    ) -> Plan[list[tuple[Any, ...]]]:
        takes, rated = yield from self.allowances(limited, limit)
        names = [name for name in queues if takes.get(name, 1) > 0]
        if not names:
            return []
        params = {"queues": names, "takes": [takes.get(name) for name in names],
                  "limit": limit, "lease": lease, "default_lease": default_lease,
                  "worker_id": worker_id}
        r = yield Stmt("claim", params)
        yield from self.spend(rated, r.rows)
        return r.rows

    # These plans are one statement here, atomic without BEGIN/COMMIT round trips.
    SINGLE = frozenset({"claim", "complete", "complete_many", "renew", "renew_many"})

    def single(self, operation: str, jobs: Sequence[NewJob] = ()) -> bool:
        if operation == "enqueue":
            # A batch that goes row by row (escaped_nul) needs a transaction around it.
            return all(job.unique_key is None for job in jobs) and not escaped_nul(jobs)
        return operation in self.SINGLE

    def complete_many(
        self, items: Sequence[tuple[int, int, str | None]]
    ) -> Plan[list[bool]]:
        rows = ",".join(f"[{i},{t},{'null' if r is None else r}]" for i, t, r in items)
        r = yield Stmt("complete_many", {"items": f"[{rows}]"})
        completed = {row[0] for row in r.rows}
        done = [job_id in completed for job_id, _, _ in items]
        already = yield from self.already_done(items, done)
        return [ok or again for ok, again in zip(done, already, strict=True)]

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Plan[list[RenewOutcome]]:
        """One statement reads the held rows with their queues' touch limits, decides as
        ``touch_verdict`` does, and extends the leases it may (see ``renew_many`` in
        queries.sql)."""
        params = {"ids": [i for i, _, _ in items], "tokens": [t for _, t, _ in items],
                  "extends": [e for _, _, e in items]}
        r = yield Stmt("renew_many", params)
        outcomes: dict[tuple[int, int], RenewOutcome] = {}
        for job_id, token, verdict, until, cancel, touches, age, max_touch_duration in r.rows:
            if verdict in ("touches", "duration"):
                outcomes[job_id, token] = touch_refusal(job_id, token, verdict, touches, age,
                                                        max_touch_duration)
            else:  # extended, or touched too soon to write
                outcomes[job_id, token] = (cast(datetime, self.d.dt(until)), bool(cancel))
        return [outcomes.get((job_id, token)) for job_id, token, _ in items]

    def finish_held(self, job_id: int, token: int, result: str | None) -> Plan[bool]:
        # One statement (complete_held) instead of a locking read and two writes: every
        # ack (complete, and complete_step of a chain or group) goes through here.
        r = yield Stmt("complete_held", {"id": job_id, "token": token, "result": result})
        return bool(r.rows)

    def count_down(self, flow_id: str) -> Plan[tuple[int, str | None] | None]:
        # The UPDATE locks the row and returns what lock_flow would have read.
        r = yield Stmt("count_down_flow_returning", {"id": flow_id})
        return (int(r.rows[0][0]), r.rows[0][1]) if r.rows else None

    def insert_steps(self, flow_id: str, specs: Sequence[str]) -> Plan[None]:
        # One statement over arrays: psycopg's execute takes no batch of parameter sets.
        yield Stmt("insert_flow_steps", {"flow_id": flow_id, "specs": list(specs)})

    def insert_plain(self, jobs: Sequence[NewJob]) -> Plan[list[int]]:
        if len(jobs) == 1:
            return (yield from super().insert_plain(jobs))
        if escaped_nul(jobs):
            ids = []
            for job in jobs:
                ids += yield from super().insert_plain([job])
            return ids
        r = yield Stmt("insert_jobs", {"rows": json_rows(jobs), "channel": f"{self.d.prefix}jobs"})
        # Identity values are drawn in ORDER BY order, so ascending ids are input order.
        return sorted(int(row[0]) for row in r.rows)


def escaped_nul(jobs: Sequence[NewJob]) -> bool:
    """True when a batch's JSON holds ``\\u0000`` (how leaseq's JSON writes a NUL):
    PostgreSQL refuses that escape wherever it parses JSON into text, so ``insert_jobs``
    would fail on it; such a batch (rare) is inserted row by row, as text. A single job
    always is."""
    if len(jobs) < 2:
        return False
    return any("\\u0000" in job.payload
               or (job.headers is not None and "\\u0000" in job.headers) for job in jobs)


def json_rows(jobs: Sequence[NewJob]) -> str:
    """The batch as the JSON ``insert_jobs`` reads. Payloads, headers and tags are JSON text
    already and go in as they are; queue and kind names repeat across a batch, so each is
    escaped once."""
    names: dict[str | None, str] = {None: "null"}
    parts = []
    for job in jobs:
        queue = names.get(job.queue) or names.setdefault(job.queue, json.dumps(job.queue))
        kind = names.get(job.kind) or names.setdefault(job.kind, json.dumps(job.kind))
        when = f',"ra":"{job.run_at.isoformat()}"' if job.run_at is not None else ""
        if job.delay:
            when += f',"d":{job.delay!r}'
        if job.lease is not None:
            when += f',"l":{job.lease!r}'
        if job.headers is not None:
            when += f',"h":{job.headers}'
        if job.tags is not None:
            when += f',"t":{job.tags}'
        parts.append(f'{{"q":{queue},"k":{kind},"p":{job.payload},"pr":{job.priority},'
                     f'"ma":{job.max_attempts}{when}}}')
    return f"[{','.join(parts)}]"


def execute(conn: psycopg.Connection[Any], queries: dict[str, str], stmt: Stmt) -> Result:
    cur = conn.execute(queries[stmt.name], stmt.params)
    rows = cur.fetchall() if cur.description else []
    return Result(rows, cur.rowcount)


async def aexecute(
    conn: psycopg.AsyncConnection[Any], queries: dict[str, str], stmt: Stmt
) -> Result:
    cur = await conn.execute(queries[stmt.name], stmt.params)
    rows = await cur.fetchall() if cur.description else []
    return Result(rows, cur.rowcount)


def execute_unprepared(conn: psycopg.Connection[Any], queries: dict[str, str],
                       stmt: Stmt) -> Result:
    """``execute`` on a caller's connection under ``pgbouncer=true``: the connection is
    the caller's, so its ``prepare_threshold`` is too; leaseq's statements never become
    server-side prepared statements on it."""
    cur = conn.execute(queries[stmt.name], stmt.params, prepare=False)
    rows = cur.fetchall() if cur.description else []
    return Result(rows, cur.rowcount)


async def aexecute_unprepared(
    conn: psycopg.AsyncConnection[Any], queries: dict[str, str], stmt: Stmt
) -> Result:
    """``execute_unprepared`` for an ``AsyncConnection``."""
    cur = await conn.execute(queries[stmt.name], stmt.params, prepare=False)
    rows = await cur.fetchall() if cur.description else []
    return Result(rows, cur.rowcount)


POOLER_HINT = (
    "a transaction-mode pooler (PgBouncer, Supavisor, RDS Proxy) between leaseq and the "
    "server hands psycopg's server-side prepared statements to other sessions (so a "
    "statement of another client may even run in place of leaseq's); add "
    "pgbouncer=true to the URL (and listen_url=<direct URL> for push wake-ups), or use "
    "session pooling (docs/scaling.md, Connection poolers)"
)


def pooled_prepare(exc: BaseException) -> bool:
    """True for the errors of psycopg's prepared statements on a connection a
    transaction pooler shares: a name another session made (42P05), a name this server
    connection has not got (26000), or another session's statement of the same name
    bound with this one's parameters (08P01, "bind message supplies ...")."""
    if isinstance(exc, (pg_errors.DuplicatePreparedStatement,
                        pg_errors.InvalidSqlStatementName)):
        return True
    return isinstance(exc, pg_errors.ProtocolViolation) and "prepared statement" in str(exc)


def retryable(exc: BaseException) -> bool:
    return isinstance(exc, RETRYABLE)


def disconnected(exc: BaseException) -> bool:
    """The server went away: connection errors (class 08), an administrator's
    termination or shutdown (57P01-57P03), a connection that died without a code, or a
    server that no longer takes writes (``read_only``)."""
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return True
    if (not isinstance(exc, psycopg.OperationalError) or isinstance(exc, RETRYABLE)
            or pooled_prepare(exc)):
        return False
    state = exc.sqlstate or ""
    return not state or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def read_only(exc: BaseException) -> bool:
    """25006: the connection's server refuses writes, a standby (``cannot execute ... in
    a read-only transaction`` / ``during recovery``), a demoted primary, or one a provider
    turned read-only. The statement changed nothing, so any operation may be repeated on
    another connection; with ``target_session_attrs=read-write`` that one reaches the
    primary."""
    return isinstance(exc, pg_errors.ReadOnlySqlTransaction)


def translate(exc: BaseException, where: str, prefix: str | None = None) -> LeaseqError:
    """``exc`` as a leaseq error. ``prefix``: the client's table prefix; a missing table
    of another prefix means the server ran a statement this client did not send, another
    session's prepared statement of the same name behind a transaction pooler."""
    if isinstance(exc, LeaseqError):
        return exc
    if isinstance(exc, RETRYABLE):
        return BackendError(f"PostgreSQL at {where} kept reporting conflicts, gave up: {exc}")
    if pooled_prepare(exc) or (
        prefix is not None and isinstance(exc, pg_errors.UndefinedTable)
        and f'"{prefix}' not in str(exc)
    ):
        return ConfigurationError(f"PostgreSQL at {where}: {exc}: {POOLER_HINT}")
    if isinstance(exc, pg_errors.UndefinedTable):
        return SchemaMissing(f"leaseq tables missing in {where} ({exc}): run `leaseq migrate`")
    if isinstance(exc, (pg_errors.InvalidPassword, pg_errors.InvalidAuthorizationSpecification)):
        return AuthenticationFailed(f"PostgreSQL at {where} refused the credentials: {exc}")
    if isinstance(exc, pg_errors.InvalidCatalogName):
        return ConfigurationError(f"PostgreSQL at {where}: {exc}".strip())
    if read_only(exc):
        return BackendUnavailable(
            f"PostgreSQL at {where} refuses writes (a standby, or a primary during a "
            f"failover): {exc}; with several hosts in the URL add "
            "target_session_attrs=read-write so that leaseq connects to the primary only"
        )
    if isinstance(exc, psycopg.OperationalError):
        text = str(exc)
        # Connection failures carry no SQLSTATE; the server's message says which it is.
        if "password authentication failed" in text or (
            "role" in text and "does not exist" in text
        ):
            return AuthenticationFailed(f"PostgreSQL at {where} refused the credentials: {text}")
        if "database" in text and "does not exist" in text:
            return ConfigurationError(f"PostgreSQL at {where}: unknown database ({text})")
        return BackendUnavailable(f"PostgreSQL at {where} is unavailable: {text}".strip())
    return BackendError(f"PostgreSQL at {where} failed: {exc}")


def caller_mode(conn: Any, kind: type[Any]) -> bool:
    """True when leaseq must wrap its statements in ``conn.transaction()`` itself.

    In the caller's open transaction the statements simply join it. An autocommit
    connection has no transaction to join, so leaseq makes one (and it commits at once).
    """
    if not isinstance(conn, kind):
        raise ConfigurationError(
            f"conn must be a {kind.__module__}.{kind.__name__} for a PostgreSQL queue, "
            f"got {type(conn).__name__}"
        )
    return bool(conn.autocommit) or conn.info.transaction_status == TransactionStatus.INTRANS


def _where(url: str) -> str:
    """``host:port[,host:port...]/db`` of a URL, for messages: without the user and
    password, and without the query string (which may carry a password, and whose
    ``target_session_attrs`` the error says when it matters)."""
    return redact.where(url)


def idle_setup(target: PostgresUrl) -> psycopg.sql.Composed | None:
    """The statement each new pooled connection runs once: the server ends the session
    when it sits idle inside a transaction for ``_sockets.IDLE_IN_TRANSACTION`` seconds,
    releasing its locks (design §37). None behind a transaction pooler (a SET would stay
    on a server connection other clients share) or when the URL sets it itself
    (``options=-c idle_in_transaction_session_timeout=...``)."""
    if target.pgbouncer or "idle_in_transaction_session_timeout" in target.dsn:
        return None
    return psycopg.sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
        psycopg.sql.Literal(f"{_sockets.IDLE_IN_TRANSACTION}s"))


def reconnect_timeout(settings: Settings) -> float:
    """How long the pool keeps retrying a failed connect before it gives up (and the
    next call that needs a connection starts again at once). psycopg_pool's default,
    300 s of retries doubling their pauses, left a pause of 16 to 32 s pending after a
    minute-long outage, so a worker took that long to notice the network had healed."""
    return max(5.0, settings.connect_timeout)


def connection_options(target: PostgresUrl) -> dict[str, Any]:
    """psycopg options of every connection leaseq opens: behind a transaction pooler
    (``pgbouncer=true``) no statement is ever prepared on the server, since the next
    transaction may run on another server connection that has not got it, or has another
    client's statement of the same name."""
    return {"prepare_threshold": None} if target.pgbouncer else {}


def install_routine(conn: psycopg.Connection[Any], d: PostgresDialect) -> None:
    """Creates or replaces ``<prefix>enqueue`` in ``migrate``'s transaction when the
    installed one is not this version's (its comment holds the fingerprint of its text):
    a second ``migrate`` changes nothing, and an upgrade replaces the function atomically,
    so a trigger calling it never finds it missing. Other overloads of the name (a later
    version's added argument) are dropped first, so calls keep resolving to one function.
    """
    text, mark = routine_text("postgres", d.prefix)
    signature = f"{d.prefix}enqueue{ROUTINE_SIGNATURE}"
    installed = conn.execute(d.q["routine_comment"], {"signature": signature}).fetchone()
    if installed is not None and installed[0] == mark:
        return
    for (other,) in conn.execute(d.q["routine_overloads"],
                                 {"name": f"{d.prefix}enqueue", "signature": signature}):
        conn.execute(f"DROP FUNCTION {other}")  # regprocedure text: quoted as needed
    conn.execute(text)
    conn.execute(f"COMMENT ON FUNCTION {signature} IS '{mark}'")  # hex, nothing to quote


def checked(url: PostgresUrl) -> epoch.Checked:
    """Which connections compared their server's timeline with the stored epoch (§59);
    behind a transaction pooler also again after a second unused, since the client's
    connection outlives the server behind it."""
    return epoch.Checked(idle=epoch.POOLED_IDLE if url.pgbouncer else None)


class PostgresRunner(SyncRunner):
    def __init__(self, url: PostgresUrl, dialect: PostgresDialect, settings: Settings) -> None:
        self.target, self.d, self.url = url, dialect, with_tcp_defaults(url.dsn)
        self.where = _where(url.dsn)
        options = connection_options(url)
        try:
            # Connect once up front: a wrong URL fails here with its real reason, not as a
            # pool timeout later.
            psycopg.connect(self.url, connect_timeout=max(1, int(settings.connect_timeout)),
                            **options).close()
        except Exception as exc:
            raise translate(exc, self.where) from exc
        # Autocommit: a one-statement plan needs no BEGIN/COMMIT round trips; others run
        # in an explicit transaction.
        setup = idle_setup(url)
        self.pool = ConnectionPool(self.url, min_size=1, max_size=settings.pool_size,
                                   timeout=settings.connect_timeout, open=True,
                                   kwargs={"autocommit": True, **options}, name="leaseq",
                                   reconnect_timeout=reconnect_timeout(settings),
                                   configure=None if setup is None else
                                   lambda conn: conn.execute(setup).close())
        self._in_caller = execute_unprepared if url.pgbouncer else execute
        self.checked = checked(url)

    def verify(self, conn: psycopg.Connection[Any]) -> None:
        """Compares the server's timeline with the stored epoch, and moves the ids on a
        change (§59): one statement, once per connection."""
        def run(stmt: Stmt) -> Result:
            return execute(conn, self.d.q, stmt)

        try:
            seen = drive(epoch.seen(), run)
        except pg_errors.UndefinedTable:  # a schema from before migration 0011
            self.checked.used(conn)
            return
        if not seen.settled:
            with conn.transaction():
                drive(epoch.move(self.d.prefix, epoch.POSTGRES), run)
        if seen.server is not None:
            self.checked.used(conn)

    def verify_caller(self, conn: psycopg.Connection[Any]) -> None:
        """``verify`` for a caller's connection: the read joins the caller's transaction
        (in a savepoint of its own, as a missing table would abort it); a move runs on a
        pooled connection of the same URL, never inside the caller's transaction."""
        run = self._in_caller
        try:
            with conn.transaction():
                seen = drive(epoch.seen(), lambda stmt: run(conn, self.d.q, stmt))
        except pg_errors.UndefinedTable:
            self.checked.used(conn)
            return
        if not seen.settled:
            with self.pool.connection() as own:
                self.verify(own)
        self.checked.used(conn)

    def run_once(self, plan: Plan[T], write: bool, single: bool = False) -> T:
        with self.pool.connection() as conn:
            try:
                if write and self.checked.due(conn):
                    self.verify(conn)
                if single:
                    return drive(plan, lambda stmt: execute(conn, self.d.q, stmt))
                with conn.transaction():
                    return drive(plan, lambda stmt: execute(conn, self.d.q, stmt))
            except pg_errors.ReadOnlySqlTransaction:
                # Its server is a standby now (failover, demotion): closed, the pool
                # drops it and the retry connects afresh, to the new primary.
                conn.close()
                self.checked.reset()
                raise
            finally:
                self.checked.touch(conn)

    def run_in_caller(self, conn: Any, plan: Plan[T]) -> T:
        run = self._in_caller
        own = caller_mode(conn, psycopg.Connection)  # refuses a connection of another kind
        if self.checked.due(conn):
            self.verify_caller(conn)
        if own:
            with conn.transaction():  # a savepoint inside the caller's transaction
                return drive(plan, lambda stmt: run(conn, self.d.q, stmt))
        return drive(plan, lambda stmt: run(conn, self.d.q, stmt))

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc)

    def disconnected(self, exc: BaseException) -> bool:
        return disconnected(exc)

    def unapplied(self, exc: BaseException) -> bool:
        return read_only(exc)

    def recover(self) -> None:
        self.pool.check()  # drops the idle connections the server closed
        self.checked.reset()  # behind a pooler the others may lead to a new server

    def translate(self, exc: BaseException) -> LeaseqError:
        return translate(exc, self.where, self.d.prefix)

    def migrate(self) -> list[str]:
        q = self.d.q
        applied: list[str] = []
        try:
            with self.pool.connection() as conn, conn.transaction():  # DDL all or nothing
                # Racing migrators queue on one advisory lock per table prefix.
                conn.execute(q["migrate_lock"], {"key": f"leaseq:migrate:{self.d.prefix}"})
                conn.execute(q["migrations_table"])
                done = {v for (v,) in conn.execute(q["applied_versions"]).fetchall()}
                for version, name, statements in load_migrations(PACKAGE, self.d.prefix):
                    if version not in done:
                        for sql in statements:
                            conn.execute(sql)
                        conn.execute(q["record_version"], {"version": version, "name": name})
                        applied.append(f"{version:04d}_{name}")
                install_routine(conn, self.d)
            self.checked.reset()  # the epoch table may be new: compare again
        except LeaseqError:
            raise
        except Exception as exc:
            raise self.translate(exc) from exc
        return applied

    def close(self) -> None:
        self.pool.close()


class AsyncPostgresRunner(AsyncRunner):
    def __init__(self, url: PostgresUrl, dialect: PostgresDialect, settings: Settings) -> None:
        self.target, self.d, self.settings, self.url = (url, dialect, settings,
                                                         with_tcp_defaults(url.dsn))
        self.where = _where(url.dsn)
        self._options = connection_options(url)
        self._in_caller = aexecute_unprepared if url.pgbouncer else aexecute
        self.checked = checked(url)

    async def verify(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """See ``PostgresRunner.verify``."""
        def run(stmt: Stmt) -> Awaitable[Result]:
            return aexecute(conn, self.d.q, stmt)

        try:
            seen = await self.adrive(epoch.seen(), run)
        except pg_errors.UndefinedTable:
            self.checked.used(conn)
            return
        if not seen.settled:
            async with conn.transaction():
                await self.adrive(epoch.move(self.d.prefix, epoch.POSTGRES), run)
        if seen.server is not None:
            self.checked.used(conn)

    async def verify_caller(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """See ``PostgresRunner.verify_caller``."""
        run = self._in_caller
        try:
            async with conn.transaction():
                seen = await self.adrive(epoch.seen(), lambda stmt: run(conn, self.d.q, stmt))
        except pg_errors.UndefinedTable:
            self.checked.used(conn)
            return
        if not seen.settled:
            pool = await self.pool()
            async with pool.connection() as own:
                await self.verify(own)
        self.checked.used(conn)

    async def open_pool(self) -> AsyncConnectionPool:
        setup = idle_setup(self.target)

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            if setup is not None:
                await (await conn.execute(setup)).close()

        pool = AsyncConnectionPool(
            self.url, min_size=1, max_size=self.settings.pool_size,
            timeout=self.settings.connect_timeout, open=False,
            kwargs={"autocommit": True, **self._options}, name="leaseq-async",
            configure=configure, reconnect_timeout=reconnect_timeout(self.settings),
        )
        # The pool connects in the background and retries until its timeout, so a wrong
        # URL would surface late as a bare PoolTimeout; one connection of our own, made
        # while the pool makes its first, fails at once with the server's own words.
        await pool.open(wait=False)
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=max(1, int(self.settings.connect_timeout)),
                **self._options,
            )
            await conn.close()
        except Exception as exc:
            await pool.close()
            raise translate(exc, self.where) from exc
        return pool

    async def run_once(self, plan: Plan[T], write: bool, single: bool = False) -> T:
        pool = await self.pool()
        async with pool.connection() as conn:
            try:
                if write and self.checked.due(conn):
                    await self.verify(conn)
                if single:
                    return await self.adrive(plan, lambda stmt: aexecute(conn, self.d.q, stmt))
                async with conn.transaction():
                    return await self.adrive(plan, lambda stmt: aexecute(conn, self.d.q, stmt))
            except pg_errors.ReadOnlySqlTransaction:
                await conn.close()  # see PostgresRunner.run_once
                self.checked.reset()
                raise
            finally:
                self.checked.touch(conn)

    async def run_in_caller(self, conn: Any, plan: Plan[T]) -> T:
        run = self._in_caller
        own = caller_mode(conn, psycopg.AsyncConnection)
        if self.checked.due(conn):
            await self.verify_caller(conn)
        if own:
            async with conn.transaction():
                return await self.adrive(plan, lambda stmt: run(conn, self.d.q, stmt))
        return await self.adrive(plan, lambda stmt: run(conn, self.d.q, stmt))

    def retryable(self, exc: BaseException) -> bool:
        return retryable(exc)

    def disconnected(self, exc: BaseException) -> bool:
        return disconnected(exc)

    def unapplied(self, exc: BaseException) -> bool:
        return read_only(exc)

    async def recover(self) -> None:
        if self._pool is not None:
            await self._pool.check()
        self.checked.reset()  # see PostgresRunner.recover

    def translate(self, exc: BaseException) -> LeaseqError:
        return translate(exc, self.where, self.d.prefix)

    async def migrate(self) -> list[str]:
        # DDL is rare and short: run it with the sync code in a thread.
        runner = PostgresRunner(self.target, self.d, self.settings)
        try:
            return await asyncio.to_thread(runner.migrate)
        finally:
            runner.close()
            self.checked.reset()  # the epoch table may be new: check it again

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()


def create(url: str, settings: Settings, use_async: bool) -> SqlBackend:
    dialect = PostgresDialect(settings.table_prefix)
    refuse_unknown(url, url_options(), "PostgreSQL")
    target = parse(url)  # pgbouncer= and listen_url= are leaseq's, not libpq's
    if target.listen_url is not None:
        refuse_unknown(target.listen_url, libpq_keywords(), "listen_url PostgreSQL")
    runner: Any = (AsyncPostgresRunner if use_async else PostgresRunner)(target, dialect,
                                                                         settings)
    return SqlBackend("postgres", PostgresOps(dialect), runner)


@functools.cache
def libpq_keywords() -> frozenset[str]:
    """Every connection parameter the installed libpq knows (``PQconndefaults``): the
    driver options a PostgreSQL URL may carry (``sslmode``, ``target_session_attrs``,
    ``options``, the keepalives, ...)."""
    return frozenset(option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults())


def url_options() -> frozenset[str]:
    """The query parameters a PostgreSQL URL may carry: libpq's, and leaseq's own
    ``pgbouncer`` and ``listen_url``."""
    return libpq_keywords() | {FLAG, LISTEN}
