"""Prometheus metrics (leaseq.metrics): the queue-state collector on every backend, its
cache and its failures, the worker's recorder in this process, and `leaseq worker
--metrics-port` as a real process scraped over HTTP.

The module also holds the app the worker processes run (`leaseq worker
tests.test_metrics:app`), configured by LEASEQ_TEST_URL and LEASEQ_TEST_PREFIX.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import leaseq
from leaseq.metrics import (
    CONTENT_TYPE,
    QueueCollector,
    WorkerMetrics,
    queue_state_metrics,
    render_queue_state,
)
from tests.conftest import require
from tests.helpers import (
    POSTGRES_URL,
    REDIS_URL,
    drop_tables,
    held_transaction,
    new_prefix,
    oldest_bound,
    running,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent

# -- the app of the worker processes ---------------------------------------------------------

app = leaseq.App(
    os.environ.get("LEASEQ_TEST_URL", "memory://metrics-tests"),
    table_prefix=os.environ.get("LEASEQ_TEST_PREFIX", "leaseq_"),
    backoff=leaseq.Backoff(base=0.05, cap=0.1, jitter=0),
)


@app.task(queue="mq", name="ok")
async def ok(n: int = 0) -> int:
    return n


@app.task(queue="mq", name="flaky", max_attempts=3)
def flaky() -> str:
    ctx = leaseq.current_job()
    assert ctx is not None
    if ctx.job.attempts < 2:
        raise ConnectionError("first attempt fails")
    return "second attempt works"


@app.task(queue="mq", name="doomed", max_attempts=2)
def doomed() -> None:
    raise ValueError("always fails")


# -- helpers -----------------------------------------------------------------------------------

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str | bytes) -> Samples:
    """Every sample of an exposition, keyed by (sample name, sorted labels)."""
    if isinstance(text, bytes):
        text = text.decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def of(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples named ``name``, by their labels."""
    return {labels: v for (n, labels), v in found.items() if n == name}


def scrape(registry: CollectorRegistry) -> Samples:
    return samples(generate_latest(registry))


# -- the queue state ---------------------------------------------------------------------------


def fill(q: leaseq.Queue) -> None:
    """Queue "m": 2 available, 1 scheduled, 1 running, 1 dead; history 1 completed,
    1 cancelled, 1 discarded. "cfg": settings only. "p": paused, 1 available."""
    for _ in range(3):
        q.enqueue("m", {})
    running, dead, done = q.dequeue("m", limit=3, lease=300)
    q.bury(dead, reason="test")
    q.ack(done, "ok")
    q.discard(q.enqueue("m", {}).id, reason="test")
    q.cancel(q.enqueue("m", {}).id)
    q.enqueue("m", {}, delay=3600)
    q.enqueue("m", {})
    q.enqueue("m", {})
    q.configure_queue("cfg", max_jobs=10)
    q.enqueue("p", {})
    q.pause("p")
    assert running.queue == "m"


def test_queue_families_on_every_backend(q: leaseq.Queue) -> None:
    fill(q)
    registry = CollectorRegistry()
    registry.register(QueueCollector(q))
    found = scrape(registry)
    jobs = {(dict(k)["queue"], dict(k)["state"]): v for k, v in of(found, "leaseq_jobs").items()}
    assert jobs == {
        ("m", "available"): 2, ("m", "scheduled"): 1, ("m", "running"): 1, ("m", "dead"): 1,
        ("cfg", "available"): 0, ("cfg", "scheduled"): 0, ("cfg", "running"): 0,
        ("cfg", "dead"): 0,
        ("p", "available"): 1, ("p", "scheduled"): 0, ("p", "running"): 0, ("p", "dead"): 0,
    }
    history = {(dict(k)["queue"], dict(k)["state"]): v
               for k, v in of(found, "leaseq_history_jobs").items()}
    assert history == {
        ("m", "completed"): 1, ("m", "cancelled"): 1, ("m", "discarded"): 1,
        ("cfg", "completed"): 0, ("cfg", "cancelled"): 0, ("cfg", "discarded"): 0,
        ("p", "completed"): 0, ("p", "cancelled"): 0, ("p", "discarded"): 0,
    }
    paused = {dict(k)["queue"]: v for k, v in of(found, "leaseq_queue_paused").items()}
    assert paused == {"m": 0, "cfg": 0, "p": 1}
    age = {dict(k)["queue"]: v
           for k, v in of(found, "leaseq_queue_oldest_available_age_seconds").items()}
    assert set(age) == {"m", "cfg", "p"}
    assert age["cfg"] == 0  # nothing due: 0, not absent
    assert age["m"] >= 0 and age["p"] >= 0
    assert value(found, "leaseq_scrape_error") == 0
    # The server's oldest open transaction: a gauge where the backend has such a thing.
    held = value(found, "leaseq_db_oldest_transaction_age_seconds")
    if q.backend in ("postgres", "mysql"):
        assert held is not None and held >= 0
    else:
        assert held is None


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_the_transaction_age_gauge_shows_a_held_snapshot(q: leaseq.Queue, prefix: str) -> None:
    registry = CollectorRegistry()
    registry.register(QueueCollector(q, cache_seconds=0))
    with held_transaction(q.backend, f"{prefix}jobs"):
        def past_one_and_a_half() -> float | None:
            seen = value(scrape(registry), "leaseq_db_oldest_transaction_age_seconds")
            return seen if seen is not None and seen >= 1.5 else None

        seen = wait_for(past_one_and_a_half, message="the gauge to pass 1.5 s")
        assert seen <= oldest_bound()


