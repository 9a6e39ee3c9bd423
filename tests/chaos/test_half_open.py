"""S7, half-open connections, on PostgreSQL, MariaDB and Redis: a worker's database
connections are black-holed (packets silently dropped by a router between the two
kernels, no RST: ``tests/netns.py``) for longer than the lease.

Two workers sit behind the router and one talks to the server directly. While the
network is dead the cut workers' renewals fail within a bounded time and they fence their
jobs themselves; a SIGTERM to one of them exits within ``--grace`` plus
``SHUTDOWN_SLACK``; the direct worker takes their jobs over and completes everything.
Then the direct worker stops, the network heals, and the surviving cut worker runs the
new jobs by itself: it recovered without a restart (its listener too, where the backend
has one). The history checker then finds nothing lost, duplicated beyond the leases that
ran out, stale or unexpected.

The default run uses a 10 s black hole, a 2 s lease and tight keepalive settings in the
cut workers' URLs (which also shows that the URL overrides leaseq's defaults). For the
long version with leaseq's own defaults:
``LEASEQ_HALFOPEN_SECONDS=60 LEASEQ_HALFOPEN_DEFAULTS=1``. Each run prints its figures;
``LEASEQ_CHAOS_REPORT`` appends them to a file.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from leaseq.backends import _sockets
from leaseq.backends._retry import RECONNECT_WINDOW
from leaseq.worker.worker import SHUTDOWN_SLACK
from tests import netns
from tests.chaos.harness import ROOT, Chaos
from tests.conftest import require
from tests.helpers import wait_for

HOLE = float(os.environ.get("LEASEQ_HALFOPEN_SECONDS", "10"))
DEFAULTS = os.environ.get("LEASEQ_HALFOPEN_DEFAULTS") == "1"
LEASE = 2.0
GRACE = 2.0
HOLD = 6.0  # seconds a pre-hole job's first run takes: renewed, still running at the fence
# Tight dead-connection settings for the default run: found dead in about 2 s.
TUNED = "keepalives_idle=1&keepalives_interval=1&keepalives_count=1&tcp_user_timeout=2000"
CONNECT_TIMEOUT = 2.0 if not DEFAULTS else 10.0
# The longest a call of the cut worker may block: a try that fails just inside the
# reconnect window, then one more on a connection that is declared dead or cannot be
# made, plus the pauses between tries and a second of keepalive timer granularity.
DETECT = 2.0 if not DEFAULTS else _sockets.DETECTION
BOUND = RECONNECT_WINDOW + max(DETECT, CONNECT_TIMEOUT) + 2.0


@pytest.fixture(params=["postgres", "mysql", "redis"])
def chaos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Chaos]:
    require(request.param)
    why = netns.available()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the half-open test {why} (CI=true: it must run)")
        pytest.skip(f"the half-open test {why}")
    seed = int(os.environ.get("LEASEQ_CHAOS_SEED", random.randrange(2**32)))
    run = Chaos(request.param, tmp_path, seed, lease=LEASE)
    try:
        yield run
    finally:
        run.close()


def cut_url(chaos: Chaos, router: netns.DeadRouter) -> str:
    url = router.url_for(chaos.url)
    if DEFAULTS:
        return url
    extra = TUNED + {"postgres": f"&connect_timeout={int(CONNECT_TIMEOUT)}",
                     # The server ends a session cut off inside a transaction sooner,
                     # releasing the jobs' row locks for the takeover (design §37).
                     "mysql": "&idle_transaction_timeout=3"}.get(chaos.backend, "")
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def spawn(chaos: Chaos, name: str, url: str, router: netns.DeadRouter | None
          ) -> subprocess.Popen[bytes]:
    """A worker (inside the router's client namespace when ``router``) logging to
    ``<tmp>/<name>.log`` at DEBUG (a heartbeat failed for an unreachable database is a
    DEBUG line: the fetch loop reports the outage, design §53), with times."""
    env = {**os.environ, "LEASEQ_CHAOS_URL": url, "LEASEQ_CHAOS_PREFIX": chaos.prefix,
           "LEASEQ_CHAOS_HISTORY": str(chaos.history), "LEASEQ_CHAOS_LEASE": str(LEASE),
           "LEASEQ_CHAOS_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "leaseq.cli", "worker", "tests.chaos.probe_app:app",
            "--concurrency", "4", "--poll-interval", "0.1", "--reclaim-interval", "0.5",
            "--grace", str(GRACE), "--log-level", "DEBUG"]  # heartbeat failures: DEBUG
    with open(chaos.tmp / f"{name}.log", "wb") as out:
        proc = subprocess.Popen(router.run(argv) if router else argv, cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    chaos.workers.append(proc)
    return proc


def log_lines(chaos: Chaos, name: str) -> list[tuple[float, str]]:
    """``(unix time, line)`` of each timestamped line of a worker's log."""
    out = []
    for line in (chaos.tmp / f"{name}.log").read_text(errors="replace").splitlines():
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        out.append((at, line))
    return out


def first(lines: list[tuple[float, str]], text: str, after: float) -> float | None:
    return next((at for at, line in lines if text in line and at >= after), None)


def starts(chaos: Chaos) -> list[dict[str, Any]]:
    return [start for runs in chaos.starts().values() for start in runs]


def enqueue(chaos: Chaos, n: int, hold: float = 0.0) -> list[int]:
    return chaos.enqueue(n, work=0.02, fail=0.0, hold=hold)


def unfinished(chaos: Chaos) -> int:
    s = chaos.q.stats().get("chaos")
    return 0 if s is None else s.available + s.scheduled + s.running


def listening_since(chaos: Chaos, since: float) -> bool:
    """A push wake-up connection of the chaos workers opened after ``since``."""
    if chaos.backend == "postgres":
        import psycopg

        from tests.helpers import POSTGRES_URL

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                "%s AND query LIKE 'LISTEN%%' AND backend_start > "
                "to_timestamp(%s)", (chaos.name, since)).fetchone()
        return bool(row and row[0])
    import redis

    from tests.helpers import REDIS_URL

    with redis.Redis.from_url(REDIS_URL) as client:
        return any(info.get("name") == chaos.name and info.get("cmd") == "subscribe"
                   and float(info["age"]) < time.time() - since
                   for info in client.client_list())


