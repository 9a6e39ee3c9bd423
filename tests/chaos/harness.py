"""A chaos run: real worker processes drain probe jobs while faults are injected, then a
checker accounts for every accepted job (reliability.md section 4: I1-I6).

Faults: SIGKILL, SIGSTOP/SIGCONT past the lease, SIGTERM of workers (each replaced);
server-side connection kills (pg_terminate_backend, MariaDB KILL CONNECTION, Redis CLIENT
KILL); a restart of a database server of the run's own (servers.py). Every run has a
seed, printed in the report and on failure.

Every process records what it did (history.py): the harness and the producers their
enqueues, the probes each delivery and run. ``check`` reads the books (every accepted id
in a final state) and hands the history and the final state to the history checker.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import leaseq
from tests.chaos.history import (
    Findings,
    Recorder,
    check,
    claims,
    final_state,
    load,
    outcome_of,
    publish,
)
from tests.chaos.servers import PrivateServer
from tests.helpers import (
    MYSQL_URL,
    PGBOUNCER_URL,
    POSTGRES_URL,
    REDIS_CLUSTER_URL,
    REDIS_URL,
    drop_tables,
    new_prefix,
    redis_cluster,
)

ROOT = Path(__file__).resolve().parents[2]
REPORT = os.environ.get("LEASEQ_CHAOS_REPORT")


@dataclass
class Report:
    """What the checks found: the books (every accepted id) and the history checker's
    findings (tests/chaos/history.py). A run passes when nothing accepted is missing or
    left waiting and the history shows no anomaly."""

    backend: str
    seed: int
    accepted: int = 0
    completed: int = 0
    dead: int = 0
    still_live: int = 0
    lost: list[int] = field(default_factory=list)  # accepted ids missing or still live
    faults: dict[str, int] = field(default_factory=dict)
    history: Findings = field(default_factory=Findings)

    def ok(self) -> bool:
        return not self.lost and self.history.clean()

    def line(self) -> str:
        return (f"{self.backend} seed={self.seed}: accepted {self.accepted}, completed "
                f"{self.completed}, dead {self.dead}, live {self.still_live}, lost "
                f"{len(self.lost)}, faults {self.faults}; {self.history.line()}")

    def detail(self) -> str:
        return f"lost ids={self.lost[:20]} {self.history.detail()}"


def mysql_database(name: str, create: bool) -> str:
    """Creates (or drops) the MariaDB database ``name`` on the shared server; returns its
    URL. MariaDB has no session name to kill by, so each chaos run uses a database of its
    own: a connection kill (S5) then hits only that run, never a test running alongside
    (CI's serial part runs two chaos files at a time)."""
    import pymysql

    parts = urlsplit(MYSQL_URL)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                           user=parts.username or "root", password=parts.password or "",
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {name}" if create
                        else f"DROP DATABASE IF EXISTS {name}")
    finally:
        conn.close()
    return urlunsplit(parts._replace(path=f"/{name}"))


@dataclass
class Producer:
    """Enqueues probe jobs one at a time, each with a tag of its own, until told to stop,
    recording each enqueue; ``returned`` holds ``(id, time.time(), tag)`` of those that
    returned. A failed enqueue is not repeated (its outcome is the history's to sort
    out); the next one has a new tag."""

    url: str
    prefix: str
    name: str
    recorder: Recorder
    pace: float = 0.006  # mean seconds between one producer's enqueues
    returned: list[tuple[int, float, str]] = field(default_factory=list)
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __call__(self) -> None:
        q = leaseq.connect(self.url, table_prefix=self.prefix, reclaim_interval=None)
        try:
            n = 0
            while not self.stop.is_set():
                tag = f"{self.name}/{n}"
                n += 1
                try:
                    with self.recorder.op("enqueue", key=tag) as call:
                        job = q.enqueue("chaos", {"work": 0.02, "fail": 0.0, "tag": tag},
                                        kind="probe")
                        call.job = job.id
                except leaseq.LeaseqError:
                    self.failures += 1
                    time.sleep(0.05)
                    continue
                self.returned.append((job.id, time.time(), tag))
                time.sleep(random.uniform(0.3, 1.7) * self.pace)
        finally:
            q.close()


@contextlib.contextmanager
def producing(producers: list[Producer]) -> Iterator[list[Producer]]:
    """Runs ``producers`` in threads for the block, then stops and joins them."""
    threads = [threading.Thread(target=p, name=f"producer-{p.name}") for p in producers]
    for thread in threads:
        thread.start()
    try:
        yield producers
    finally:
        for p in producers:
            p.stop.set()
        for thread in threads:
            thread.join(60)