def test_a_failed_transaction_age_read_leaves_only_its_gauge_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refused() -> float | None:
        raise leaseq.BackendError("PROCESS privilege required (test)")

    with leaseq.connect("memory://") as q:
        q.enqueue("a", {})
        collector = QueueCollector(q.stats, cache_seconds=0, transactions=refused)
        found = samples(render(collector))
        assert value(found, "leaseq_jobs", queue="a", state="available") == 1
        assert value(found, "leaseq_scrape_error") == 0
        assert value(found, "leaseq_db_oldest_transaction_age_seconds") is None
        assert "PROCESS privilege" in caplog.text
        collector = QueueCollector(q.stats, cache_seconds=0, transactions=lambda: 7.5)
        assert value(samples(render(collector)), "leaseq_db_oldest_transaction_age_seconds") == 7.5


def test_render_queue_state_is_the_text_format_of_a_snapshot() -> None:
    stats = {"a": leaseq.QueueStats("a", available=3, dead=1, completed=7, paused=True,
                                    oldest_available_age=12.5)}
    found = samples(render_queue_state(stats))
    assert value(found, "leaseq_jobs", queue="a", state="available") == 3
    assert value(found, "leaseq_jobs", queue="a", state="dead") == 1
    assert value(found, "leaseq_history_jobs", queue="a", state="completed") == 7
    assert value(found, "leaseq_queue_paused", queue="a") == 1
    assert value(found, "leaseq_queue_oldest_available_age_seconds", queue="a") == 12.5
    assert CONTENT_TYPE.startswith("text/plain")
    assert [f.name for f in queue_state_metrics(stats)] == [
        "leaseq_jobs", "leaseq_history_jobs", "leaseq_queue_paused",
        "leaseq_queue_oldest_available_age_seconds"]
    with_age = samples(render_queue_state(stats, transaction_age=90.0))
    assert value(with_age, "leaseq_db_oldest_transaction_age_seconds") == 90.0
    assert value(found, "leaseq_db_oldest_transaction_age_seconds") is None
    # No queues: the families without samples, and a good read.
    assert samples(render_queue_state({})) == {("leaseq_scrape_error", ()): 0.0}
    assert samples(render_queue_state(None)) == {("leaseq_scrape_error", ()): 1.0}


class CountingSource:
    """A stats source that counts its reads and can be told to fail."""

    def __init__(self, q: leaseq.Queue) -> None:
        self.q = q
        self.reads = 0
        self.fail = False

    def __call__(self) -> Mapping[str, leaseq.QueueStats]:
        self.reads += 1
        if self.fail:
            raise leaseq.BackendUnavailable("the database is down (test)")
        return self.q.stats()


def test_scrapes_within_the_cache_period_share_one_read() -> None:
    with leaseq.connect("memory://") as q:
        q.enqueue("a", {})
        source = CountingSource(q)
        registry = CollectorRegistry()
        registry.register(QueueCollector(source, cache_seconds=3600))
        first, second = scrape(registry), scrape(registry)
        assert source.reads == 1
        assert first == second
        assert value(first, "leaseq_jobs", queue="a", state="available") == 1