def test_s7_half_open_connection(chaos: Chaos) -> None:
    with netns.DeadRouter.for_url(chaos.url) as router:
        url = cut_url(chaos, router)
        cut = spawn(chaos, "cut", url, router)
        doomed = spawn(chaos, "doomed", url, router)  # SIGTERMed inside the black hole
        for name in ("cut", "doomed"):
            wait_for(lambda name=name: first(log_lines(chaos, name), "started:", 0),
                     timeout=20, message=f"{name} worker started")
        # The direct worker is started first and frozen while the cut ones take the
        # held jobs: started only then, it could take longer than HOLD on a loaded
        # machine, and the held jobs would finish before the hole.
        direct = spawn(chaos, "direct", chaos.url, None)
        wait_for(lambda: first(log_lines(chaos, "direct"), "started:", 0), timeout=20,
                 message="direct worker started")
        direct.send_signal(signal.SIGSTOP)
        held = enqueue(chaos, 8, hold=HOLD)
        pids = {cut.pid, doomed.pid}
        wait_for(lambda: {r["pid"] for r in starts(chaos)} >= pids, timeout=10,
                 message="both cut workers running jobs")
        direct.send_signal(signal.SIGCONT)

        # -- the black hole -------------------------------------------------------------
        holed = time.time()
        router.blackhole()
        time.sleep(0.5)  # the doomed worker's jobs still run, their leases still good
        termed = time.monotonic()
        doomed.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            doomed.wait(GRACE + SHUTDOWN_SLACK + 5)
        exit_seconds = time.monotonic() - termed
        assert doomed.returncode is not None, "SIGTERM in the black hole: still running"
        enqueue(chaos, 40)  # more work while the cut workers are away
        # The direct worker takes over every job the cut ones held and runs the rest.
        wait_for(lambda: unfinished(chaos) == 0, timeout=max(HOLE - 1, LEASE + 5),
                 message="the direct worker completing everything during the black hole")
        rerun = {r["job"] for r in starts(chaos) if r["pid"] == direct.pid}
        assert set(held) <= rerun, "jobs of the cut workers not taken over"
        # The direct worker stops; the next jobs can only be run by the cut worker.
        direct.send_signal(signal.SIGTERM)
        direct.wait(GRACE + SHUTDOWN_SLACK + 5)
        time.sleep(max(0.0, holed + HOLE - time.time()))
        lines = log_lines(chaos, "cut")
        new = enqueue(chaos, 20)
        healed = time.time()
        router.heal()

        # -- what happened inside -------------------------------------------------------
        fenced = first(lines, "no lease renewal in time", holed)
        beat_failed = first(lines, "heartbeat of", holed)
        # Every database call of the fetch loop (claims, next-due lookups) that failed.
        fetch_fails = [at for at, line in lines if at >= holed and (
            " unreachable (" in line or "next-due lookup failed" in line)]
        assert fenced is not None and fenced - holed <= LEASE + 0.5, \
            f"no self-fence within the lease: {fenced and fenced - holed}"
        assert beat_failed is not None and beat_failed - holed <= BOUND, \
            f"heartbeat did not fail within {BOUND} s: {beat_failed and beat_failed - holed}"
        assert fetch_fails, "no claim failed during the black hole"
        gaps = [b - a for a, b in zip([holed, *fetch_fails], [*fetch_fails, healed],
                                      strict=True)]
        assert max(gaps) <= BOUND + 1, f"a claim blocked {max(gaps):.1f} s (bound {BOUND})"

        # -- the network heals: the cut worker runs new jobs by itself ------------------
        wait_for(lambda: unfinished(chaos) == 0, timeout=BOUND + 20,
                 message="the cut worker running new jobs after the heal")
        recovered = min(r["at"] for r in starts(chaos) if r["job"] in set(new)) - healed
        assert {r["pid"] for r in starts(chaos) if r["job"] in set(new)} == {cut.pid}
        listener = None
        if chaos.backend in ("postgres", "redis"):
            wait_for(lambda: listening_since(chaos, healed), timeout=45,
                     message="the cut worker's listener reconnecting after the heal")
            listener = time.time() - healed
        report = chaos.check()
        line = (f"S7 half-open {chaos.backend} hole={HOLE:g}s lease={LEASE:g}s "
                f"{'defaults' if DEFAULTS else 'tuned'}: self-fence "
                f"{fenced - holed:.1f} s, heartbeat failed {beat_failed - holed:.1f} s, "
                f"claims failed every <= {max(gaps):.1f} s, SIGTERM exit {exit_seconds:.1f} s "
                f"(code {doomed.returncode}, grace {GRACE:g}), recovery {recovered:.1f} s"
                + (f", listener back {listener:.1f} s" if listener is not None else "")
                + f"; {report.line()}")
        chaos.publish(report, "S7 half-open (partition)", line,
                      note=f"{HOLE:g} s black hole, lease {LEASE:g} s")
        assert exit_seconds <= GRACE + SHUTDOWN_SLACK + 1.5, line
        assert report.ok(), f"{line}\n{report.detail()}"
        assert report.completed == report.accepted, line
