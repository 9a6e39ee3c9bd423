"""Prometheus metrics: the queues' state, read from the database when scraped, and what a
worker does (jobs processed by outcome, run and wait times, claim and ack latency).

Needs the ``metrics`` extra (``pip install 'leaseq[metrics]'``, i.e. prometheus-client).
``import leaseq`` never imports this module, and a worker imports it only when metrics are
on. Every metric is described in docs/operations.md.

* ``QueueCollector(source)``: the ``leaseq_jobs``, ``leaseq_history_jobs``,
  ``leaseq_queue_paused`` and ``leaseq_queue_oldest_available_age_seconds`` gauges from one
  ``Queue.stats()`` call per scrape, kept for ``cache_seconds``, plus
  ``leaseq_scrape_error``, and ``leaseq_db_oldest_transaction_age_seconds`` (PostgreSQL
  and MariaDB/MySQL: ``Queue.oldest_transaction_age()``, read with it). Register it in a
  registry of your own: ``registry.register(QueueCollector(leaseq.connect(url)))``.
* ``queue_state_metrics(stats)`` / ``render_queue_state(stats)``: the same families for a
  snapshot you already read, as metric objects or as the text exposition format
  (``CONTENT_TYPE``).
* ``WorkerMetrics``: the worker side. ``leaseq worker --metrics-port 9464`` makes one and
  serves it; from Python, ``Worker(app, metrics=WorkerMetrics())`` records into it and
  ``WorkerMetrics.serve(port)`` serves its registry.
* ``GroupMetrics``: one endpoint for the worker processes of ``leaseq worker --processes
  N``: each child serves its ``WorkerMetrics`` on a loopback port, and a scrape of the
  group reads them all and sums them (``merge_expositions``), with the queue state once.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from leaseq._client import Queue
from leaseq._core.job import Job, QueueStats
from leaseq.errors import ConfigurationError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

try:
    import prometheus_client
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import Collector, CollectorRegistry
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in tests
    raise ConfigurationError(
        f"leaseq.metrics needs prometheus-client: pip install 'leaseq[metrics]' ({exc})"
    ) from exc

__all__ = [
    "ACK_BUCKETS",
    "ATTEMPT_BUCKETS",
    "CONTENT_TYPE",
    "DEQUEUE_BUCKETS",
    "DURATION_BUCKETS",
    "OUTCOMES",
    "WAIT_BUCKETS",
    "GroupMetrics",
    "QueueCollector",
    "WorkerMetrics",
    "WorkerRecorder",
    "merge_expositions",
    "queue_state_metrics",
    "render_queue_state",
]

log = logging.getLogger("leaseq.metrics")

CONTENT_TYPE: str = prometheus_client.CONTENT_TYPE_LATEST
"""The Content-Type of ``render_queue_state``'s bytes (Prometheus text format 0.0.4)."""

LIVE = ("available", "scheduled", "running", "dead")
HISTORY = ("completed", "cancelled", "discarded")

OUTCOMES = ("completed", "retried", "snoozed", "dead", "released", "lease_lost", "cancelled")
"""The values of ``leaseq_jobs_processed_total``'s ``outcome`` label."""

# Buckets (upper bounds, seconds). Handlers run from a millisecond to minutes; a job can
# wait for hours behind a backlog; one claim or ack write takes from a tenth of a
# millisecond (SQLite, Redis) to seconds (a database under strain).
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
DEQUEUE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0)
ACK_BUCKETS = DEQUEUE_BUCKETS
ATTEMPT_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 25.0, 50.0, 100.0)


# -- queue state, read at scrape time --------------------------------------------------------


def queue_state_metrics(stats: Mapping[str, QueueStats]) -> list[Metric]:
    """The queue-state families for one ``Queue.stats()`` snapshot: ``leaseq_jobs``
    (live states), ``leaseq_history_jobs``, ``leaseq_queue_paused`` and
    ``leaseq_queue_oldest_available_age_seconds``, with a sample (zero included) for every
    queue of the snapshot. The age is 0 when no job of the queue is due."""
    jobs = GaugeMetricFamily("leaseq_jobs", "Live jobs per queue and state.",
                             labels=["queue", "state"])
    history = GaugeMetricFamily("leaseq_history_jobs",
                                "Jobs kept in history per queue and final state.",
                                labels=["queue", "state"])
    paused = GaugeMetricFamily("leaseq_queue_paused", "1 while the queue is paused, else 0.",
                               labels=["queue"])
    age = GaugeMetricFamily("leaseq_queue_oldest_available_age_seconds",
                            "Seconds the oldest due (available) job has waited; 0 when none "
                            "is due.", labels=["queue"])
    for name in sorted(stats):
        s = stats[name]
        for state in LIVE:
            jobs.add_metric([name, state], getattr(s, state))
        for state in HISTORY:
            history.add_metric([name, state], getattr(s, state))
        paused.add_metric([name], 1.0 if s.paused else 0.0)
        age.add_metric([name], s.oldest_available_age or 0.0)
    return [jobs, history, paused, age]