def test_a_read_older_than_the_cache_period_is_read_again() -> None:
    with leaseq.connect("memory://") as q:
        source = CountingSource(q)
        collector = QueueCollector(source, cache_seconds=0.05)
        collector.collect()
        q.enqueue("a", {})
        found = wait_for(lambda: (s := samples(render(collector)))
                         and value(s, "leaseq_jobs", queue="a", state="available") == 1 and s,
                         message="a fresh read")
        assert source.reads >= 2
        assert value(found, "leaseq_scrape_error") == 0


def test_the_default_cache_is_one_second() -> None:
    with leaseq.connect("memory://") as q:
        assert QueueCollector(q).cache_seconds == 1.0


def render(collector: QueueCollector) -> bytes:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry)


def test_a_failed_read_reports_scrape_error_and_no_queue_families(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with leaseq.connect("memory://") as q:
        q.enqueue("a", {})
        source = CountingSource(q)
        source.fail = True
        collector = QueueCollector(source, cache_seconds=0)
        found = samples(render(collector))
        assert value(found, "leaseq_scrape_error") == 1
        assert not of(found, "leaseq_jobs")
        assert "the database is down" in caplog.text
        source.fail = False
        found = samples(render(collector))
        assert value(found, "leaseq_scrape_error") == 0
        assert value(found, "leaseq_jobs", queue="a", state="available") == 1


def test_registering_the_collector_reads_nothing() -> None:
    with leaseq.connect("memory://") as q:
        source = CountingSource(q)
        registry = CollectorRegistry(auto_describe=True)
        registry.register(QueueCollector(source))
        WorkerMetrics(registry)
        assert source.reads == 0


def test_import_leaseq_does_not_import_prometheus_client() -> None:
    code = ("import sys, leaseq, leaseq.cli, leaseq.worker, leaseq.bench\n"
            "assert 'prometheus_client' not in sys.modules, 'imported'\n"
            "assert 'leaseq.metrics' not in sys.modules, 'imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)


# -- the worker, in this process ---------------------------------------------------------------


def state(application: leaseq.App, job_id: int, wanted: str) -> bool:
    return application.queue.get(job_id).state == wanted


def test_worker_outcomes_and_histograms_on_every_backend(
    backend: str, q: leaseq.Queue, url: str, prefix: str
) -> None:
    local = leaseq.App(url, table_prefix=prefix, reclaim_interval=None,
                       backoff=leaseq.Backoff(base=0.05, cap=0.1, jitter=0))
    stopped: list[bool] = []

    @local.task(queue="w", name="ok")
    async def ok_task() -> str:
        return "done"

    @local.task(queue="w", name="flaky", max_attempts=3)
    def flaky_task() -> None:
        ctx = leaseq.current_job()
        assert ctx is not None
        if ctx.job.attempts < 2:
            raise ConnectionError("first attempt fails")

    @local.task(queue="w", name="doomed", max_attempts=2)
    def doomed_task() -> None:
        raise ValueError("always fails")

    @local.task(queue="w", name="long", lease=3)  # renewed each second: sees the cancel
    async def long_task() -> None:
        await asyncio.sleep(60)

    @local.task(queue="w", name="endless")
    async def endless_task() -> None:
        await asyncio.sleep(60)

    @local.task(queue="touchy", name="touchy", lease=0.6)  # the second heartbeat is refused
    def touchy_task() -> None:
        ctx = leaseq.current_job()
        assert ctx is not None
        deadline = time.monotonic() + 30
        while not ctx.should_stop and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped.append(ctx.lease_lost)

    q.configure_queue("touchy", max_touches=1)
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    oks = [ok_task.enqueue().id for _ in range(2)]
    fl, dm = flaky_task.enqueue().id, doomed_task.enqueue().id
    unknown = q.enqueue("w", {}, kind="nope").id
    lg = long_task.enqueue().id
    touchy_task.enqueue()
    try:
        with running(local, metrics=metrics, grace=0.2, reclaim_interval=3600,
                     unknown_task_grace=0):  # buried on sight: counted dead at once
            for job in oks:
                wait_for(lambda job=job: state(local, job, "completed"), message="ok")
            wait_for(lambda: state(local, fl, "completed"), message="flaky completed")
            wait_for(lambda: state(local, dm, "dead"), message="doomed dead")
            wait_for(lambda: state(local, unknown, "dead"), message="unknown task dead")
            wait_for(lambda: state(local, lg, "running"), message="long running")
            q.cancel(lg)
            wait_for(lambda: state(local, lg, "cancelled"), timeout=30,
                     message="long cancelled")
            wait_for(lambda: stopped, timeout=30, message="touchy told its lease is lost")
            # The cancelled job leaves the worker's count when its handler has stopped,
            # a moment after the row says cancelled.
            held = wait_for(lambda: (s := scrape(registry)) and value(
                s, "leaseq_worker_inflight", queue="w") == 0 and s,
                timeout=30, message="nothing of queue w in flight")
            endless = endless_task.enqueue().id
            wait_for(lambda: state(local, endless, "running"), message="endless running")
            wait_for(lambda: value(scrape(registry), "leaseq_worker_inflight", queue="w") == 1,
                     message="endless counted in flight")
        # Counts are written before the outcome's state is visible, except the lease-lost
        # one, counted once the handler returns: wait for it (with a deadline).
        found = wait_for(lambda: (s := scrape(registry)) and value(
            s, "leaseq_jobs_processed_total", queue="touchy", task="touchy",
            outcome="lease_lost") == 1 and s, message="the lost lease counted")
    finally:
        local.close()
    assert stopped == [True]
    assert value(held, "leaseq_worker_inflight", queue="w") == 0
    processed = {tuple(v for _, v in k): n
                 for k, n in of(found, "leaseq_jobs_processed_total").items() if n}
    # Labels sorted by name: outcome, queue, task.
    assert processed == {
        ("completed", "w", "ok"): 2,
        ("retried", "w", "flaky"): 1, ("completed", "w", "flaky"): 1,
        ("retried", "w", "doomed"): 1, ("dead", "w", "doomed"): 1,
        ("dead", "w", "nope"): 1,
        ("cancelled", "w", "long"): 1,
        ("lease_lost", "touchy", "touchy"): 1,
        ("released", "w", "endless"): 1,
    }
    durations = {tuple(v for _, v in k): n
                 for k, n in of(found, "leaseq_job_duration_seconds_count").items() if n}
    assert durations == {("w", "ok"): 2, ("w", "flaky"): 2, ("w", "doomed"): 2,
                         ("w", "long"): 1, ("w", "endless"): 1, ("touchy", "touchy"): 1}
    # First attempts only: every job once.
    assert value(found, "leaseq_job_wait_seconds_count", queue="w") == 7
    assert value(found, "leaseq_job_wait_seconds_count", queue="touchy") == 1
    assert value(found, "leaseq_job_wait_seconds_bucket", queue="w", le="+Inf") == 7
    # Attempts that completed or failed: 2 + 2 + 2 + 1.
    assert value(found, "leaseq_job_attempts_count", queue="w") == 7
    assert value(found, "leaseq_job_attempts_sum", queue="w") == 2 + (1 + 2) + (1 + 2) + 1
    assert value(found, "leaseq_job_attempts_bucket", queue="w", le="1.0") == 5
    assert value(found, "leaseq_job_attempts_count", queue="touchy") == 0
    assert (value(found, "leaseq_dequeue_seconds_count", backend=backend) or 0) >= 1
    assert (value(found, "leaseq_ack_seconds_count", backend=backend) or 0) >= 1
    assert value(found, "leaseq_worker_inflight", queue="w") == 0
    assert value(found, "leaseq_worker_inflight", queue="touchy") == 0


def test_worker_metrics_serve_their_registry_over_http() -> None:
    metrics = WorkerMetrics()
    with leaseq.connect("memory://") as q:
        q.enqueue("a", {})
        metrics.watch(q)
        port = metrics.serve(0)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                found = samples(r.read())
            assert value(found, "leaseq_jobs", queue="a", state="available") == 1
            assert value(found, "leaseq_scrape_error") == 0
            with pytest.raises(leaseq.ConfigurationError, match="cannot serve metrics"):
                metrics.serve(port)  # taken
        finally:
            metrics.close()


# -- `leaseq worker --metrics-port`, a real process ----------------------------------------------


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def process_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend: str = request.param
    require(backend)
    return {"sqlite": f"sqlite:///{tmp_path}/m.db", "postgres": POSTGRES_URL,
            "redis": REDIS_URL}[backend]


def get_metrics(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return samples(r.read())
    except OSError:
        return None


def test_a_worker_process_serves_its_metrics(process_url: str, tmp_path: Path) -> None:
    backend = process_url.split(":", 1)[0].replace("postgresql", "postgres")
    prefix = new_prefix()
    q = leaseq.connect(process_url, table_prefix=prefix)
    q.migrate()
    log = tmp_path / "worker.log"
    env = {**os.environ, "LEASEQ_TEST_URL": process_url, "LEASEQ_TEST_PREFIX": prefix,
           "PYTHONPATH": str(ROOT)}
    env.pop("LEASEQ_METRICS_PORT", None)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leaseq.cli", "worker", "tests.test_metrics:app",
             "--poll-interval", "0.1", "--log-level", "INFO", "--metrics-port", "0",
             "--unknown-task-grace", "0"],  # "nope" is buried on sight: one dead
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        port = int(wait_for(lambda: re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics",
                                              log.read_text()), timeout=30,
                            message=f"the metrics address in the log:\n{log}")[1])
        for n in range(3):
            q.enqueue("mq", {"n": n}, kind="ok")
        for _ in range(2):
            q.enqueue("mq", {}, kind="flaky")
            # Enqueued by name, not through the task: its max_attempts is given here.
            q.enqueue("mq", {}, kind="doomed", max_attempts=2)
        q.enqueue("mq", {}, kind="nope")
        want = {("completed", "mq", "ok"): 3,
                ("retried", "mq", "flaky"): 2, ("completed", "mq", "flaky"): 2,
                ("retried", "mq", "doomed"): 2, ("dead", "mq", "doomed"): 2,
                ("dead", "mq", "nope"): 1}

        def processed() -> Samples | None:
            found = get_metrics(port)
            if found is None:
                return None
            counts = {tuple(v for _, v in k): n
                      for k, n in of(found, "leaseq_jobs_processed_total").items() if n}
            return found if counts == want else None

        found = wait_for(processed, timeout=60, interval=0.1,
                         message=f"the processed counts; worker log:\n{log.read_text()}")
        assert value(found, "leaseq_job_duration_seconds_count", queue="mq", task="ok") == 3
        assert value(found, "leaseq_job_duration_seconds_count", queue="mq", task="flaky") == 4
        assert value(found, "leaseq_job_duration_seconds_count", queue="mq", task="doomed") == 4
        assert value(found, "leaseq_job_wait_seconds_count", queue="mq") == 8
        assert value(found, "leaseq_job_attempts_count", queue="mq") == 3 + 4 + 4 + 1
        assert (value(found, "leaseq_dequeue_seconds_count", backend=backend) or 0) >= 1
        assert (value(found, "leaseq_ack_seconds_count", backend=backend) or 0) >= 1
        assert value(found, "leaseq_worker_inflight", queue="mq") == 0
        # The queue state of the worker's database, from the same endpoint.
        assert value(found, "leaseq_scrape_error") == 0
        state_now = wait_for(lambda: (s := get_metrics(port)) and value(
            s, "leaseq_history_jobs", queue="mq", state="completed") == 5 and s,
            message="the history count (stats cached for 1 s)")
        assert value(state_now, "leaseq_jobs", queue="mq", state="dead") == 3
        assert value(state_now, "leaseq_queue_paused", queue="mq") == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        q.close()
        drop_tables(backend, prefix)


def test_a_worker_without_metrics_port_serves_nothing_and_imports_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/n.db"
    code = (
        "import sys, leaseq\n"
        f"app = leaseq.App({url!r})\n"
        "@app.task(queue='mq', name='ok')\n"
        "async def ok() -> None: ...\n"
        "app.migrate()\n"
        "app.queue.enqueue('mq', {}, kind='ok')\n"
        "assert leaseq.Worker(app, burst=True, poll_interval=0.05).run() == 0\n"
        "assert app.queue.stats()['mq'].completed == 1\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)


def test_a_metrics_port_in_use_stops_the_worker_with_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "LEASEQ_TEST_URL": f"sqlite:///{tmp_path}/t.db",
               "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-m", "leaseq.cli", "worker", "tests.test_metrics:app",
             "--metrics-port", str(port)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert f"ConfigurationError: cannot serve metrics on 127.0.0.1:{port}" in out.stderr
