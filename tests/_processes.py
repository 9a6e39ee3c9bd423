"""What the tests that run `leaseq worker` processes share: the event log their handlers
append to, and a fleet of worker processes on one fresh database.

Apps run in those processes (tests/_limits_app.py, tests/_schedule_app.py) import only
``append_event`` from here, so a worker process never imports pytest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import leaseq

ROOT = Path(__file__).resolve().parent.parent


def append_event(**fields: Any) -> None:
    """Appends one JSON line to the file named by LEASEQ_TEST_LOG (nothing without it).
    One ``write`` of an O_APPEND file: lines of concurrent processes never interleave."""
    path = os.environ.get("LEASEQ_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(fields) + "\n").encode())
    finally:
        os.close(fd)


class WorkerFleet:
    """`leaseq worker APP` processes on one fresh database (tables dropped at ``close``),
    with the event log their handlers write (``events``) and each one's output."""

    def __init__(self, backend: str, tmp: Path) -> None:
        from tests.helpers import (
            MYSQL_URL,
            POSTGRES_URL,
            REDIS_CLUSTER_URL,
            REDIS_URL,
            new_prefix,
        )

        self.backend = backend
        self.url = {"sqlite": f"sqlite:///{tmp}/fleet.db", "postgres": POSTGRES_URL,
                    "mysql": MYSQL_URL, "redis": REDIS_URL,
                    "redis_cluster": REDIS_CLUSTER_URL}[backend]
        self.prefix = new_prefix()
        self.tmp = tmp
        self.log = tmp / "events.jsonl"
        self.procs: list[subprocess.Popen[str]] = []
        self.q = leaseq.connect(self.url, table_prefix=self.prefix)
        self.q.migrate()

    def start(self, app: str, *options: str) -> subprocess.Popen[str]:
        """One more worker process of ``app`` (``module:attribute``)."""
        env = {**os.environ, "LEASEQ_TEST_URL": self.url, "LEASEQ_TEST_PREFIX": self.prefix,
               "LEASEQ_TEST_LOG": str(self.log), "PYTHONPATH": str(ROOT)}
        with open(self.tmp / f"worker{len(self.procs)}.log", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leaseq.cli", "worker", app, *options],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        return proc

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def output(self, n: int) -> str:
        return (self.tmp / f"worker{n}.log").read_text()

    def outputs(self) -> str:
        return "\n".join(self.output(n) for n in range(len(self.procs)))

    def close(self) -> None:
        """Stops the workers (SIGTERM, then SIGKILL after 15 s) and drops the tables."""
        from tests.helpers import drop_tables

        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.q.close()
        drop_tables(self.backend, self.prefix)