def render_queue_state(stats: Mapping[str, QueueStats] | None, *,
                       transaction_age: float | None = None) -> bytes:
    """``queue_state_metrics(stats)`` and ``leaseq_scrape_error`` in the Prometheus text
    exposition format (serve it with ``Content-Type: CONTENT_TYPE``), with
    ``leaseq_db_oldest_transaction_age_seconds`` when ``transaction_age`` is given. Pass
    None when the read failed: only ``leaseq_scrape_error 1`` is rendered, as
    ``QueueCollector`` does."""
    families = [] if stats is None else queue_state_metrics(stats)
    if stats is not None and transaction_age is not None:
        families.append(transaction_age_metric(transaction_age))
    return prometheus_client.generate_latest(_Fixed([*families, _scrape_error(stats is None)]))


def transaction_age_metric(age: float) -> Metric:
    """``leaseq_db_oldest_transaction_age_seconds``: how long the oldest transaction open
    on the database server has been open (``Queue.oldest_transaction_age``)."""
    return GaugeMetricFamily(
        "leaseq_db_oldest_transaction_age_seconds",
        "Seconds the oldest transaction open on the database server has been open; one "
        "held for minutes stops vacuum (PostgreSQL) or the purge (MariaDB) and slows claims.",
        value=age)


def _scrape_error(failed: bool) -> Metric:
    return GaugeMetricFamily("leaseq_scrape_error",
                             "1 when the last read of the queue stats failed, else 0.",
                             value=1.0 if failed else 0.0)


