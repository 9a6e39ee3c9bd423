"""Optional OpenTelemetry tracing: a span per enqueue and per job run, linked by the trace
context that travels in the job's ``headers``.

Off by default, and ``import leaseq`` never imports OpenTelemetry. Turn it on once per
process, in producers and workers alike::

    import leaseq.tracing
    leaseq.tracing.instrument()                  # the global TracerProvider
    leaseq.tracing.instrument(tracer_provider=p) # or one of your own

Then every ``enqueue``/``enqueue_many`` (sync, async, and a task's ``enqueue``) runs in a
PRODUCER span ``leaseq.enqueue <queue>`` and writes the current context into each job's
headers with the global propagator (W3C ``traceparent`` by default); a worker runs each
job in a CONSUMER span ``leaseq.run <task>`` whose parent is the context read back from
the headers, so the run sits in the enqueuer's trace. While off, the enqueue and run
paths test one module-level boolean (``on``) and do nothing more. See docs/tracing.md.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from leaseq._core import validate as v
from leaseq._core.job import EnqueueResult, Job
from leaseq.backends.base import NewJob
from leaseq.errors import ConfigurationError, InvalidArgument

if TYPE_CHECKING:  # opentelemetry is imported by instrument() only
    from opentelemetry.trace import Span, Tracer, TracerProvider

log = logging.getLogger("leaseq.tracing")

on = False
"""True while tracing is on in this process: the one thing the hot paths test."""

SYSTEM = "leaseq"
"""``messaging.system`` of every span."""

_tracer: Tracer | None = None


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Turn tracing on for this process.

    Args:
        tracer_provider: The provider whose tracer makes leaseq's spans. Defaults to the
            global one (``opentelemetry.trace.get_tracer_provider()``, which follows a
            provider set later with ``set_tracer_provider``).

    Raises:
        ConfigurationError: opentelemetry-api is not installed (``pip install
            'leaseq[otel]'``).
    """
    global on, _tracer
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(
            "leaseq.tracing needs opentelemetry-api: pip install 'leaseq[otel]' (and an "
            "OpenTelemetry SDK with an exporter, to send the spans somewhere)"
        ) from exc
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    _tracer = provider.get_tracer("leaseq", _version())
    on = True


def uninstrument() -> None:
    """Turn tracing off for this process: no more spans, no more trace headers."""
    global on, _tracer
    on = False
    _tracer = None


def is_instrumented() -> bool:
    """True while tracing is on."""
    return on


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("leaseq")
    except PackageNotFoundError:
        return None


def _get_tracer() -> Tracer:
    tracer = _tracer
    if tracer is None:  # uninstrumented by another thread a moment ago
        from opentelemetry import trace

        tracer = trace.get_tracer("leaseq")
    return tracer


# -- enqueue ---------------------------------------------------------------------------------


class Producing:
    """The span of one ``enqueue``/``enqueue_many`` call, and its jobs carrying its
    context (``jobs``: write these, not the ones given)."""

    def __init__(self, span: Span, jobs: list[NewJob]) -> None:
        self.span = span
        self.jobs = jobs

    def enqueued(self, results: Sequence[EnqueueResult]) -> None:
        """Notes what the write did: the job's id, for a single job."""
        if len(results) == 1 and self.span.is_recording():
            self.span.set_attribute("messaging.message.id", str(results[0].id))
            self.span.set_attribute("leaseq.job.created", results[0].created)


@contextlib.contextmanager
def producing(jobs: list[NewJob]) -> Iterator[Producing]:
    """A PRODUCER span around the write of ``jobs`` (one span for a batch), current while
    it runs; every job gets the span's context added to its headers. An exception ends it
    recorded, with status ERROR."""
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    queues = sorted({job.queue for job in jobs})
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
    }
    if len(queues) == 1:
        attributes["messaging.destination.name"] = queues[0]
    else:
        attributes["leaseq.queues"] = queues
    kinds = {job.kind for job in jobs}
    if len(kinds) == 1 and (kind := next(iter(kinds))) is not None:
        attributes["leaseq.job.kind"] = kind
    if len(jobs) > 1:
        attributes["messaging.batch.message_count"] = len(jobs)
    name = f"leaseq.enqueue {queues[0]}" if len(queues) == 1 else "leaseq.enqueue"
    with _get_tracer().start_as_current_span(name, kind=SpanKind.PRODUCER,
                                             attributes=attributes) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield Producing(span, _carrying(jobs, carrier))


def _carrying(jobs: list[NewJob], carrier: dict[str, str]) -> list[NewJob]:
    """``jobs`` with ``carrier`` (the trace context) added to their headers; the
    context's entries win over the caller's of the same name. A job whose headers would
    then go over the caps keeps its own, without the context (logged)."""
    if not carrier:  # no valid span (a no-op provider): nothing to carry
        return jobs
    try:
        alone = v.headers(carrier)
    except InvalidArgument as exc:
        log.warning("trace context not added to jobs' headers: %s", exc)
        return jobs
    out = []
    for job in jobs:
        if job.headers is None:
            out.append(replace(job, headers=alone))
            continue
        try:
            merged = v.headers({**v.decode(job.headers), **carrier})
        except InvalidArgument as exc:
            log.warning("trace context not added to a job of queue %r: %s", job.queue, exc)
            merged = job.headers
        out.append(replace(job, headers=merged))
    return out


# -- job runs ----------------------------------------------------------------------------------


class Running:
    """The span of one job's run; ``finished`` records how the run ended."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def finished(
        self, outcome: str, exc: BaseException | None = None, error: str | None = None
    ) -> None:
        """Sets ``leaseq.job.outcome``; a failure (``exc`` raised by the handler, or an
        ``error`` without one) records the exception and sets status ERROR."""
        from opentelemetry.trace import Status, StatusCode

        span = self.span
        if not span.is_recording():
            return
        span.set_attribute("leaseq.job.outcome", outcome)
        if exc is not None:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        elif error is not None:
            span.set_status(Status(StatusCode.ERROR, error[:500]))


@contextlib.contextmanager
def running(job: Job, task: str | None) -> Iterator[Running]:
    """A CONSUMER span ``leaseq.run <task or kind or queue>`` around one run of ``job``,
    current while it runs (spans the handler makes are its children), whose parent is the
    context in the job's headers: the enqueue span, when the producer traced. Without
    one, the run starts a trace of its own (never the caller's current span)."""
    from opentelemetry import propagate
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind

    parent = propagate.extract(job.headers or {}, context=Context())
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "leaseq.job.attempt": job.attempts,
        "leaseq.job.max_attempts": job.max_attempts,
        "leaseq.worker.id": job.worker_id,
    }
    if job.kind is not None:
        attributes["leaseq.job.kind"] = job.kind
    name = f"leaseq.run {task or job.kind or job.queue}"
    with _get_tracer().start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER,
                                             attributes=attributes) as span:
        yield Running(span)
