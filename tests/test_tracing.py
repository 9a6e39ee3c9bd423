"""OpenTelemetry tracing (``leaseq.tracing``), on every backend: a PRODUCER span per
enqueue whose context travels in the job's headers, and a CONSUMER span per run whose
parent is that context; nothing at all while tracing is off.

Each test records spans with the SDK's in-memory exporter, through a ``TracerProvider``
of its own handed to ``instrument(tracer_provider=...)``, so no test touches the global
provider. Jobs run in an in-process worker in burst mode (it returns once its queues are
empty).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import leaseq
import leaseq.tracing
from tests.helpers import wait_for


@pytest.fixture
def provider() -> TracerProvider:
    """A provider of this test's own, recording into ``provider.exporter``."""
    tracer_provider = TracerProvider()
    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer_provider.exporter = exporter  # type: ignore[attr-defined]
    return tracer_provider


@pytest.fixture
def traced(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, into ``provider``; off again after."""
    leaseq.tracing.instrument(tracer_provider=provider)
    try:
        yield provider.exporter  # type: ignore[attr-defined]
    finally:
        leaseq.tracing.uninstrument()


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.App]:
    """An App on the test's fresh tables (``q`` migrated them)."""
    application = leaseq.App(url, table_prefix=prefix, lease=5,
                             backoff=leaseq.Backoff(base=0.05, cap=0.05, jitter=0))
    yield application
    application.close()


def burst(app: leaseq.App, queues: list[str] | None = None) -> leaseq.Worker:
    """Runs a worker until its queues are empty (it must find at least one job)."""
    worker = leaseq.Worker(app, queues, burst=True, poll_interval=0.05, grace=5)
    asyncio.run(asyncio.wait_for(worker.run_async(), 60))
    return worker


def spans(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def test_a_run_span_is_a_child_of_its_enqueue_span(
    traced: InMemorySpanExporter, app: leaseq.App, provider: TracerProvider
) -> None:
    inner = provider.get_tracer("test")

    @app.task(queue="t", name="work")
    def work(n: int) -> int:
        with inner.start_as_current_span("inside the handler"):
            return n + 1

    job_id = work.enqueue(n=1).id
    headers = app.queue.get(job_id).headers
    assert headers is not None and headers["traceparent"].startswith("00-")
    burst(app)
    assert app.queue.get(job_id).state == "completed"

    [enqueue] = spans(traced, "leaseq.enqueue")
    [run] = spans(traced, "leaseq.run")
    [handler] = spans(traced, "inside the handler")
    assert enqueue.name == "leaseq.enqueue t" and enqueue.kind == SpanKind.PRODUCER
    assert run.name == "leaseq.run work" and run.kind == SpanKind.CONSUMER
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert run.context.trace_id == enqueue.context.trace_id
    assert handler.parent is not None and handler.parent.span_id == run.context.span_id
    assert enqueue.attributes is not None and run.attributes is not None
    assert dict(enqueue.attributes) == {
        "messaging.system": "leaseq", "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue", "messaging.destination.name": "t",
        "leaseq.job.kind": "work", "messaging.message.id": str(job_id),
        "leaseq.job.created": True,
    }
    assert {k: run.attributes[k] for k in (
        "messaging.system", "messaging.operation.type", "messaging.destination.name",
        "messaging.message.id", "leaseq.job.kind", "leaseq.job.attempt",
        "leaseq.job.outcome")} == {
        "messaging.system": "leaseq", "messaging.operation.type": "process",
        "messaging.destination.name": "t", "messaging.message.id": str(job_id),
        "leaseq.job.kind": "work", "leaseq.job.attempt": 1, "leaseq.job.outcome": "completed",
    }
    assert run.status.status_code == StatusCode.UNSET
    # The enqueue ended before the run began: the run is not inside the enqueue's time.
    assert enqueue.end_time is not None and run.start_time is not None
    assert enqueue.end_time <= run.start_time


def test_an_async_handler_runs_inside_its_span(
    traced: InMemorySpanExporter, app: leaseq.App, provider: TracerProvider
) -> None:
    inner = provider.get_tracer("test")

    @app.task(queue="t", name="work")
    async def work() -> None:
        with inner.start_as_current_span("inside the handler"):
            await asyncio.sleep(0)

    async def produce() -> int:
        try:
            return (await work.enqueue_async()).id
        finally:
            await app.async_queue.close()  # its connections belong to this loop

    job_id = asyncio.run(produce())
    burst(app)
    [enqueue] = spans(traced, "leaseq.enqueue")
    [run] = spans(traced, "leaseq.run")
    [handler] = spans(traced, "inside the handler")
    assert enqueue.attributes is not None
    assert enqueue.attributes["messaging.message.id"] == str(job_id)
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert handler.parent is not None and handler.parent.span_id == run.context.span_id


def test_a_failing_run_records_the_exception_with_status_error(
    traced: InMemorySpanExporter, app: leaseq.App, q: leaseq.Queue
) -> None:
    @app.task(queue="t", max_attempts=2, name="fails")
    def fails() -> None:
        raise ValueError("no such customer")

    job_id = fails.enqueue().id
    burst(app)  # the first attempt fails and is retried after the backoff...
    if q.get(job_id).state != "dead":  # ...unless the burst found the retry due already
        wait_for(lambda: q.peek("t"), message="the retry to come due")
        burst(app)  # the second uses the last attempt: dead
    assert q.get(job_id).state == "dead"

    [enqueue] = spans(traced, "leaseq.enqueue")
    runs = sorted(spans(traced, "leaseq.run"), key=lambda s: s.start_time or 0)
    assert [r.attributes["leaseq.job.attempt"] for r in runs] == [1, 2]  # type: ignore[index]
    assert [r.attributes["leaseq.job.outcome"] for r in runs] == [  # type: ignore[index]
        "retried", "dead"]
    for run in runs:
        assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
        assert run.status.status_code == StatusCode.ERROR
        assert run.status.description == "ValueError: no such customer"
        [event] = run.events
        assert event.name == "exception" and event.attributes is not None
        assert event.attributes["exception.type"] == "ValueError"
        assert "no such customer" in str(event.attributes["exception.message"])


def test_a_job_of_an_unknown_task_is_an_error_too(
    traced: InMemorySpanExporter, app: leaseq.App, q: leaseq.Queue
) -> None:
    @app.task(queue="t", name="known")
    def known() -> None: ...

    job_id = q.enqueue("t", {}, kind="unknown").id
    app.unknown_task_grace = 0  # buried on sight, as before the grace
    burst(app)
    assert q.get(job_id).state == "dead"
    [run] = spans(traced, "leaseq.run")
    assert run.name == "leaseq.run unknown"
    assert run.attributes is not None and run.attributes["leaseq.job.outcome"] == "dead"
    assert run.status.status_code == StatusCode.ERROR
    assert "no task named 'unknown'" in (run.status.description or "")


def test_enqueue_many_is_one_span_whose_context_every_job_carries(
    traced: InMemorySpanExporter, app: leaseq.App, q: leaseq.Queue
) -> None:
    @app.task(queue="t", name="work")
    def work(n: int) -> None: ...

    results = work.enqueue_many([{"n": i} for i in range(3)])
    [enqueue] = spans(traced, "leaseq.enqueue")
    assert enqueue.attributes is not None
    assert enqueue.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in enqueue.attributes
    parents = {(q.get(r.id).headers or {}).get("traceparent") for r in results}
    assert len(parents) == 1 and None not in parents
    burst(app)
    runs = spans(traced, "leaseq.run")
    assert sorted(r.attributes["messaging.message.id"]  # type: ignore[index]
                  for r in runs) == sorted(str(r.id) for r in results)
    assert all(r.parent is not None and r.parent.span_id == enqueue.context.span_id
               for r in runs)


def test_a_batch_over_several_queues_names_them(
    traced: InMemorySpanExporter, q: leaseq.Queue
) -> None:
    q.enqueue_many([{"queue": "b"}, {"queue": "a", "kind": "x"}])
    [enqueue] = spans(traced, "leaseq.enqueue")
    assert enqueue.name == "leaseq.enqueue" and enqueue.attributes is not None
    assert tuple(enqueue.attributes["leaseq.queues"]) == ("a", "b")  # type: ignore[arg-type]
    assert "messaging.destination.name" not in enqueue.attributes
    assert "leaseq.job.kind" not in enqueue.attributes


def test_the_callers_headers_are_kept_next_to_the_trace_context(
    traced: InMemorySpanExporter, q: leaseq.Queue
) -> None:
    job_id = q.enqueue("t", headers={"tenant": "acme", "traceparent": "stale"}).id
    headers = q.get(job_id).headers
    [enqueue] = spans(traced, "leaseq.enqueue")
    assert headers is not None and headers["tenant"] == "acme"
    # The current context wins over a traceparent the caller wrote.
    assert headers["traceparent"].startswith(
        f"00-{enqueue.context.trace_id:032x}-{enqueue.context.span_id:016x}-")


def test_the_enqueue_span_is_a_child_of_the_callers_span(
    traced: InMemorySpanExporter, q: leaseq.Queue, provider: TracerProvider
) -> None:
    with provider.get_tracer("test").start_as_current_span("request") as request:
        q.enqueue("t")
    [enqueue] = spans(traced, "leaseq.enqueue")
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.get_span_context().span_id


def test_a_refused_enqueue_ends_its_span_with_the_error(
    traced: InMemorySpanExporter, q: leaseq.Queue
) -> None:
    q.configure_queue("full", max_jobs=1)
    q.enqueue("full")
    with pytest.raises(leaseq.QueueFull):
        q.enqueue("full")
    failed = spans(traced, "leaseq.enqueue")[-1]
    assert failed.status.status_code == StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    assert q.stats()["full"].available == 1


def test_a_producer_without_tracing_writes_no_headers_and_the_run_starts_a_trace(
    provider: TracerProvider, app: leaseq.App, q: leaseq.Queue
) -> None:
    exporter: InMemorySpanExporter = provider.exporter  # type: ignore[attr-defined]

    @app.task(queue="t", name="work")
    def work() -> None: ...

    job_id = work.enqueue().id
    assert q.get(job_id).headers is None
    leaseq.tracing.instrument(tracer_provider=provider)  # the worker's process traces
    try:
        burst(app)
    finally:
        leaseq.tracing.uninstrument()
    assert spans(exporter, "leaseq.enqueue") == []
    [run] = spans(exporter, "leaseq.run")
    assert run.parent is None


def test_tracing_off_makes_no_spans_and_writes_no_headers(
    provider: TracerProvider, app: leaseq.App, q: leaseq.Queue
) -> None:
    exporter: InMemorySpanExporter = provider.exporter  # type: ignore[attr-defined]

    @app.task(queue="t", name="work")
    def work() -> None: ...

    leaseq.tracing.instrument(tracer_provider=provider)
    leaseq.tracing.uninstrument()
    assert not leaseq.tracing.is_instrumented()
    ids = [work.enqueue().id, q.enqueue("t", {}, kind="work", headers={"a": "1"}).id,
           *(r.id for r in q.enqueue_many([{"queue": "t", "kind": "work", "payload": {}}]))]
    burst(app)
    assert [q.get(i).headers for i in ids] == [None, {"a": "1"}, None]
    assert [q.get(i).state for i in ids] == ["completed"] * 3
    assert exporter.get_finished_spans() == ()


def test_a_no_op_provider_writes_no_headers(q: leaseq.Queue) -> None:
    from opentelemetry.trace import NoOpTracerProvider

    leaseq.tracing.instrument(tracer_provider=NoOpTracerProvider())
    try:
        job_id = q.enqueue("t").id
    finally:
        leaseq.tracing.uninstrument()
    assert q.get(job_id).headers is None


def test_instrument_without_opentelemetry_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import raises ImportError
    with pytest.raises(leaseq.ConfigurationError, match=r"leaseq\[otel\]"):
        leaseq.tracing.instrument()
    assert not leaseq.tracing.is_instrumented()


def test_importing_leaseq_does_not_import_opentelemetry() -> None:
    code = ("import sys, leaseq, leaseq.tracing, leaseq.worker; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
