"""A chaos run: real worker processes drain probe jobs while faults are injected, then a
checker accounts for every accepted job (reliability.md section 4: I1-I6).

Faults: SIGKILL, SIGSTOP/SIGCONT past the lease, SIGTERM of workers (each replaced);
server-side connection kills (pg_terminate_backend, MariaDB KILL CONNECTION, Redis CLIENT
KILL); a restart
of the database server. Every run has a seed, printed in the report and on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import leaseq
from tests.helpers import (
    MYSQL_URL,
    PGBOUNCER_URL,
    POSTGRES_URL,
    REDIS_URL,
    drop_tables,
    new_prefix,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Report:
    """What the checker found; a run passes when lost, unexplained and stale are zero."""

    backend: str
    seed: int
    accepted: int = 0
    completed: int = 0
    dead: int = 0
    still_live: int = 0
    lost: list[int] = field(default_factory=list)
    duplicated_explained: int = 0
    unexplained: list[int] = field(default_factory=list)
    stale_accepted: list[int] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)

    def ok(self) -> bool:
        return not (self.lost or self.unexplained or self.stale_accepted)

    def line(self) -> str:
        return (f"{self.backend} seed={self.seed}: accepted {self.accepted}, completed "
                f"{self.completed}, dead {self.dead}, live {self.still_live}, lost "
                f"{len(self.lost)}, re-run after a superseded lease {self.duplicated_explained}, "
                f"unexplained duplicates {len(self.unexplained)}, stale writes accepted "
                f"{len(self.stale_accepted)}, faults {self.faults}")


CHAOS_DB = "leaseq_chaos"


def chaos_mysql_url() -> str:
    """MariaDB has no session name to kill by, so the chaos runs use a database of their
    own: a connection kill (S5) then hits only them, never a test running alongside."""
    import pymysql

    parts = urlsplit(MYSQL_URL)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                           user=parts.username or "root", password=parts.password or "",
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {CHAOS_DB}")
    finally:
        conn.close()
    return urlunsplit(parts._replace(path=f"/{CHAOS_DB}"))


class Chaos:
    def __init__(self, backend: str, tmp: Path, seed: int, lease: float = 1.5,
                 base: str | None = None) -> None:
        """``base``: a server of the test's own (dropped with its tables afterwards)
        instead of the backend's shared one."""
        self.backend, self.seed, self.lease = backend, seed, lease
        self.rng = random.Random(seed)
        self.prefix = new_prefix()
        self.own_server = base is not None
        base = base or {"sqlite": f"sqlite:///{tmp}/chaos.db", "postgres": POSTGRES_URL,
                        "postgres_pgbouncer": PGBOUNCER_URL, "mysql": chaos_mysql_url(),
                        "redis": REDIS_URL}[backend]
        # Workers' PostgreSQL sessions and Redis clients carry a name, so connection kills
        # hit only them, never another program using the same server.
        name = {"postgres": "application_name", "postgres_pgbouncer": "application_name",
                "redis": "client_name"}.get(backend)
        self.url = f"{base}{'&' if '?' in base else '?'}{name}=leaseq_chaos" if name else base
        self.tmp = tmp
        self.log = tmp / "starts.jsonl"
        self.q = leaseq.connect(base, table_prefix=self.prefix, reclaim_interval=None)
        self.q.migrate()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.stopped: set[int] = set()
        self.faults: dict[str, int] = {}
        self.ids: list[int] = []

    # -- running ---------------------------------------------------------------------

    def enqueue(self, n: int, work: float = 0.02, fail: float = 0.05) -> None:
        """``n`` probe jobs, each sleeping up to ``work`` s and failing (then retried)
        with probability ``fail``."""
        for first in range(0, n, 500):
            batch = [{"queue": "chaos", "payload": {"work": work, "fail": fail},
                      "kind": "probe"}
                     for _ in range(min(500, n - first))]
            self.ids += [r.id for r in self.q.enqueue_many(batch)]

    def spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LEASEQ_CHAOS_URL": self.url, "LEASEQ_CHAOS_PREFIX": self.prefix,
               "LEASEQ_CHAOS_LOG": str(self.log), "LEASEQ_CHAOS_LEASE": str(self.lease),
               "PYTHONPATH": str(ROOT)}
        with open(self.tmp / f"worker-{len(self.workers)}.log", "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leaseq.cli", "worker", "tests.chaos.probe_app:app",
                 "--concurrency", "4", "--poll-interval", "0.1", "--reclaim-interval", "0.5",
                 "--grace", "5", "--log-level", "WARNING"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.workers.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.workers if p.poll() is None and p.pid not in self.stopped]

    def count(self, fault: str) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1

    def signal_a_worker(self, kind: str) -> None:
        candidates = self.alive()
        if not candidates:
            return
        proc = self.rng.choice(candidates)
        if kind == "kill":
            proc.kill()
        elif kind == "term":
            proc.send_signal(signal.SIGTERM)
        elif kind == "stop":
            proc.send_signal(signal.SIGSTOP)
            self.stopped.add(proc.pid)
        self.count(kind)

    def resume_stopped(self) -> None:
        for proc in self.workers:
            if proc.pid in self.stopped:
                proc.send_signal(signal.SIGCONT)
        self.stopped.clear()

    def kill_connections(self) -> None:
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = 'leaseq_chaos'")
        elif self.backend == "mysql":
            import pymysql

            conn = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s "
                            "AND id <> CONNECTION_ID() AND command <> 'Daemon'", (CHAOS_DB,))
                for (pid,) in cur.fetchall():
                    # A connection may end by itself meanwhile.
                    with contextlib.suppress(pymysql.err.OperationalError):
                        cur.execute(f"KILL CONNECTION {int(pid)}")
            conn.close()
        elif self.backend == "redis":
            import redis

            with redis.Redis.from_url(REDIS_URL) as client:
                for info in client.client_list():
                    if info.get("name") == "leaseq_chaos":
                        with contextlib.suppress(redis.ResponseError):  # gone meanwhile
                            client.client_kill_filter(_id=info["id"])
        self.count("connection_kill")

    def restart_server(self) -> None:
        restart = {
            "postgres": "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | head -n1)"
                        " main restart -m fast",
            "mysql": "pkill -9 -x mariadbd; sleep 0.5; start-stop-daemon --start --oknodo "
                     "--background --exec /usr/sbin/mariadbd",
        }[self.backend]
        subprocess.run(["bash", "-c", restart], check=False, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["bash", str(ROOT / "scripts" / "services")], check=False,
                       timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.count("server_restart")

    def run(self, workers: int, seconds: float, faults: list[str], every: float = 0.6) -> None:
        """Keep ``workers`` running for ``seconds`` while injecting ``faults``."""
        for _ in range(workers):
            self.spawn()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(every * self.rng.uniform(0.5, 1.5))
            fault = self.rng.choice(faults) if faults else None
            if fault in ("kill", "term", "stop"):
                self.signal_a_worker(fault)
            elif fault == "connections":
                self.kill_connections()
            elif fault == "restart":
                self.restart_server()
            if fault != "stop" and self.stopped and self.rng.random() < 0.5:
                time.sleep(self.lease * 1.5)  # frozen past its lease: a zombie when resumed
                self.resume_stopped()
            while len(self.alive()) < workers:
                self.spawn()
        self.resume_stopped()

    def settle(self, timeout: float = 120.0) -> None:
        """Faults off: let the workers finish every job, then stop them."""
        while len(self.alive()) < 2:
            self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                s = self.q.stats().get("chaos")
            except leaseq.BackendUnavailable:
                s = None
            if s is not None and s.available + s.scheduled + s.running == 0:
                break
            time.sleep(0.2)
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    # -- checking --------------------------------------------------------------------

    def starts(self) -> dict[int, list[dict[str, Any]]]:
        """Every start the probes logged, by job id: job, token, worker, pid, at."""
        starts: dict[int, list[dict[str, Any]]] = {}
        if self.log.exists():
            for line in self.log.read_text().splitlines():
                if line:
                    row = json.loads(line)
                    starts.setdefault(row["job"], []).append(row)
        return starts

    def check(self) -> Report:
        report = Report(self.backend, self.seed, accepted=len(self.ids), faults=self.faults)
        starts = self.starts()
        for job_id in self.ids:
            try:
                info = self.q.get(job_id)
            except leaseq.JobNotFound:
                report.lost.append(job_id)
                continue
            runs = starts.get(job_id, [])
            tokens = [r["token"] for r in runs]
            if len(tokens) != len(set(tokens)):
                report.unexplained.append(job_id)  # one lease ran twice
            elif len(runs) > 1:
                report.duplicated_explained += 1  # each re-run had a newer lease
            if info.state == "completed":
                report.completed += 1
                # The completion must come from the newest lease that ever started it.
                newest = max(runs, key=lambda r: r["token"]) if runs else None
                if newest is None or info.worker_id != newest["worker"]:
                    report.stale_accepted.append(job_id)
            elif info.state == "dead":
                report.dead += 1
            elif info.state in ("available", "scheduled", "running"):
                report.still_live += 1
                report.lost.append(job_id)  # settle() drained the queue: nothing may wait
        return report

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
        try:
            self.q.close()
        finally:
            if not self.own_server:
                drop_tables(self.backend, self.prefix,
                            CHAOS_DB if self.backend == "mysql" else None)