class _Fixed(Collector):
    """A collector of metric families computed beforehand."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


StatsSource = Callable[[], Mapping[str, QueueStats]]
AgeSource = Callable[[], "float | None"]


class QueueCollector(Collector):
    """The queue-state families, read with one ``stats()`` call per scrape.

    Args:
        source: A ``leaseq.Queue`` (its ``stats()`` is called) or any callable returning
            the same mapping.
        cache_seconds: A scrape within this many seconds of the last read reuses its
            snapshot (or its failure), so several Prometheus servers or dashboards
            scraping at once cost one query.
        transactions: Returns the age of the server's oldest open transaction, or None
            where there is no such thing; by default ``source.oldest_transaction_age``
            when ``source`` is a ``Queue``. Its gauge is left out when it returns None
            or fails (a MariaDB user without the PROCESS privilege; logged once).

    When the read fails, the scrape still answers: the queue families are left out (stale
    or guessed counts would mislead), ``leaseq_scrape_error`` is 1 and a warning is
    logged. ``leaseq_scrape_error`` is 0 after a good read.
    """

    def __init__(self, source: Queue | StatsSource, *, cache_seconds: float = 1.0,
                 transactions: AgeSource | None = None) -> None:
        self._read: StatsSource = source.stats if isinstance(source, Queue) else source
        if transactions is None and isinstance(source, Queue):
            transactions = source.oldest_transaction_age
        self._age_of: AgeSource | None = transactions
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()  # the HTTP server scrapes from a thread per request
        self._at = float("-inf")
        self._snapshot: Mapping[str, QueueStats] | None = None
        self._age: float | None = None
        self._age_failed = False

    def snapshot(self) -> Mapping[str, QueueStats] | None:
        """The stats of the last read, reading again when it is older than
        ``cache_seconds``; None when that read failed."""
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self.cache_seconds:
                try:
                    self._snapshot = self._read()
                except Exception as exc:  # a scrape must never take its process down
                    log.warning("leaseq metrics: reading queue stats failed: %s", exc)
                    self._snapshot = None
                self._age = self._read_age() if self._snapshot is not None else None
                # Stamped after the read: a slow read is not repeated by the next scrape.
                self._at = time.monotonic()
            return self._snapshot

    def _read_age(self) -> float | None:
        if self._age_of is None:
            return None
        try:
            return self._age_of()
        except Exception as exc:  # no PROCESS privilege: the queue families still count
            if not self._age_failed:
                log.warning("leaseq metrics: reading the oldest transaction's age failed "
                            "(leaving its gauge out): %s", exc)
            self._age_failed = True
            return None

    def collect(self) -> Iterable[Metric]:
        """The queue families, the transaction age (where there is one) and
        ``leaseq_scrape_error``."""
        stats = self.snapshot()
        families = [] if stats is None else queue_state_metrics(stats)
        if self._age is not None:
            families.append(transaction_age_metric(self._age))
        return [*families, _scrape_error(stats is None)]

    def describe(self) -> Iterable[Metric]:
        """The family names, without reading the database (for registration)."""
        return [*queue_state_metrics({}),
                *([transaction_age_metric(0.0)] if self._age_of is not None else []),
                GaugeMetricFamily("leaseq_scrape_error", "", value=0.0)]


# -- worker side -----------------------------------------------------------------------------


class _Histogram:
    """Bucket counts and a sum, written by one thread (the worker's event loop) without a
    lock: an observation is a bisect and two additions. Scrapes read it from another
    thread; a read may miss the observation being made, never corrupt one."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bucket (le: less or equal).
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


class _Series:
    """Everything one (queue, task) pair writes, so a job costs one dict lookup."""

    __slots__ = ("attempts", "duration", "outcomes", "wait")

    def __init__(self, wait: _Histogram, attempts: _Histogram) -> None:
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.duration = _Histogram(DURATION_BUCKETS)
        self.wait = wait  # per queue: shared by the queue's tasks
        self.attempts = attempts


class WorkerRecorder:
    """What one worker run records; made by ``WorkerMetrics.recorder``. Its methods are
    called from the worker's event loop only."""

    def __init__(self, backend: str, queues: Sequence[str],
                 inflight: Callable[[], Iterable[str]]) -> None:
        self.backend = backend
        self.queues = tuple(queues)
        self.inflight = inflight
        self.dequeue = _Histogram(DEQUEUE_BUCKETS)
        self.ack = _Histogram(ACK_BUCKETS)
        self.series: dict[tuple[str, str], _Series] = {}
        self.per_queue: dict[str, tuple[_Histogram, _Histogram]] = {}

    def _series(self, job: Job) -> _Series:
        key = (job.queue, job.kind or "")
        series = self.series.get(key)
        if series is None:
            queue = self.per_queue.get(job.queue)
            if queue is None:
                queue = self.per_queue[job.queue] = (_Histogram(WAIT_BUCKETS),
                                                     _Histogram(ATTEMPT_BUCKETS))
            series = self.series[key] = _Series(*queue)
        return series

    def dequeued(self, seconds: float) -> None:
        """One claim call took ``seconds`` (whether or not it found jobs)."""
        self.dequeue.observe(seconds)

    def acked(self, seconds: float) -> None:
        """One batched ack write took ``seconds``."""
        self.ack.observe(seconds)

    def started(self, job: Job) -> None:
        """``job`` was claimed. A first attempt's wait is its lease start minus its
        ``created_at``, both on the database clock; later attempts are not observed (the
        worker does not know when a retry came due)."""
        if job.attempts == 1:
            waited = (job.lease_until - job.created_at).total_seconds() - job.lease
            self._series(job).wait.observe(waited if waited > 0.0 else 0.0)

    def ran(self, job: Job, seconds: float) -> None:
        """``job``'s handler ran for ``seconds``, however it ended."""
        self._series(job).duration.observe(seconds)

    def finished(self, job: Job, outcome: str) -> None:
        """``job``'s attempt ended as ``outcome`` (one of ``OUTCOMES``)."""
        series = self._series(job)
        series.outcomes[outcome] += 1
        if outcome in ("completed", "retried", "dead"):
            series.attempts.observe(job.attempts)


class _Served(Collector):
    """A collector registered in a registry of its own (or the one given), which it can
    serve over HTTP and extend with the queue-state families."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._servers: list[WSGIServer] = []

    def watch(self, source: Queue | StatsSource, *, cache_seconds: float = 1.0,
              transactions: AgeSource | None = None) -> QueueCollector:
        """Registers a ``QueueCollector`` on ``source`` in this registry too."""
        collector = QueueCollector(source, cache_seconds=cache_seconds,
                                   transactions=transactions)
        self.registry.register(collector)
        return collector

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serves ``/metrics`` of this registry from a daemon thread; returns the port
        (the one picked when ``port`` is 0). Raises ``ConfigurationError`` when the
        address cannot be bound."""
        return _serve(self.registry, port, host, self._servers)

    def close(self) -> None:
        """Stops the servers ``serve`` started (the metrics stay registered)."""
        _close(self._servers)


class WorkerMetrics(_Served):
    """The worker-side metrics, a prometheus collector registered in ``registry``.

    Args:
        registry: Where to register; defaults to a new ``CollectorRegistry`` of its own
            (``self.registry``). Pass ``prometheus_client.REGISTRY`` to add the metrics
            to the process-wide default registry instead.

    Hand it to ``Worker(app, metrics=...)`` (one ``WorkerMetrics`` may serve several
    workers of a process: each run records apart and scrapes sum them), then serve it with
    ``serve(port)`` or your own exposition. ``watch(queue)`` adds the queue-state families.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self._recorders: list[WorkerRecorder] = []
        self._lock = threading.Lock()
        self.registry.register(self)

    def recorder(self, backend: str, queues: Sequence[str],
                 inflight: Callable[[], Iterable[str]]) -> WorkerRecorder:
        """A recorder for one worker run on ``backend`` working ``queues``;
        ``inflight()`` lists the queue of every job the worker holds (read at scrape
        time, from the scraping thread)."""
        recorder = WorkerRecorder(backend, queues, inflight)
        with self._lock:
            self._recorders.append(recorder)
        return recorder

    def describe(self) -> Iterable[Metric]:
        """The family names (for registration)."""
        return list(self._families([]))

    def collect(self) -> Iterable[Metric]:
        """The worker families, summed over every recorder."""
        with self._lock:
            recorders = list(self._recorders)
        return list(self._families(recorders))

    @staticmethod
    def _families(recorders: list[WorkerRecorder]) -> Iterator[Metric]:
        processed = CounterMetricFamily(
            "leaseq_jobs_processed", "Job attempts this worker ended, by outcome.",
            labels=["queue", "task", "outcome"])
        duration = _HistogramSum("leaseq_job_duration_seconds",
                                 "Handler run time, however the attempt ended.",
                                 ["queue", "task"], DURATION_BUCKETS)
        wait = _HistogramSum("leaseq_job_wait_seconds",
                             "First attempts: seconds from enqueue to lease start "
                             "(database clock).", ["queue"], WAIT_BUCKETS)
        attempts = _HistogramSum("leaseq_job_attempts",
                                 "Attempt number of attempts that completed or failed.",
                                 ["queue"], ATTEMPT_BUCKETS)
        dequeue = _HistogramSum("leaseq_dequeue_seconds", "Seconds per claim call.",
                                ["backend"], DEQUEUE_BUCKETS)
        ack = _HistogramSum("leaseq_ack_seconds", "Seconds per batched ack write.",
                            ["backend"], ACK_BUCKETS)
        counts: dict[tuple[str, str, str], int] = {}
        held: dict[str, int] = {}
        for r in recorders:
            for (queue, task), series in list(r.series.items()):
                for outcome, n in series.outcomes.items():
                    key = (queue, task, outcome)
                    counts[key] = counts.get(key, 0) + n
                duration.add((queue, task), series.duration)
            for queue, (waited, tries) in list(r.per_queue.items()):
                wait.add((queue,), waited)
                attempts.add((queue,), tries)
            dequeue.add((r.backend,), r.dequeue)
            ack.add((r.backend,), r.ack)
            for queue in r.queues:
                held.setdefault(queue, 0)
            for queue in r.inflight():
                held[queue] = held.get(queue, 0) + 1
        for key in sorted(counts):
            processed.add_metric(list(key), counts[key])
        inflight = GaugeMetricFamily("leaseq_worker_inflight",
                                     "Jobs this worker holds: running or awaiting their ack.",
                                     labels=["queue"])
        for queue in sorted(held):
            inflight.add_metric([queue], held[queue])
        yield processed
        yield from (h.family() for h in (duration, wait, dequeue, ack, attempts))
        yield inflight


def _serve(registry: CollectorRegistry, port: int, host: str, servers: list[WSGIServer], *,
           level: int = logging.INFO) -> int:
    try:
        server, _ = prometheus_client.start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    servers.append(server)
    bound: int = server.server_port
    log.log(level, "metrics at http://%s:%d/metrics", host, bound)
    return bound


def _close(servers: list[WSGIServer]) -> None:
    while servers:
        server = servers.pop()
        server.shutdown()
        server.server_close()


class _HistogramSum:
    """One histogram family: the sum, per label set, of recorders' ``_Histogram``s."""

    def __init__(self, name: str, doc: str, labels: list[str],
                 bounds: Sequence[float]) -> None:
        self.name, self.doc, self.labels, self.bounds = name, doc, labels, bounds
        self.series: dict[tuple[str, ...], tuple[list[int], float]] = {}

    def add(self, labels: tuple[str, ...], h: _Histogram) -> None:
        counts, total = list(h.counts), h.total  # a copy: the loop keeps writing
        if labels in self.series:
            before, before_total = self.series[labels]
            counts = [a + b for a, b in zip(before, counts, strict=True)]
            total += before_total
        self.series[labels] = (counts, total)

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for labels in sorted(self.series):
            counts, total = self.series[labels]
            buckets: list[tuple[str, float]] = []
            running = 0
            for bound, n in zip([*self.bounds, float("inf")], counts, strict=True):
                running += n
                buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)),
                                running))
            # _count is the +Inf bucket, so the two always agree.
            family.add_metric(list(labels), buckets, total)
        return family


