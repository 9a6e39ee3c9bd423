"""PostgreSQL failover (issue 22 item 4): a primary with a streaming standby of its own
(scripts/pg-standby), producers and real ``leaseq worker`` processes on the libpq
multi-host URL with ``target_session_attrs=read-write``; mid-drain the primary dies
(``pg_ctl stop -m immediate``) and the standby is promoted. Nobody is restarted: producers
and workers must find the new primary by themselves.

With synchronous replication nothing that returned is lost: every enqueue that returned
runs to completion, and the history checker (history.py) finds nothing lost, duplicated,
stale or unexpected. With asynchronous replication the commits the standby had not
received are gone; the test measures them (the lost tail: returned enqueues missing, acks
lost and so jobs re-run, claims lost and so a lease token reused, which the history counts
as duplicated and stale) and asserts only what must hold even then, which includes that
no job id is handed out twice (design §59): every id returned after the promotion is
above every id returned before the primary died, and none names two jobs.

Short by default; LEASEQ_CHAOS_SECONDS (time after the failover) and LEASEQ_CHAOS_JOBS
(the backlog; the primary dies once a quarter of it has started) make it longer;
LEASEQ_FAILOVER_LAG (how long the standby has received nothing when the primary dies,
0.5 s) and LEASEQ_FAILOVER_DETECT (from the primary's death to the promotion, 0.5 s)
shape the failover. LEASEQ_CHAOS_REPORT appends each report line to a file,
LEASEQ_HISTORY_REPORT the history's figures (scripts/reliability-table).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

import leaseq
from tests.chaos.harness import ROOT, Chaos, Producer, Report, producing
from tests.helpers import new_prefix, wait_for

SECONDS = float(os.environ.get("LEASEQ_CHAOS_SECONDS", "2"))
JOBS = int(os.environ.get("LEASEQ_CHAOS_JOBS", "800"))
SCRIPT = ROOT / "scripts" / "pg-standby"
PORTS = {"sync": (5440, 5441), "async": (5442, 5443), "read-only": (5444, 5445)}
PRODUCERS = 2
# Seconds between the primary's death and the promotion (a failover manager's detection).
DETECT = float(os.environ.get("LEASEQ_FAILOVER_DETECT", "0.5"))
# Seconds the standby has received nothing when the primary dies (replication lag); 0 is
# a standby as current as loopback streaming keeps it.
LAG = float(os.environ.get("LEASEQ_FAILOVER_LAG", "0.5"))


@dataclass
class Pair:
    """A primary and its standby, run by scripts/pg-standby in ``dir``."""

    dir: Path
    mode: str
    url: str
    cut_at: float = 0.0  # time.time() when the standby stopped receiving
    failed_over_at: float = 0.0  # time.time() of the primary's death
    promoted_at: float = 0.0

    def run(self, *args: str) -> None:
        subprocess.run([str(SCRIPT), *args], check=True, timeout=180)

    def fail_over(self, lag: float) -> None:
        self.cut_at = time.time()
        if lag > 0:
            # The standby stops receiving ``lag`` seconds before the primary dies: with
            # asynchronous replication, what the primary committed meanwhile is lost.
            self.run("cut", str(self.dir))
            time.sleep(lag)
        self.failed_over_at = time.time()
        self.run("stop-primary", str(self.dir))
        time.sleep(DETECT)
        self.run("promote", str(self.dir))
        self.promoted_at = time.time()


@contextmanager
def running_pair(mode: str, first: int, second: int) -> Iterator[Pair]:
    """A primary on ``first`` streaming to a standby on ``second``, stopped and removed
    afterwards."""
    if shutil.which("runuser") is None and os.geteuid() == 0:
        pytest.fail("runuser (util-linux) is needed to run PostgreSQL as postgres")
    # pytest's tmp_path is root's alone; the servers run as postgres.
    top = Path(tempfile.mkdtemp(prefix=f"leaseq-pg-{mode}-"))
    if os.geteuid() == 0:
        shutil.chown(top, "postgres", "postgres")
    url = (f"postgresql://postgres@127.0.0.1:{first},127.0.0.1:{second}/test"
           f"?target_session_attrs=read-write&connect_timeout=2")
    found = Pair(top / "pg", mode, url)
    try:
        found.run("start", str(found.dir), str(first), str(second), mode)
        yield found
    finally:
        try:
            found.run("stop", str(found.dir))
        finally:
            shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(params=["sync", "async"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    with running_pair(request.param, *PORTS[request.param]) as found:
        yield found


def test_failover_to_the_promoted_standby(pair: Pair, tmp_path: Path) -> None:
    seed = int(os.environ.get("LEASEQ_CHAOS_SEED", random.randrange(2**32)))
    chaos = Chaos("postgres", tmp_path, seed, base=pair.url)
    producers = [chaos.producer(f"p{i}", pace=0.006) for i in range(PRODUCERS)]
    workers: list[subprocess.Popen[bytes]] = []
    try:
        chaos.enqueue(JOBS, work=0.02, fail=0.0)
        backlog_ids = list(chaos.ids)
        workers = [chaos.spawn() for _ in range(3)]
        with producing(producers):
            # Mid-drain: the workers are busy and most of the backlog is left.
            wait_for(lambda: len(chaos.starts()) >= JOBS // 4, timeout=120, interval=0.1,
                     message="the workers to start draining")
            backlog = chaos.q.stats()["chaos"].available
            pair.fail_over(LAG)
            chaos.count("failover")
            # Producers and workers carry on by themselves against the new primary.
            wait_for(lambda: all(any(at > pair.promoted_at for _, at, _ in p.returned)
                                 for p in producers),
                     timeout=60, message="every producer to enqueue on the new primary")
            wait_for(lambda: any(r["at"] > pair.promoted_at
                                 for runs in chaos.starts().values() for r in runs),
                     timeout=60, interval=0.1,
                     message="the workers to run jobs on the new primary")
            # Each worker's LISTEN connection found the new primary too.
            wait_for(lambda: listeners(pair, chaos.name) >= len(workers), timeout=60,
                     message="the workers' LISTEN connections on the new primary")
            time.sleep(SECONDS)
        dead = [w.pid for w in workers if w.poll() is not None]
        assert not dead, f"workers {dead} exited during the failover"
        chaos.ids += [job_id for p in producers for job_id, _, _ in p.returned]
        chaos.settle()
        # Asynchronous replication may lose what was acknowledged after the cut.
        report = chaos.check(tail_from=pair.cut_at if pair.mode == "async" else None)
        replaced = reissued(chaos, producers, report)
        twice, crossed = reused(backlog_ids, producers, pair.failed_over_at, pair.promoted_at)
        figures = measure(chaos, producers, pair, report)
        figures += (f", returned ids now naming another job {len(replaced)}, ids handed "
                    f"out twice {len(twice)}, ids after the failover not above those "
                    f"before {len(crossed)}")
        line = (f"PG failover ({pair.mode}): {report.line()}; backlog at the failover "
                f"{backlog}; {figures}")
        chaos.publish(report, f"S4 failover, PostgreSQL streaming standby, {pair.mode}", line,
                      note=f"standby cut {LAG:g} s before the primary died"
                      if pair.mode == "async" and LAG > 0 else "")
        assert report.still_live == 0, line  # nothing left waiting on the new primary
        # Job ids never repeat (design §59), asynchronous replication included: the
        # promoted server's new timeline moved the ids past the next epoch.
        assert not twice and not crossed and not replaced, line
        if pair.mode == "sync":
            assert report.ok(), f"{line}\n{report.detail()}"
            assert report.completed + report.dead == report.accepted, line
            assert report.dead == 0, line
        else:
            # Asynchronous: a lost commit can lose a returned enqueue, an ack (the job runs
            # again) or a claim (its lease token is handed out again), so the history
            # finds losses, duplicates and stale completions; they are measured, not
            # asserted. What must hold: every job the new primary has ran to completion
            # there, and no job came from nowhere.
            assert report.completed + report.dead + len(report.lost) == report.accepted, line
            assert report.dead == 0, line
            assert report.history.unexpected == [], line
    finally:
        chaos.close()


def measure(chaos: Chaos, producers: list[Producer], pair: Pair, report: Report) -> str:
    """What the failover cost: returned enqueues missing on the new primary (by whether
    they returned before the primary died), jobs run again, lease tokens handed out twice,
    and how long enqueues and job starts stopped."""
    starts = chaos.starts()
    returned = [item for p in producers for item in p.returned]
    missing = set(report.lost)  # settle() left nothing live: these are not there at all
    late = sum(1 for job_id, at, _ in returned
               if job_id in missing and at > pair.failed_over_at)
    rerun = sum(1 for runs in starts.values() if len(runs) > 1)
    reused = sum(1 for runs in starts.values()
                 if len({r["token"] for r in runs}) < len(runs))
    began = [r["at"] for runs in starts.values() for r in runs]
    return (f"lag {LAG:g} s, returned enqueues {len(returned)} (+{JOBS} backlog), lost tail "
            f"(returned, missing on the new "
            f"primary) {len(missing)} (returned after the primary died: {late}), jobs run "
            f"more than once {rerun}, lease tokens reused {reused}, enqueue failures "
            f"{sum(p.failures for p in producers)}, longest pause of enqueues "
            f"{pause([at for _, at, _ in returned], pair):.2f} s and of job starts "
            f"{pause(began, pair):.2f} s (promoted {pair.promoted_at - pair.failed_over_at:.2f}"
            f" s after the primary died)")


def pause(times: list[float], pair: Pair) -> float:
    """The longest stretch without an event around the failover."""
    around = sorted(at for at in times if at >= pair.failed_over_at - 1.0)
    return max((b - a for a, b in itertools.pairwise(around)), default=float("nan"))


def listeners(pair: Pair, name: str) -> int:
    """Sessions LISTENing on the promoted server for the chaos workers (named ``name``)."""
    import psycopg

    _, second = PORTS[pair.mode]
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{second}/test",
                         autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                           "%s AND query LIKE 'LISTEN%%'", (name,)).fetchone()
    return int(row[0]) if row else 0


def test_a_server_that_refuses_writes_is_unavailable_and_retried() -> None:
    """25006 (read-only) is what a pooled connection meets when its server became a
    standby, and what a single-host URL naming a standby gets: BackendUnavailable that
    says what to do, never a generic BackendError. Nothing was written, so even a plain
    enqueue is retried, on a fresh connection; once a writable primary is back, the
    enqueue returns, once."""
    import psycopg

    with running_pair("async", *PORTS["read-only"]) as found:
        first, second = PORTS["read-only"]
        prefix = new_prefix()
        q = leaseq.connect(found.url, table_prefix=prefix, reclaim_interval=None,
                           connect_timeout=5)
        try:
            q.migrate()
            before = q.enqueue("chaos", {"n": 1})
            standby = leaseq.connect(f"postgresql://postgres@127.0.0.1:{second}/test",
                                     table_prefix=prefix, reclaim_interval=None)
            try:
                wait_for(lambda: replayed(standby), timeout=30,
                         message="the standby to replay the first enqueue")
                with pytest.raises(leaseq.BackendUnavailable,
                                   match="target_session_attrs=read-write"):
                    standby.enqueue("chaos", {"n": "refused"})
            finally:
                standby.close()

            def read_only(on: bool) -> None:
                with psycopg.connect(f"postgresql://postgres@127.0.0.1:{first}/test",
                                     autocommit=True) as conn:
                    conn.execute(f"ALTER SYSTEM SET default_transaction_read_only = "
                                 f"{'on' if on else 'off'}")
                    conn.execute("SELECT pg_reload_conf()")

            # The primary refuses writes (as a provider does on a full disk, or a
            # primary being demoted): the pooled connection meets 25006...
            read_only(True)
            wait_for(lambda: refuses_writes(first), timeout=10,
                     message="the primary to refuse writes")
            writable_at: list[float] = []

            def writable_again() -> None:
                read_only(False)
                writable_at.append(time.monotonic())

            back = threading.Timer(0.5, writable_again)
            back.start()
            try:
                # ...and the enqueue goes through once writes are taken again.
                after = q.enqueue("chaos", {"n": 2})
                returned_at = time.monotonic()
            finally:
                back.join()
            # It was refused first (the reload reached the pooled session), then retried.
            assert writable_at and returned_at > writable_at[0]
            rows = {info.id for info in q.jobs("chaos")}
            assert rows == {before.id, after.id}, rows  # no second row from the retry
        finally:
            q.close()


def refuses_writes(port: int) -> bool:
    import psycopg

    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/test") as conn:
        row = conn.execute("SHOW default_transaction_read_only").fetchone()
    return bool(row and row[0] == "on")


def replayed(q: leaseq.Queue) -> bool:
    try:
        return bool(q.peek("chaos", limit=1))
    except leaseq.SchemaMissing:  # the migration is not replayed yet
        return False


def reissued(chaos: Chaos, producers: list[Producer], report: Report) -> list[int]:
    """Returned ids that now name a different job: the promoted server's id sequence
    starts from what it had received, so after an asynchronous failover it hands out
    again ids whose jobs it never saw."""
    tags: dict[int, str] = {}
    after = 0
    while page := chaos.q.jobs("chaos", after=after, limit=500):
        tags.update((info.id, (info.payload or {}).get("tag", "")) for info in page)
        after = page[-1].id
    lost = set(report.lost)
    return [job_id for p in producers for job_id, _, tag in p.returned
            if job_id not in lost and tags.get(job_id) != tag]


def reused(backlog: list[int], producers: list[Producer], failed_at: float,
           promoted_at: float) -> tuple[list[int], list[int]]:
    """Ids returned for two different jobs (by their tags), and ids returned after the
    promotion that are not above every id returned before the primary died (the backlog
    included): both empty when ids never repeat."""
    tags: dict[int, str] = {}
    twice = []
    for p in producers:
        for job_id, _, tag in p.returned:
            if tags.setdefault(job_id, tag) != tag:
                twice.append(job_id)
    returned = [item for p in producers for item in p.returned]
    before = max([*backlog, *(i for i, at, _ in returned if at < failed_at)], default=0)
    crossed = [i for i, at, _ in returned if at > promoted_at and i <= before]
    return twice, crossed
