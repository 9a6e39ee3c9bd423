"""PostgreSQL failover (issue 22 item 4): a primary with a streaming standby of its own
(scripts/pg-standby), producers and real ``leaseq worker`` processes on the libpq
multi-host URL with ``target_session_attrs=read-write``; mid-drain the primary dies
(``pg_ctl stop -m immediate``) and the standby is promoted. Nobody is restarted: producers
and workers must find the new primary by themselves.

With synchronous replication nothing that returned is lost: every enqueue that returned
runs to completion, exactly once per the chaos checker (harness.py). With asynchronous
replication the commits the standby had not received are gone; the test measures them
(the lost tail: returned enqueues missing, acks lost and so jobs re-run, claims lost and so
a lease token reused) and asserts only what must hold even then, which includes that no
job id is handed out twice (design §59): every id returned after the promotion is above
every id returned before the primary died, and none names two jobs.

Short by default; LEASEQ_CHAOS_SECONDS (time after the failover) and LEASEQ_CHAOS_JOBS
(the backlog; the primary dies once a quarter of it has started) make it longer;
LEASEQ_FAILOVER_LAG (how long the standby has received nothing when the primary dies,
0.5 s) and LEASEQ_FAILOVER_DETECT (from the primary's death to the promotion, 0.5 s)
shape the failover. LEASEQ_CHAOS_REPORT appends each report
line to a file.
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import leaseq
from tests.chaos.harness import ROOT, Chaos, Report
from tests.helpers import new_prefix, wait_for

SECONDS = float(os.environ.get("LEASEQ_CHAOS_SECONDS", "2"))
JOBS = int(os.environ.get("LEASEQ_CHAOS_JOBS", "800"))
REPORT = os.environ.get("LEASEQ_CHAOS_REPORT")
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
    failed_over_at: float = 0.0  # time.time() of the primary's death
    promoted_at: float = 0.0

    def run(self, *args: str) -> None:
        subprocess.run([str(SCRIPT), *args], check=True, timeout=180)

    def fail_over(self, lag: float) -> None:
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


@dataclass
class Producer:
    """Enqueues probe jobs one by one until told to stop, retrying through the failover;
    an id counts once its ``enqueue`` returned."""

    url: str
    prefix: str
    name: str
    returned: list[tuple[int, float, str]] = field(default_factory=list)  # id, time, tag
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __call__(self) -> None:
        q = leaseq.connect(self.url, table_prefix=self.prefix, reclaim_interval=None)
        try:
            while not self.stop.is_set():
                tag = f"{self.name}/{len(self.returned) + self.failures}"
                try:
                    job = q.enqueue("chaos", {"work": 0.02, "fail": 0.0, "tag": tag},
                                    kind="probe")
                except leaseq.BackendUnavailable:
                    # Unknown whether it committed: it did not return, so it is not counted.
                    self.failures += 1
                    time.sleep(0.05)
                    continue
                self.returned.append((job.id, time.time(), tag))
                time.sleep(random.uniform(0.002, 0.01))
        finally:
            q.close()


def test_failover_to_the_promoted_standby(pair: Pair, tmp_path: Path) -> None:
    seed = int(os.environ.get("LEASEQ_CHAOS_SEED", random.randrange(2**32)))
    chaos = Chaos("postgres", tmp_path, seed, base=pair.url)
    producers = [Producer(chaos.url, chaos.prefix, f"p{i}") for i in range(PRODUCERS)]
    threads = [threading.Thread(target=p, name=f"producer-{i}") for i, p in enumerate(producers)]
    try:
        chaos.enqueue(JOBS, work=0.02, fail=0.0)
        backlog_ids = list(chaos.ids)
        workers = [chaos.spawn() for _ in range(3)]
        for thread in threads:
            thread.start()
        # Mid-drain: the workers are busy and most of the backlog is left.
        wait_for(lambda: len(chaos.starts()) >= JOBS // 4, timeout=120,
                 message="the workers to start draining")
        backlog = chaos.q.stats()["chaos"].available
        pair.fail_over(LAG)
        # Producers and workers carry on by themselves against the new primary.
        wait_for(lambda: all(any(at > pair.promoted_at for _, at, _ in p.returned)
                             for p in producers),
                 timeout=60, message="every producer to enqueue on the new primary")
        wait_for(lambda: any(r["at"] > pair.promoted_at
                             for runs in chaos.starts().values() for r in runs),
                 timeout=60, message="the workers to run jobs on the new primary")
        # Each worker's LISTEN connection found the new primary too.
        wait_for(lambda: listeners(pair) >= len(workers), timeout=60,
                 message="the workers' LISTEN connections on the new primary")
        time.sleep(SECONDS)
    finally:
        for p in producers:
            p.stop.set()
        for thread in threads:
            thread.join(60)
    try:
        dead = [w.pid for w in workers if w.poll() is not None]
        assert not dead, f"workers {dead} exited during the failover"
        chaos.ids += [job_id for p in producers for job_id, _, _ in p.returned]
        chaos.settle()
        report = chaos.check()
        replaced = reissued(chaos, producers, report)
        twice, crossed = reused(backlog_ids, producers, pair.failed_over_at, pair.promoted_at)
        figures = measure(chaos, producers, pair, report)
        figures += (f", returned ids now naming another job {len(replaced)}, ids handed "
                    f"out twice {len(twice)}, ids after the failover not above those "
                    f"before {len(crossed)}")
        line = (f"PG failover ({pair.mode}): {report.line()}; backlog at the failover "
                f"{backlog}; {figures}")
        print(line)
        if REPORT:
            with open(REPORT, "a") as out:
                out.write(line + "\n")
        assert report.still_live == 0, line  # nothing left waiting on the new primary
        # Job ids never repeat (design §59), asynchronous replication included: the
        # promoted server's new timeline moved the ids past the next epoch.
        assert not twice and not crossed and not replaced, line
        if pair.mode == "sync":
            assert report.ok(), (f"{line}\nlost={report.lost[:20]} "
                                 f"unexplained={report.unexplained[:20]} "
                                 f"stale={report.stale_accepted[:20]}")
            assert report.completed + report.dead == report.accepted, line
            assert report.dead == 0, line
        else:
            # Asynchronous: a lost commit can lose a returned enqueue, an ack (the job runs
            # again) or a claim (its lease token is handed out again), and the checker's
            # lease rules cannot hold across those. What must: every job the new primary
            # has ran to completion there, once per lease of its own history.
            assert report.completed + report.dead + len(report.lost) == report.accepted, line
            assert report.dead == 0, line
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


def listeners(pair: Pair) -> int:
    """Sessions LISTENing on the promoted server for the chaos workers."""
    import psycopg

    _, second = PORTS[pair.mode]
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{second}/test",
                         autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                           "'leaseq_chaos' AND query LIKE 'LISTEN%%'").fetchone()
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