class Chaos:
    def __init__(self, backend: str, tmp: Path, seed: int, lease: float = 1.5,
                 base: str | None = None, server: PrivateServer | None = None) -> None:
        """``base``: a server of the test's own (dropped with its tables afterwards)
        instead of the backend's shared one; ``server``: one S4 may restart."""
        self.backend, self.seed, self.lease = backend, seed, lease
        self.server = server
        base = server.url if server is not None else base
        self.rng = random.Random(seed)
        self.prefix = new_prefix()
        # This run's name: its workers' sessions (PostgreSQL application_name, Redis
        # client_name) and its MariaDB database, so connection kills hit only this run,
        # never another test or chaos run on the same server.
        self.name = f"leaseq_chaos_{self.prefix.rstrip('_')}"
        self.own_server = base is not None
        if base is None:
            base = {"sqlite": f"sqlite:///{tmp}/chaos.db", "postgres": POSTGRES_URL,
                    "postgres_pgbouncer": PGBOUNCER_URL, "redis": REDIS_URL,
                    "redis_cluster": REDIS_CLUSTER_URL}.get(backend) \
                or mysql_database(self.name, create=True)
        option = {"postgres": "application_name", "postgres_pgbouncer": "application_name",
                  "redis": "client_name", "redis_cluster": "client_name"}.get(backend)
        self.url = (f"{base}{'&' if '?' in base else '?'}{option}={self.name}" if option
                    else base)
        self.tmp = tmp
        # Each process records its operations here (history.py): the probes their claims
        # and runs, the harness and producers their enqueues.
        self.history = tmp / "history"
        self.recorder = Recorder(self.history, "harness")
        self.q = leaseq.connect(base, table_prefix=self.prefix, reclaim_interval=None)
        self.q.migrate()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.stopped: set[int] = set()
        self.faults: dict[str, int] = {}
        self.ids: list[int] = []

    # -- running ---------------------------------------------------------------------

    def enqueue(self, n: int, work: float = 0.02, fail: float = 0.05,
                hold: float = 0.0) -> list[int]:
        """``n`` probe jobs, each sleeping up to ``work`` s (plus ``hold`` s on its first
        attempt) and failing (then retried) with probability ``fail``; each carries a tag
        of its own and its enqueue is recorded. Returns their ids."""
        ids: list[int] = []
        for first in range(0, n, 500):
            tags = [f"harness/{len(self.ids) + len(ids) + i}"
                    for i in range(min(500, n - first))]
            batch = [{"queue": "chaos", "kind": "probe",
                      "payload": {"work": work, "fail": fail, "hold": hold, "tag": tag}}
                     for tag in tags]
            calls = [self.recorder.invoke("enqueue", key=tag) for tag in tags]
            try:
                results = self.q.enqueue_many(batch)
            except BaseException as exc:
                for call in calls:
                    call.complete(outcome_of(exc))
                raise
            for call, result in zip(calls, results, strict=True):
                call.job = result.id
                call.complete("ok")
            ids += [r.id for r in results]
        self.ids += ids
        return ids

    def producer(self, name: str, pace: float = 0.03) -> Producer:
        """A ``Producer`` on the workers' URL (so connection kills reach it too)."""
        return Producer(self.url, self.prefix, name, Recorder(self.history, name), pace)

    def spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LEASEQ_CHAOS_URL": self.url, "LEASEQ_CHAOS_PREFIX": self.prefix,
               "LEASEQ_CHAOS_HISTORY": str(self.history), "LEASEQ_CHAOS_LEASE": str(self.lease),
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
                             "WHERE application_name = %s", (self.name,))
        elif self.backend == "mysql":
            import pymysql

            conn = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s "
                            "AND id <> CONNECTION_ID() AND command <> 'Daemon'", (self.name,))
                for (pid,) in cur.fetchall():
                    # A connection may end by itself meanwhile.
                    with contextlib.suppress(pymysql.err.OperationalError):
                        cur.execute(f"KILL CONNECTION {int(pid)}")
            conn.close()
        elif self.backend == "redis":
            import redis

            with redis.Redis.from_url(REDIS_URL) as client:
                for info in client.client_list():
                    if info.get("name") == self.name:
                        with contextlib.suppress(redis.ResponseError):  # gone meanwhile
                            client.client_kill_filter(_id=info["id"])
        elif self.backend == "redis_cluster":
            import redis

            cluster = redis_cluster()
            try:
                for node in cluster.get_primaries():
                    with redis.Redis(host=node.host, port=node.port) as client:
                        for info in client.client_list():
                            if info.get("name") == self.name:
                                with contextlib.suppress(redis.ResponseError):
                                    client.client_kill_filter(_id=info["id"])
            finally:
                cluster.close()
        self.count("connection_kill")

    def restart_server(self) -> None:
        """Restart the run's own server (``servers.py``, S4), never a shared one."""
        assert self.server is not None, "S4 restarts a server of the run's own"
        self.server.restart()
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
        """Every start the probes recorded, by job id: job, token, worker, pid, at."""
        starts: dict[int, list[dict[str, Any]]] = {}
        for line in claims(self.history) if self.history.exists() else []:
            starts.setdefault(line["job"], []).append(
                {"job": line["job"], "token": line["token"], "at": line["t"],
                 **(line["value"] or {})})
        return starts

    def check(self, tail_from: float | None = None) -> Report:
        """The books of every accepted id, and the history checker's findings
        (``tail_from``: see ``history.check``)."""
        report = Report(self.backend, self.seed, accepted=len(self.ids), faults=self.faults)
        final = final_state(self.q, "chaos")
        states = {job.id: job.state for job in final}
        for job_id in self.ids:
            state = states.get(job_id)
            if state == "completed":
                report.completed += 1
            elif state == "dead":
                report.dead += 1
            elif state is None:
                report.lost.append(job_id)
            elif state in ("available", "scheduled", "running"):
                report.still_live += 1
                report.lost.append(job_id)  # settle() drained the queue: nothing may wait
        report.history = check(load(self.history), final, tail_from=tail_from)
        return report

    def publish(self, report: Report, scenario: str, line: str, note: str = "",
                **figures: Any) -> None:
        """Prints a run's line, appends it to ``$LEASEQ_CHAOS_REPORT`` and its findings
        to ``$LEASEQ_HISTORY_REPORT`` (history.publish) when set."""
        print(line)
        if REPORT:
            with open(REPORT, "a") as out:
                out.write(line + "\n")
        publish(report.history, scenario=scenario, backend=self.backend, seed=self.seed,
                note=note, accepted=report.accepted, faults=self.faults, **figures)

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
        try:
            self.q.close()
        finally:
            if self.backend == "mysql" and not self.own_server:
                mysql_database(self.name, create=False)
            elif not self.own_server:
                drop_tables(self.backend, self.prefix)
