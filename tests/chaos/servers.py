"""Database servers of a chaos run's own, on free loopback ports, that S4 restarts: the
shared servers on 5432, 3306 and 6379 serve every other test (and every other session on
the machine), so a restart of theirs would fail tests that have nothing to do with it.

``PrivatePostgres`` restarts with a fast shutdown (``SIGINT``), ``PrivateMariadb`` and
``PrivateRedis`` with ``kill -9``: the Redis one writes an append-only file it fsyncs on
every write, so a kill loses nothing acknowledged, as on the SQL servers.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """One server process on ``port``, its files in a folder of its own."""

    url: str

    def __init__(self, owner: str | None = None) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="leaseq-chaos-"))
        if owner is not None and os.geteuid() == 0:
            shutil.chown(self.folder, owner, owner)  # the server refuses to run as root
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def answers(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

        def up() -> bool:
            try:
                return self.answers()
            except Exception:
                return False

        wait_for(up, timeout=60, interval=0.1, message=f"{type(self).__name__} to answer")

    def stop(self, kill: bool) -> None:
        if self.proc is not None:
            if kill:
                self.proc.kill()
            else:
                self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)
            self.proc = None

    def restart(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        try:
            self.stop(kill=True)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _as_user(user: str) -> list[str]:
    return ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []


class PrivatePostgres(PrivateServer):
    """Run by pg_ctl as the postgres user: signals reach the postmaster itself, not a
    runuser in front of it."""

    def __init__(self) -> None:
        super().__init__("postgres")
        self.bin = _pg_bin()
        self.data = self.folder / "data"
        subprocess.run([*_as_user("postgres"), str(self.bin / "initdb"), "-D", str(self.data),
                        "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
                       check=True, stdout=subprocess.DEVNULL)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def pg_ctl(self, *args: str) -> None:
        subprocess.run([*_as_user("postgres"), str(self.bin / "pg_ctl"), "-D", str(self.data),
                        *args], check=True, timeout=120, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                   "-c max_connections=200")
        self.pg_ctl("-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self, kill: bool) -> None:
        if (self.data / "postmaster.pid").exists():
            self.pg_ctl("-m", "immediate" if kill else "fast", "-w", "stop")

    def answers(self) -> bool:
        import psycopg

        psycopg.connect(self.url, connect_timeout=2).close()
        return True

    def restart(self) -> None:
        self.stop(kill=False)  # a fast shutdown, as pg_ctl restart -m fast
        self.start()


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
    return found[-1].parent


class PrivateMariadb(PrivateServer):
    def __init__(self) -> None:
        if shutil.which("mariadbd") is None:
            pytest.skip("mariadbd is not installed")
        super().__init__("mysql")
        subprocess.run(["mariadb-install-db", "--no-defaults",
                        f"--datadir={self.folder / 'data'}", "--user=mysql",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.start()
        import pymysql

        with pymysql.connect(host="127.0.0.1", port=self.port, user="root") as conn:
            conn.cursor().execute("CREATE DATABASE chaos")
        self.url = f"mysql://root@127.0.0.1:{self.port}/chaos"

    def argv(self) -> list[str]:
        return ["mariadbd", "--no-defaults", f"--datadir={self.folder / 'data'}",
                f"--port={self.port}", "--bind-address=127.0.0.1",
                f"--socket={self.folder / 'sock'}", "--user=mysql", "--skip-grant-tables",
                "--max-connections=200"]

    def answers(self) -> bool:
        import pymysql

        pymysql.connect(host="127.0.0.1", port=self.port, user="root",
                        connect_timeout=2).close()
        return True

    def restart(self) -> None:
        self.stop(kill=True)  # as the old harness did to the shared one: kill -9
        self.start()


class PrivateRedis(PrivateServer):
    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        super().__init__()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def argv(self) -> list[str]:
        return ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
                "--save", ""]

    def answers(self) -> bool:
        import redis

        with redis.Redis(port=self.port, socket_timeout=2) as client:
            return bool(client.ping())

    def restart(self) -> None:
        self.stop(kill=True)
        self.start()


PRIVATE = {"postgres": PrivatePostgres, "mysql": PrivateMariadb, "redis": PrivateRedis}