# -- a group of worker processes -------------------------------------------------------------


def merge_expositions(texts: Iterable[str]) -> list[Metric]:
    """Sums several processes' metrics (Prometheus text exposition format) into one set of
    families: samples with the same name and labels are added, whatever the type, which is
    right for counters, for histograms (bucket counts, ``_count`` and ``_sum`` add up) and
    for gauges that count something held (``leaseq_worker_inflight``). A family or a label
    set that only some texts have is kept as it is. Families come out in the order first
    seen, their samples too."""
    families: dict[str, Metric] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    labels: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                sums[family.name] = {}
            values = sums[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                values[key] = values.get(key, 0.0) + sample.value
                labels.setdefault(key, dict(sample.labels))
    for name, family in families.items():
        for key, value in sums[name].items():
            family.add_sample(key[0], labels[key], value)
    return list(families.values())


class GroupMetrics(_Served):
    """One ``/metrics`` for a group of worker processes (``leaseq worker --processes N``).

    Each worker process records into a ``WorkerMetrics`` of its own and serves it on a
    loopback port it reports to the supervisor, which calls ``add(key, port)`` (and
    ``discard(key)`` when the process ends). A scrape of this collector reads every
    process's endpoint and sums them (``merge_expositions``); a process that does not
    answer within ``timeout`` seconds (it is starting or just died) is left out of that
    scrape. ``watch(source)`` adds the queue-state families, read once per scrape in this
    process rather than once per worker. Two gauges describe the group itself:
    ``leaseq_worker_processes`` (worker processes running) and
    ``leaseq_worker_restarts_total`` (worker processes started again after one ended
    unasked); the supervisor sets ``processes`` and ``restarts``.

    A process that restarts starts counting from zero, so the group's counters fall by what
    it had counted: Prometheus' ``rate()`` and ``increase()`` treat that as a counter
    reset, as they would for a restarted single-process worker.

    Args:
        registry: Where to register; defaults to a new ``CollectorRegistry`` of its own.
        timeout: Seconds to wait for each worker process's answer.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 timeout: float = 2.0) -> None:
        super().__init__(registry)
        self.timeout = timeout
        self.processes = 0
        self.restarts = 0
        self._ports: dict[int, int] = {}
        self._lock = threading.Lock()
        self.registry.register(self)

    def add(self, key: int, port: int) -> None:
        """Worker process ``key`` serves its metrics on ``127.0.0.1:port``."""
        with self._lock:
            self._ports[key] = port

    def discard(self, key: int) -> None:
        """Worker process ``key`` ended: leave it out of scrapes from now on."""
        with self._lock:
            self._ports.pop(key, None)

    def describe(self) -> Iterable[Metric]:
        """The group's own family names, without reading any process (for registration)."""
        return self._own()

    def collect(self) -> Iterable[Metric]:
        """Every worker process's families, summed, and the group's own gauges."""
        with self._lock:
            ports = sorted(self._ports.items())
        texts = []
        for key, port in ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=self.timeout) as answer:
                    texts.append(answer.read().decode())
            except OSError as exc:  # starting, stopping or just killed: skip it this time
                log.debug("worker process %d did not answer its scrape: %s", key, exc)
        return [*merge_expositions(texts), *self._own()]

    def _own(self) -> list[Metric]:
        return [GaugeMetricFamily("leaseq_worker_processes",
                                  "Worker processes of this group running now.",
                                  value=self.processes),
                CounterMetricFamily("leaseq_worker_restarts",
                                    "Worker processes started again after one ended unasked.",
                                    value=self.restarts)]
