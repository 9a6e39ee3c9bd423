"""Thundering herd (S19, issue 23): what one wake-up of N idle workers costs the server.

    python -m benchmarks.herd --backend redis --workers 64
    python -m benchmarks.herd --backend postgres --workers 16 --bursts 1,10,100

Starts N idle ``leaseq worker`` processes (one ``leaseq worker --processes N``) on one
queue, waits until they are idle, then per burst size k: resets the server's counters,
enqueues k jobs in one transaction, waits until all k completed and one more second
passed, and reads how many claim statements the server ran. Then the idle cost: counters
reset, 10 s of nothing, read.

How claims are counted (each on a private server the script starts, so that nothing else
runs there and the shared servers' settings stay untouched):

* Redis: the slow log with a threshold of 0 logs every command with its arguments;
  ``EVALSHA <sha of claim.lua>`` are the claims (``INFO commandstats`` cannot tell
  scripts apart). Commands run inside scripts are counted by ``INFO commandstats``.
* PostgreSQL: ``pg_stat_statements`` (a private cluster started with it preloaded); the
  claim is the statement that begins ``WITH settings AS MATERIALIZED``.

Idle polls that fall inside a burst's window would be counted with it, and a wake-up
moves a worker's next poll rather than adding one, so no subtraction is honest: measure
bursts with a long ``--poll-interval`` (30 s: about one stray poll in the window at 64
workers) and the idle rate, at the default 1 s, in a run of its own (``--bursts ''``).
``--before PATH`` runs the workers from another source tree (e.g. a ``git archive`` of
main) for before/after figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import leaseq

QUEUE = "herd"
PREFIX = os.environ.get("HERD_PREFIX", "herd_")

app = leaseq.App(os.environ.get("HERD_URL", "memory://herd"), table_prefix=PREFIX)


@app.task(queue=QUEUE, name="noop")
def noop(n: int) -> int:
    """Does nothing; with HERD_LOG set, appends the job's id to that file (the tests
    count runs per job with it)."""
    path = os.environ.get("HERD_LOG")
    ctx = leaseq.current_job()
    if path and ctx is not None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.job.id}\n".encode())
        finally:
            os.close(fd)
    return n


# -- private servers ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if condition():
                return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready in {timeout:g} s")


def _install_missing(binary: str, package: str) -> None:
    """A fresh machine (CI) may lack the server: install its Debian package."""
    if shutil.which(binary) is None:
        subprocess.run(["apt-get", "install", "-y", "-q", package], check=True)


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free loopback port, logging every command."""
    _install_missing("redis-server", "redis-server")
    import redis

    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no",
                             "--slowlog-log-slower-than", "0",
                             "--slowlog-max-len", "1000000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        _wait(lambda: bool(client.ping()), 20, "redis-server")
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    raise FileNotFoundError(f"{name}: install the postgresql package")


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """A PostgreSQL cluster of our own (initdb into a temporary directory, run as the
    postgres user when we are root) with pg_stat_statements preloaded."""
    _install_missing("pg_ctlcluster", "postgresql")
    folder = tempfile.mkdtemp(prefix="leaseq-herd-pg-")
    data = os.path.join(folder, "data")
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run([*as_user, _pg_bin("initdb"), "-D", data, "-U", "postgres", "-A", "trust",
                    "--no-sync", "-E", "UTF8"], check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([*as_user, _pg_bin("postgres"), "-D", data, "-p", str(port),
                             "-k", folder, "-c", "listen_addresses=127.0.0.1",
                             "-c", "shared_preload_libraries=pg_stat_statements",
                             "-c", "pg_stat_statements.max=10000", "-c", "fsync=off",
                             "-c", "max_connections=400", "-c", "synchronous_commit=off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import psycopg

        base = f"postgresql://postgres@127.0.0.1:{port}"
        _wait(lambda: psycopg.connect(f"{base}/postgres").close() is None, 60, "postgres")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
        yield f"{base}/postgres"
    finally:
        proc.terminate()
        proc.wait(20)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def private_mariadb() -> Iterator[str]:
    """A MariaDB server of our own with performance_schema on (the shared one has it off,
    and turning it on needs a restart)."""
    _install_missing("mariadbd", "mariadb-server")
    folder = tempfile.mkdtemp(prefix="leaseq-herd-my-")
    if os.geteuid() == 0:
        shutil.chown(folder, "mysql", "mysql")
    data = os.path.join(folder, "data")
    port = free_port()
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql",
                    "--auth-root-authentication-method=normal", "--skip-test-db"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={data}", f"--port={port}",
                             "--bind-address=127.0.0.1", f"--socket={folder}/sock",
                             "--user=mysql", "--performance_schema=ON", "--skip-grant-tables",
                             "--innodb-flush-log-at-trx-commit=0", "--max-connections=500"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import pymysql

        def ready() -> bool:
            pymysql.connect(host="127.0.0.1", port=port, user="root").close()
            return True

        _wait(ready, 60, "mariadb")
        with pymysql.connect(host="127.0.0.1", port=port, user="root") as conn:
            conn.cursor().execute("CREATE DATABASE herd")
        yield f"mysql://root@127.0.0.1:{port}/herd"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


# -- counters ----------------------------------------------------------------------------------


class RedisCounts:
    """Claims (EVALSHA of claim.lua, from the slow log), all script calls, and all commands
    (INFO commandstats, which counts those run inside scripts too)."""

    def __init__(self, url: str) -> None:
        import redis

        from leaseq.backends.redis.lua import SCRIPTS

        self.client = redis.Redis.from_url(url)
        self.claim_sha = SCRIPTS["claim"].sha.encode()

    def reset(self) -> None:
        self.client.slowlog_reset()
        self.client.config_resetstat()

    def read(self) -> dict[str, int]:
        entries = self.client.execute_command("SLOWLOG", "GET", "-1")
        claims = scripts = 0
        for entry in entries:
            args = entry[3]
            if args and args[0].upper() in (b"EVALSHA", b"EVAL"):
                scripts += 1
                claims += len(args) > 1 and args[1] == self.claim_sha
        stats = self.client.info("commandstats")
        commands = sum(int(v["calls"]) for k, v in stats.items()
                       if k not in ("cmdstat_slowlog", "cmdstat_config", "cmdstat_info"))
        return {"claims": claims, "scripts": scripts, "commands": commands}

    def close(self) -> None:
        self.client.close()


class PgCounts:
    """Claims and all statements from pg_stat_statements (this benchmark's own cluster:
    only leaseq's statements, and this script's reads, which it leaves out)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)

    def reset(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def read(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT query, calls FROM pg_stat_statements WHERE query NOT ILIKE "
            "'%pg_stat_statements%'").fetchall()
        claims = sum(calls for query, calls in rows
                     if query.lstrip().startswith("WITH settings AS MATERIALIZED"))
        return {"claims": int(claims), "statements": int(sum(c for _, c in rows))}

    def close(self) -> None:
        self.conn.close()


class MyCounts:
    """MariaDB: statements from performance_schema's digest summary. No push wake-ups
    there: workers find jobs by polling, each poll one ``claim_starts`` read (the claim's
    probe; a locking read and an UPDATE follow only when it finds a job), counted as the
    claims; the locking reads (``claim_candidates``), the claims that found a job, as
    ``locking``. The idle turn holder probes every ``WATCH_TICK``."""

    def __init__(self, url: str) -> None:
        import pymysql

        port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.conn = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)

    def reset(self) -> None:
        self.conn.cursor().execute(
            "TRUNCATE TABLE performance_schema.events_statements_summary_by_digest")

    def read(self) -> dict[str, int]:
        cursor = self.conn.cursor()
        cursor.execute("SELECT digest_text, count_star FROM "
                       "performance_schema.events_statements_summary_by_digest "
                       "WHERE schema_name = 'herd'")
        rows = [(text or "", int(n)) for text, n in cursor.fetchall()]
        # claim_starts is the one read of the claim index with the paused check inline
        # (NOT EXISTS) and no lock; first_due and the locking claim_candidates are not it.
        claims = sum(n for text, n in rows if "NOT EXISTS" in text and "FORCE INDEX" in text
                     and "FOR UPDATE" not in text)
        locking = sum(n for text, n in rows if "NOT EXISTS" in text and "FORCE INDEX" in text
                      and "FOR UPDATE" in text)
        return {"claims": claims, "locking": locking, "statements": sum(n for _, n in rows)}

    def close(self) -> None:
        self.conn.close()


# -- the herd ---------------------------------------------------------------------------------


def launch(n: int, poll_interval: float) -> None:
    """``--launch N``: N worker processes forked from this one once it has imported
    leaseq (each runs ``Worker(app).run()``, as ``leaseq worker`` does), which starts them
    in a fraction of the time N fresh interpreters take on a loaded machine. A SIGTERM
    here is passed on to each; exits when all have."""
    children = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = leaseq.Worker(app, poll_interval=poll_interval, grace=5).run()
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, frame: Any) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    for pid in children:
        os.waitpid(pid, 0)


@contextlib.contextmanager
def workers(url: str, n: int, poll_interval: float = 1.0, source: str | None = None,
            log: str | None = None, fork: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """``leaseq worker benchmarks.herd:app --processes n`` on ``url`` (``fork``: ``n``
    processes forked by ``launch``); stopped (SIGTERM, then SIGKILL of the group) on the
    way out."""
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, HERD_URL=url, HERD_PREFIX=PREFIX,
               PYTHONPATH=os.pathsep.join(p for p in (
                   os.path.join(source, "src") if source else None, root) if p))
    if log:
        env["HERD_LOG"] = log
    command = ([sys.executable, "-m", "benchmarks.herd", "--launch", str(n),
                "--poll-interval", str(poll_interval)] if fork else
               [sys.executable, "-m", "leaseq.cli", "worker", "benchmarks.herd:app",
                "--processes", str(n), "--poll-interval", str(poll_interval),
                "--log-level", "WARNING", "--grace", "5"])
    proc = subprocess.Popen(command, env=env, cwd=root, start_new_session=True)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def listeners(url: str) -> int:
    """How many worker listeners are connected now (Redis clients named leaseq-listen;
    PostgreSQL sessions that ran LISTEN)."""
    if url.startswith("redis"):
        import redis

        with redis.Redis.from_url(url) as client:
            return sum(1 for c in client.client_list() if c.get("name") == "leaseq-listen")
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
                           ).fetchone()
    return int(row[0]) if row else 0


def taking_turns(url: str, n: int) -> bool:
    """Whether the ``n`` workers are idle and taking turns (``leaseq.worker.turn``): one holds
    the queue's turn and the others wait for it (PostgreSQL: in the advisory lock's
    queue; Redis: blocked on the relay list)."""
    from leaseq.backends.postgres import listen as pg_turn

    if url.startswith("redis"):
        import redis

        from leaseq.backends.redis.keys import Keys

        owner, _ = Keys(PREFIX).turn([QUEUE])
        with redis.Redis.from_url(url) as client:
            blocked = sum(1 for c in client.client_list() if c.get("cmd") == "blpop")
            return bool(client.exists(owner)) and blocked >= n - 1
    if url.startswith("mysql"):
        # The holder owns the named lock; the others wait in GET_LOCK ("User lock"), each
        # asking again every TURN_TICK, so one may be between two asks: n - 2 of them.
        with my_connect(url) as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT IS_USED_LOCK(%s)", (my_lock(url),))
            row = cursor.fetchone()
            cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                           "WHERE STATE = 'User lock' AND INFO LIKE 'SELECT GET_LOCK%%'")
            waiting = cursor.fetchone()
        return row is not None and row[0] is not None and int(waiting[0]) >= n - 2
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT granted, count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = %s AND objid::bigint = %s GROUP BY granted",
            (pg_turn.LOCK_CLASS, pg_turn.lock_key(PREFIX, [QUEUE]) % 2**32)).fetchall()
    found = {granted: int(count) for granted, count in rows}
    return found.get(True) == 1 and found.get(False, 0) >= n - 1


def my_connect(url: str) -> Any:
    """A PyMySQL connection to the (private) MariaDB at ``url``."""
    import pymysql

    port = int(url.rsplit(":", 1)[1].split("/")[0])
    return pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)


def my_lock(url: str) -> str:
    """The named lock of the herd queue's turn on the MariaDB at ``url``."""
    from leaseq.backends.mysql import turn as mysql_turn

    return mysql_turn.lock_name(url.rsplit("/", 1)[1].split("?")[0], PREFIX, [QUEUE])


def completed(q: leaseq.Queue) -> int:
    stats = q.stats().get(QUEUE)
    return 0 if stats is None else stats.completed


def burst(q: leaseq.Queue, counts: Any, k: int, timeout: float = 60.0) -> dict[str, Any]:
    """Enqueue ``k`` jobs at once into idle workers; the counts from just before the
    enqueue until all ran and one more second passed."""
    done = completed(q)
    counts.reset()
    began = time.monotonic()
    q.enqueue_many([{"kind": "noop", "queue": QUEUE, "payload": {"n": i}} for i in range(k)])
    _wait(lambda: completed(q) >= done + k, timeout, f"{k} jobs")
    ran = time.monotonic() - began
    time.sleep(1.0)
    return {"jobs": k, "seconds_to_run_all": round(ran, 3),
            "window_s": round(time.monotonic() - began, 3), **counts.read()}


def idle(counts: Any, n: int, seconds: float = 10.0) -> dict[str, float]:
    counts.reset()
    time.sleep(seconds)
    got = counts.read()
    return {f"{k}_per_worker_s": round(v / n / seconds, 3) for k, v in got.items()}


def run(url: str, n: int, bursts: list[int], poll_interval: float, source: str | None,
        settle: float, fork: bool = False) -> dict[str, Any]:
    counts: Any = (RedisCounts(url) if url.startswith("redis") else
                   MyCounts(url) if url.startswith("mysql") else PgCounts(url))
    q = leaseq.Queue(url, leaseq.Settings(table_prefix=PREFIX))
    q.migrate()
    with workers(url, n, poll_interval, source, fork=fork):
        if not url.startswith("mysql"):  # MariaDB has no listeners, only turns
            _wait(lambda: listeners(url) >= n, 300, f"{n} listeners")
        if not (url.startswith("mysql") and source):  # older trees: no MariaDB turns
            _wait(lambda: taking_turns(url, n), 300, f"{n} workers taking turns")
        time.sleep(settle)  # start-up claims and back-off ramps end
        result: dict[str, Any] = {"workers": n, "poll_interval": poll_interval,
                                  "idle": idle(counts, n)}
        result["bursts"] = [burst(q, counts, k) for k in bursts if k]
    q.close()
    counts.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("redis", "postgres", "mysql"))
    parser.add_argument("--launch", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--bursts", default="1,10,100")
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--fork", action="store_true",
                        help="fork the N worker processes from one launcher instead of "
                             "`leaseq worker --processes N` (which spawns N interpreters)")
    parser.add_argument("--before", default=None,
                        help="run the workers from this source tree (its src/ first on "
                             "PYTHONPATH)")
    args = parser.parse_args()
    if args.launch:
        logging.basicConfig(level=logging.WARNING)
        launch(args.launch, args.poll_interval)
        return
    if args.backend is None:
        parser.error("--backend is required")
    server = {"redis": private_redis, "postgres": private_postgres,
              "mysql": private_mariadb}[args.backend]()
    with server as url:
        result = run(url, args.workers, [int(b) for b in args.bursts.split(",") if b],
                     args.poll_interval, args.before, args.settle, args.fork)
    result["backend"] = args.backend
    print(json.dumps(result))


if __name__ == "__main__":
    main()
