"""What ``Queue`` and ``AsyncQueue`` share: every check, encoding and default, with no I/O.

The two clients differ only in ``await``; everything that decides something lives here so
they cannot drift apart. Queue settings stored in the database are cached per client for
``CONFIG_TTL`` seconds, so an enqueue or a nack reads them at most that often.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from leaseq import _results, _wakeup
from leaseq._core import flow as _flow
from leaseq._core import redact
from leaseq._core import validate as v
from leaseq._core.backoff import Backoff
from leaseq._core.flow import FlowLink
from leaseq._core.job import (
    LIVE_STATES,
    QUEUE_SETTINGS,
    TERMINAL_STATES,
    EnqueueResult,
    Job,
    JobState,
    QueueConfig,
    QueueStats,
    ResultWaiter,
    ServerConfig,
    ServerStats,
    Undecodable,
)
from leaseq._core.settings import Settings
from leaseq.backends import capabilities_for
from leaseq.backends.base import (
    FailItem,
    NewJob,
    PauseEnd,
    PeekState,
    RenewOutcome,
    StepItem,
)
from leaseq.backends.base import SnoozeScope as BackendScope
from leaseq.errors import (
    BackendError,
    BackendUnavailable,
    ClientClosed,
    InvalidArgument,
    JobCancelled,
    LeaseLost,
    OutcomeUnknown,
    TouchLimitExceeded,
)

CONFIG_TTL = 2.0
"""Seconds a client keeps the queue settings it read (``configure_queue`` by another
client takes effect here within this time; the client that configures sees it at once)."""

POLL_FIRST = 0.002
POLL_CAP = 0.02
"""A blocking ``dequeue`` claims again on every push wake-up (an enqueue in this process;
PostgreSQL NOTIFY, Redis pub/sub or a SQLite commit from another) and otherwise polls from
``POLL_FIRST`` seconds, doubling up to ``POLL_CAP``: a scheduled job coming due sends no
message, so it is seen within ~20 ms plus a claim, as is an enqueue on MySQL/MariaDB."""

_ENQUEUE_KEYS = frozenset({
    "queue", "payload", "kind", "priority", "delay", "run_at", "unique_key", "max_attempts",
    "lease", "unique_for", "headers", "unique_scope", "tags",
})
UniqueScope = Literal["queue", "global"]
UNIQUE_SCOPES = ("queue", "global")
"""``enqueue(unique_scope=)``: a key unique in its queue (the default) or in every queue."""
PEEK_STATES: tuple[PeekState, ...] = ("available", "scheduled", "dead")

_log = logging.getLogger("leaseq")


class Keep(enum.Enum):
    """The default of ``configure_queue``'s arguments: leave the stored value as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Closed:
    """Stands in for a closed client's backend: every call raises ``ClientClosed``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.supports_transactions = False

    def __getattr__(self, method: str) -> Any:
        raise ClientClosed(f"this leaseq client ({self.name}) is closed; connect again")


def _duration(name: str, value: object, positive: bool) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return v.seconds(name, value, positive=positive)


def _check_setting(name: str, value: object) -> int | float:
    """One queue setting, checked (``configure_queue``)."""
    if name == "max_attempts":
        return v.integer(name, value, 1, v.MAX_ATTEMPTS)
    if name == "max_jobs":
        return v.integer(name, value, 1, 2**53)
    if name in ("max_touches", "max_snoozes"):
        return v.integer(name, value, 0)
    if name in ("concurrency_limit", "rate_burst"):
        return v.integer(name, value, 1, 1_000_000)
    if name == "rate_per_sec":
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0 < value <= 1_000_000):
            raise InvalidArgument(f"rate_per_sec must be a number in (0, 1e6], got {value!r}")
        return float(value)
    if name == "jitter":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise InvalidArgument(f"jitter must be a number in [0, 1), got {value!r}")
        return float(value)
    positive = name in ("default_lease", "max_lease", "max_touch_duration")
    return _duration(name, value, positive)


WRITES = ("migrate", "enqueue", "enqueue_many", "dequeue", "heartbeat", "heartbeat_many",
          "ack", "ack_many", "nack", "nack_many", "release", "snooze", "bury", "kick", "retry",
          "discard", "cancel", "configure_queue", "configure_server", "pause", "resume",
          "reclaim", "prune")
"""The public methods that write: an ``OutcomeUnknown`` raised inside one carries its
name (``names_outcome``)."""


def names_outcome(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, naming itself in an ``OutcomeUnknown`` raised below it: the backends
    raise it where a reply is lost, knowing only their own operation (``fail``, not
    ``nack``). One frame more per call, and only for these methods."""
    name = method.__name__
    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def named_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await method(*args, **kwargs)
            except OutcomeUnknown as exc:
                exc.operation = exc.operation or name
                raise

        return named_async

    @functools.wraps(method)
    def named(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except OutcomeUnknown as exc:
            exc.operation = exc.operation or name
            raise

    return named


class Shared:
    """Validation, encoding and defaults shared by both clients."""

    _result_waiter: ResultWaiter  # set by each client: what its EnqueueResults wait with

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Each client's writes name themselves in an OutcomeUnknown (``names_outcome``):
        # one list here instead of a decorator to keep in step on both clients.
        super().__init_subclass__(**kwargs)
        for name in WRITES:
            if name in cls.__dict__:
                setattr(cls, name, names_outcome(cls.__dict__[name]))

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self._wake_key = _wakeup.key(url, settings.table_prefix)
        self._last_reclaim = float("-inf")
        self._reclaim_lock = threading.Lock()
        self._configs: dict[str, QueueConfig] = {}
        self._configs_read = float("-inf")
        self._capped: frozenset[str] = frozenset()
        # The server's max_queues as last read, and the queues this client has seen
        # counted against it: only others make an enqueue check the cap (Backend.enqueue).
        self._max_queues: int | None = None
        self._counted: set[str] = set()
        # Queues with a concurrency or rate limit, as last read: claims of these take
        # the limits into account (``Backend.claim``).
        self._limited: frozenset[str] = frozenset()
        self._backoffs: dict[str, Backoff] = {}
        self._closed = False
        self._waiting: set[threading.Event] = set()
        # Integrations (leaseq.contrib.django) set this: a callable giving the connection
        # an enqueue or ack without ``conn=`` joins, or None to use leaseq's own pool.
        self.default_conn: Callable[[], Any] | None = None
        # What this kind of backend has besides its operations (push wake-ups, turns,
        # conn= joins): asked here instead of comparing backend names (design §66).
        self._caps = capabilities_for(url)
        self._listen_url = self._caps.push_url(url, settings.listen_url)
        self._said_no_push = False

    # -- queue settings cache -------------------------------------------------------------

    def _configs_stale(self) -> bool:
        return time.monotonic() - self._configs_read >= CONFIG_TTL

    def _store_configs(self, configs: dict[str, QueueConfig]) -> None:
        self._configs = configs
        self._capped = frozenset(q for q, c in configs.items() if c.max_jobs is not None)
        self._limited = frozenset(q for q, c in configs.items() if c.limited)
        self._backoffs = {}
        self._configs_read = time.monotonic()

    def _store_server(self, config: ServerConfig) -> None:
        self._max_queues = config.max_queues

    def _fresh_in(self, jobs: Sequence[NewJob] | Sequence[str]) -> frozenset[str]:
        """The queues of ``jobs`` (or these queue names) not seen counted against
        ``max_queues``, while set."""
        if self._max_queues is None:
            return frozenset()
        names = (job if isinstance(job, str) else job.queue for job in jobs)
        return frozenset(name for name in names if name not in self._counted)

    def _server_changes(self, max_queues: int | Keep | None) -> dict[str, int | None]:
        if max_queues is KEEP:
            return {}
        return {"max_queues": None if max_queues is None
                else v.integer("max_queues", max_queues, 1, 1_000_000_000)}

    def _concurrency_limited(self, queue: str) -> bool:
        """True when ``queue`` had a ``concurrency_limit`` when settings were last read."""
        config = self._configs.get(queue)
        return config is not None and config.concurrency_limit is not None

    def _forget_configs(self) -> None:
        self._configs_read = float("-inf")

    def _backoff_for(self, queue: str) -> Backoff:
        config = self._configs.get(queue)
        base = self.settings.backoff
        if config is None or (config.base_backoff is None and config.max_backoff is None
                              and config.jitter is None):
            return base
        backoff = self._backoffs.get(queue)
        if backoff is None:
            start = base.base if config.base_backoff is None else config.base_backoff
            cap = base.cap if config.max_backoff is None else config.max_backoff
            jitter = base.jitter if config.jitter is None else config.jitter
            backoff = self._backoffs[queue] = Backoff(start, max(cap, start), jitter)
        return backoff

    def _setting_changes(
        self, current: QueueConfig, given: Mapping[str, object]
    ) -> dict[str, int | float | None]:
        changes: dict[str, int | float | None] = {}
        for name, value in given.items():
            if value is KEEP:
                continue
            changes[name] = None if value is None else _check_setting(name, value)
        merged = {n: getattr(current, n) for n in QUEUE_SETTINGS} | changes
        base = self.settings.backoff
        start = base.base if merged["base_backoff"] is None else merged["base_backoff"]
        cap = base.cap if merged["max_backoff"] is None else merged["max_backoff"]
        if cap < start:
            raise InvalidArgument(
                f"max_backoff ({cap}) must be >= base_backoff ({start}) for queue "
                f"{current.queue!r}"
            )
        return changes

    # -- enqueue ----------------------------------------------------------------------------

    def _new_job(
        self,
        queue: str,
        payload: Any = None,
        *,
        kind: str | None = None,
        priority: int = 0,
        delay: float | timedelta = 0,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        lease: float | timedelta | None = None,
        unique_for: float | timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        flow: bool = False,
        unique_scope: str = "queue",
        tags: Sequence[str] | None = None,
    ) -> NewJob:
        if headers is not None and not flow and isinstance(headers, Mapping) \
                and _flow.HEADER in headers:
            # Its ack would be routed as a step of a chain or group that does not exist.
            raise InvalidArgument(
                f"the {_flow.HEADER!r} header is leaseq's own (chains and groups set it); "
                "name your header otherwise")
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        if run_at is not None and delay:
            raise InvalidArgument("give delay or run_at, not both")
        name = v.queue_name(queue)
        if max_attempts is None:
            config = self._configs.get(name)
            max_attempts = config.max_attempts if config and config.max_attempts else None
        if unique_for is not None and unique_key is None:
            raise InvalidArgument("unique_for needs a unique_key")
        if unique_scope not in UNIQUE_SCOPES:
            raise InvalidArgument(
                f"unique_scope must be 'queue' or 'global', got {unique_scope!r}")
        if unique_scope == "global" and unique_key is None:
            raise InvalidArgument("unique_scope='global' needs a unique_key")
        return NewJob(
            queue=name,
            payload=v.encode(payload, self.settings.max_payload_bytes),
            kind=v.optional_text("kind", kind, v.MAX_KIND),
            priority=v.integer("priority", priority, v.INT32[0]),
            delay=v.seconds("delay", delay),
            run_at=None if run_at is None else v.aware_utc("run_at", run_at),
            unique_key=v.optional_text("unique_key", unique_key, v.MAX_UNIQUE_KEY),
            max_attempts=v.integer(
                "max_attempts",
                self.settings.max_attempts if max_attempts is None else max_attempts,
                1,
                v.MAX_ATTEMPTS,
            ),
            lease=None if lease is None else _duration("lease", lease, True),
            unique_for=None if unique_for is None else _duration("unique_for", unique_for, True),
            headers=None if headers is None else v.headers(headers),
            unique_global=unique_scope == "global",
            tags=None if tags is None else v.tags(tags),
        )

    def _new_jobs(self, items: Iterable[Mapping[str, Any]]) -> list[NewJob]:
        jobs = []
        for n, item in enumerate(items):
            # type() first: isinstance against the Mapping ABC costs more than the rest.
            if not (type(item) is dict or isinstance(item, Mapping)) or "queue" not in item:
                raise InvalidArgument(
                    f"enqueue_many item {n} must be a mapping with at least 'queue', got "
                    f"{item!r:.80}"
                )
            if not item.keys() <= _ENQUEUE_KEYS:
                unknown = sorted(set(item) - _ENQUEUE_KEYS)
                raise InvalidArgument(f"enqueue_many item {n} has unknown keys {unknown}")
            jobs.append(self._new_job(**item))
        return jobs

    def _bind(self, results: list[EnqueueResult]) -> list[EnqueueResult]:
        """``results``, which the backend has just made, with this client's waiter."""
        return _results.bind(results, self._result_waiter)

    def _capped_in(self, jobs: Sequence[NewJob]) -> frozenset[str]:
        """The queues of ``jobs`` whose ``max_jobs`` this client knows to be set."""
        if not self._capped:
            return frozenset()
        return frozenset(job.queue for job in jobs if job.queue in self._capped)

    # -- dequeue ----------------------------------------------------------------------------

    def _claim_args(
        self, queues: str | Sequence[str], worker_id: str | None, lease: float | None,
        limit: int, wait: float | timedelta,
    ) -> tuple[list[str], str, float | None, int, float]:
        return (
            v.queue_names(queues),
            v.optional_text("worker_id", worker_id, v.MAX_WORKER_ID) or default_worker_id(),
            None if lease is None else v.seconds("lease", lease, positive=True),
            v.integer("limit", limit, 1, 10_000),
            _duration("wait", wait, False),
        )

    @staticmethod
    def _undecodable(jobs: Sequence[Job]) -> list[tuple[int, int, str | None, str | None]]:
        """``(id, token, error, detail)`` of each claimed job whose payload or headers do
        not decode (``Backend.claim`` marks them): the client buries them and hands out
        the rest, so one bad row never stops a queue (design §52). Each is logged once,
        at WARNING: someone wrote the row by hand, by SQL or with an older version."""
        bad = []
        for job in jobs:
            if isinstance(job.payload, Undecodable):
                message = (f"job {job.id} cannot run: its stored {job.payload.reason}; it "
                           f"was buried (starts: {job.payload.preview[:80]!r})")
                _log.warning("%s", message)
                error, detail = v.error_record({"type": "Undecodable", "message": message})
                bad.append((job.id, job.lease_token, error, detail))
        return bad

    def _without_buried(
        self, jobs: list[Job], bad: Sequence[tuple[int, int, str | None, str | None]],
        failures: Mapping[int, Exception],
    ) -> list[Job]:
        """``jobs`` less the ``bad`` ones, just buried; ``failures``, the buries that
        raised, are logged: such a job runs out its lease and a later claim buries it,
        while the rest of the batch is handed out all the same."""
        for job_id, exc in failures.items():
            _log.warning("job %s could not be buried (%s); a later claim will", job_id, exc)
        _results.finished(self._wake_key, [item[0] for item in bad])
        buried = {item[0] for item in bad}
        return [job for job in jobs if job.id not in buried]

    def _reclaim_due(self) -> bool:
        """True at most once per ``reclaim_interval``: dequeue then reclaims inline."""
        interval = self.settings.reclaim_interval
        if interval is None:
            return False
        with self._reclaim_lock:
            now = time.monotonic()
            if now - self._last_reclaim < interval:
                return False
            self._last_reclaim = now
            return True

    # -- holders ----------------------------------------------------------------------------

    @staticmethod
    def _held(job: object) -> tuple[int, int]:
        if not isinstance(job, Job):
            raise InvalidArgument(f"expected a leaseq.Job from dequeue, got {type(job).__name__}")
        return job.id, job.lease_token

    def _retry_delay(
        self, job: Job, delay: float | timedelta | None, backoff: Backoff | None
    ) -> float:
        if delay is None:
            return (backoff or self._backoff_for(job.queue)).delay(job.attempts)
        if isinstance(delay, timedelta):
            delay = delay.total_seconds()
        return v.seconds("delay", delay)

    @staticmethod
    def _error(error: object) -> tuple[str | None, str | None]:
        """``nack``'s error as ``(text, detail)``: see ``validate.error_record``."""
        return v.error_record(error)

    def _failures(
        self, jobs: Iterable[Job | tuple[Job, object]], backoff: Backoff | None
    ) -> list[FailItem]:
        items = []
        for entry in jobs:
            job, error = entry if isinstance(entry, tuple) else (entry, None)
            job_id, token = self._held(job)
            text, detail = self._error(error)
            items.append((job_id, token, text, self._retry_delay(job, None, backoff), detail))
        return items

    @staticmethod
    def _snooze_scope(scope: object) -> BackendScope:
        """``snooze``'s scope, checked as ``RetryAfter`` checks it."""
        if scope in ("job", "queue"):
            return scope
        if scope == "partition":
            raise InvalidArgument("snooze(scope='partition') needs partitions, which this "
                                  "version of leaseq does not have yet")
        raise InvalidArgument(f"snooze scope must be 'job' or 'queue', got {scope!r}")

    @staticmethod
    def _pause_end(until: object) -> PauseEnd:
        """``pause``'s ``until``: an aware datetime still to come (by this process's clock,
        as a first check: the database's decides when the pause ends), or seconds from now
        (a number or a ``timedelta``), or None for no end."""
        if until is None:
            return None
        if isinstance(until, datetime):
            if until.tzinfo is None or until.utcoffset() is None:
                raise InvalidArgument(
                    f"pause until= needs an aware datetime (with a timezone), got {until!r}")
            ahead = (until - datetime.now(timezone.utc)).total_seconds()
            if ahead <= 0:
                raise InvalidArgument(f"pause until={until.isoformat()} has passed already")
            if ahead > v.MAX_SECONDS:
                raise InvalidArgument(f"pause until={until.isoformat()} is more than ten "
                                      "years away")
            return until.astimezone(timezone.utc)
        if isinstance(until, timedelta):
            until = until.total_seconds()
        return v.seconds("pause until", until, positive=True)

    @staticmethod
    def _priority(priority: object) -> int | None:
        return None if priority is None else v.integer("priority", priority, v.INT32[0])

    def _result(self, result: object) -> str | None:
        if result is None:
            return None
        return v.encode(result, self.settings.max_payload_bytes, "result")

    @staticmethod
    def _limit(limit: object) -> int:
        return v.integer("limit", limit, 1, 10**9)

    @staticmethod
    def _job_id(job_id: object) -> int:
        return v.integer("job_id", job_id, 1, 2**63 - 1)

    def _ack_items(
        self, jobs: Iterable[Job | tuple[Job, Any]]
    ) -> tuple[list[tuple[int, int, str | None]], list[FlowLink | None] | None]:
        """``ack_many``'s ``(id, token, result)`` items and, when some job belongs to a
        chain or group, each job's ``FlowLink`` (None for the others); None when no job
        does, the usual case, which then costs one test per job."""
        items = []
        links: list[FlowLink | None] | None = None
        for entry in jobs:
            job, result = entry if isinstance(entry, tuple) else (entry, None)
            items.append((*self._held(job), self._result(result)))
            if job.headers is not None and (found := _flow.link(job.headers)) is not None:
                if links is None:
                    links = [None] * (len(items) - 1)
                links.append(found)
            elif links is not None:
                links.append(None)
        return items, links

    @staticmethod
    def _split_steps(
        items: Sequence[tuple[int, int, str | None]], links: Sequence[FlowLink | None]
    ) -> tuple[list[int], list[tuple[int, StepItem]]]:
        """The positions of a batch's plain jobs, and ``(position, StepItem)`` of its jobs
        of chains and groups."""
        plain = [i for i, link in enumerate(links) if link is None]
        steps = [(i, (*items[i], link)) for i, link in enumerate(links) if link is not None]
        return plain, steps

    def _woken_by(self, links: Sequence[FlowLink | None]) -> None:
        """The in-process wake-up for the queues a flow's acks may have enqueued to: this
        process's workers claim the next step at once instead of at their next poll."""
        queues = sorted({link.queue for link in links if link is not None and link.queue})
        if queues:
            _wakeup.notify(self._wake_key, queues)

    def _renewals(self, jobs: Iterable[Job], extend: float | None
                  ) -> tuple[list[Job], list[tuple[int, int, float]]]:
        held = list(jobs)
        items = []
        for job in held:
            job_id, token = self._held(job)
            seconds = v.seconds("extend", job.lease if extend is None else extend, positive=True)
            items.append((job_id, token, seconds))
        return held, items

    @staticmethod
    def _lease_states(
        jobs: list[Job], raw: list[RenewOutcome]
    ) -> list[datetime | LeaseLost | JobCancelled | TouchLimitExceeded]:
        out: list[datetime | LeaseLost | JobCancelled | TouchLimitExceeded] = []
        for job, status in zip(jobs, raw, strict=True):
            if status is None:
                out.append(LeaseLost(f"lease {job.lease_token} on job {job.id} is no longer valid"))
            elif isinstance(status, TouchLimitExceeded):
                out.append(status)
            elif status[1]:
                out.append(JobCancelled(f"job {job.id} was cancelled"))
            else:
                out.append(status[0])
        return out

    # -- results ----------------------------------------------------------------------------

    @property
    def listen_url(self) -> str | None:
        """The URL this client's push wake-ups listen on (the worker's, a blocking
        ``dequeue``'s, result waits'), or None when they poll: ``pgbouncer=true`` without
        a ``listen_url``."""
        return self._listen_url

    def _push_url(self) -> str | None:
        """``listen_url`` for a listener about to start; the first time it is None, says
        so in the log (once per client)."""
        if self._listen_url is None and not self._said_no_push:
            self._said_no_push = True
            _log.warning("%s: %s", self, self._caps.no_push)
        return self._listen_url

    def _results_hub(self) -> _results.Hub:
        """The waiters of this process on this client's database."""
        return _results.hub(self.url, self.settings.table_prefix,
                            self._caps.done_listener, self._push_url())

    def _finished_items(
        self, items: Sequence[tuple[int, int, str | None]], done: Sequence[bool]
    ) -> None:
        """Wakes waiters of this process on the jobs ``ack_many`` completed; costs a dict
        lookup when nobody waits (the worker acks through here)."""
        if _results.waiting(self._wake_key):
            ids = [item[0] for item, ok in zip(items, done, strict=True) if ok]
            _results.finished(self._wake_key, ids)

    def _finished_states(
        self, ids: Sequence[int], states: Sequence[JobState | None]
    ) -> None:
        """Wakes waiters on the jobs that a nack, release or cancel left dead or
        cancelled."""
        if _results.waiting(self._wake_key):
            ended = [job_id for job_id, state in zip(ids, states, strict=True)
                     if state in ("dead", "cancelled", "discarded")]
            if ended:
                _results.finished(self._wake_key, ended)

    # -- reads ------------------------------------------------------------------------------

    @staticmethod
    def _listing(
        queue: str | None, state: object, limit: object, after: object,
        kind: object = None, unique_key: object = None, tag: object = None,
    ) -> tuple[str | None, JobState | None, int, int, str | None, str | None, str | None]:
        if state is not None and state not in (*LIVE_STATES, *TERMINAL_STATES):
            raise InvalidArgument(
                f"state must be one of {', '.join((*LIVE_STATES, *TERMINAL_STATES))}, "
                f"got {state!r}"
            )
        # The checks enqueue makes: a value no job can hold is refused, not silently unmatched.
        return (
            None if queue is None else v.queue_name(queue),
            state,
            v.integer("limit", limit, 1, 10_000),
            v.integer("after", after, 0, 2**63 - 1),
            v.optional_text("kind", kind, v.MAX_KIND),
            v.optional_text("unique_key", unique_key, v.MAX_UNIQUE_KEY),
            None if tag is None else v.tag(tag),
        )

    @staticmethod
    def _peeking(queue: str, state: object, limit: object) -> tuple[str, PeekState, int]:
        if state not in PEEK_STATES:
            raise InvalidArgument(f"peek state must be one of {', '.join(PEEK_STATES)}, "
                                  f"got {state!r}")
        return v.queue_name(queue), state, v.integer("limit", limit, 1, 10_000)

    @staticmethod
    def _unseen(exc: BackendError) -> None:
        """``server_stats`` without the transaction age when the server refused to show
        it (MariaDB without the PROCESS privilege): the totals still matter more. An
        unreachable server is still raised."""
        if isinstance(exc, BackendUnavailable):
            raise exc
        _log.debug("oldest transaction age not readable: %s", exc)

    @staticmethod
    def _totals(stats: dict[str, QueueStats], backend: str, version: str,
                oldest_transaction: float | None = None) -> ServerStats:
        ages = [s.oldest_available_age for s in stats.values()
                if s.oldest_available_age is not None]
        return ServerStats(
            queues=len(stats),
            **{field: sum(getattr(s, field) for s in stats.values())
               for field in ("available", "scheduled", "running", "dead", "completed",
                             "cancelled", "discarded")},
            oldest_available_age=max(ages) if ages else None,
            backend=backend,
            server_version=version,
            oldest_transaction_age=oldest_transaction,
        )

    @staticmethod
    def _age(older_than: timedelta | float) -> float:
        if isinstance(older_than, timedelta):
            older_than = older_than.total_seconds()
        return v.seconds("older_than", older_than)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact.redact_url(self.url)!r}>"
