"""memory:// — the whole contract in one process, for tests and eager mode.

A peer of the SQL backends, not a fake: it passes the same conformance suite. State lives
in dicts under one lock; "now" is the process clock. Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import platform
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from leaseq._core import limits
from leaseq._core.ended import EXPIRED, Verb, ended_as, repeated
from leaseq._core.flow import FlowLink, FlowState, joined
from leaseq._core.job import (
    QUEUE_SETTINGS,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueConfig,
    QueueStats,
    ServerConfig,
    error_detail,
)
from leaseq._core.validate import claimed, discard_record, stored, stored_tags
from leaseq.backends._flows import decode_step, encode_step
from leaseq.backends.base import (
    FailItem,
    NewFlow,
    NewJob,
    PauseEnd,
    PeekState,
    RenewOutcome,
    SnoozeScope,
    StepItem,
)
from leaseq.errors import (
    BackendError,
    ConfigurationError,
    InvalidArgument,
    JobCancelled,
    JobNotFound,
    JobStateError,
    LeaseLost,
    QueueFull,
    TooManyQueues,
    TouchLimitExceeded,
)


@dataclass
class _Row:
    id: int
    queue: str
    kind: str | None
    payload: str
    priority: int
    max_attempts: int
    unique_key: str | None
    available_at: float
    created_at: float
    state: str = "available"
    attempts: int = 0
    lease_token: int = 0
    lease_until: float | None = None
    worker_id: str | None = None
    started_at: float | None = None
    error: str | None = None
    cancel_requested: bool = False
    finished_at: float | None = None
    result: str | None = None
    lease: float | None = None
    touches: int = 0
    global_key: bool = False  # enqueued with unique_scope="global"
    leased_at: float | None = None
    touched_at: float | None = None
    reserves: int = 0
    timeouts: int = 0
    releases: int = 0
    buries: int = 0
    kicks: int = 0
    failed_at: float | None = None
    updated_at: float | None = None
    headers: str | None = None  # JSON text, as stored by the other backends
    error_detail: str | None = None  # JSON text of the error, when nack gave more than text
    tags: str | None = None  # JSON array text, as the other backends store it
    ended_token: int | None = None  # the last ended lease and how it ended (_core/ended.py)
    ended_as: str | None = None
    snoozes: int = 0


@dataclass
class _Flow:
    """A chain or group as the SQL backends' flows and flow_parts rows hold it."""

    state: FlowState
    created: float
    specs: dict[int, str]  # a chain's later steps
    callback: str | None
    results: dict[int, str | None]  # a group's member results


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc)


def _kick_order(r: _Row) -> tuple[int, int]:
    """The order ``kick`` takes dead jobs in: priority desc, then oldest (lowest id)."""
    return -r.priority, r.id


class MemoryBackend:
    """The backend contract in process memory (see ``backends.base``)."""

    name = "memory"
    supports_transactions = False

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.live: dict[int, _Row] = {}
        self.history: dict[int, _Row] = {}
        self.unique: dict[tuple[str, str], int] = {}
        # queue -> when its pause ends (clock seconds; math.inf: at resume only). An ended
        # timed pause stays until the next pause or resume, as a SQL row's paused_until.
        self.pauses: dict[str, float] = {}
        self.settings: dict[str, dict[str, Any]] = {}  # queue -> stored settings
        self.finished_keys: dict[tuple[str, str], int] = {}  # newest finished keyed job
        self.buckets: dict[str, tuple[float, float]] = {}  # queue -> (tokens, when)
        self.next_id = 1
        self.flows: dict[str, _Flow] = {}
        self.max_queues: int | None = None  # configure_server
        self.queue_names: set[str] = set()  # every queue a job was enqueued into

    def migrate(self) -> list[str]:
        """Nothing to create."""
        return []

    def schema_versions(self) -> tuple[int, int] | None:
        """None: nothing to migrate."""
        return None

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = (),
        fresh: Collection[str] = (),
    ) -> list[EnqueueResult]:
        if conn is not None:
            raise ConfigurationError(
                "memory:// has no transactions to join; transactional enqueue needs SQLite, "
                "PostgreSQL or MySQL"
            )
        with self.lock:
            # The check is free here, so every call is checked, whatever ``fresh`` says.
            self._admit({job.queue for job in jobs})
            now = self.clock()
            out = []
            created: list[_Row] = []
            for job in jobs:
                key = (job.queue, job.unique_key) if job.unique_key is not None else None
                # Global keys live under the queue name "", which no queue can have.
                shared = ("", job.unique_key) if job.unique_global and job.unique_key else None
                holder = next((self.unique[k] for k in (shared, key) if k in self.unique),
                              None) if key is not None else None
                if holder is not None:
                    out.append(EnqueueResult(holder, False))
                    continue
                twin = self._recent_twin(shared or key, job.unique_for, now)
                if twin is not None:
                    out.append(EnqueueResult(twin, False))
                    continue
                at = job.run_at.timestamp() if job.run_at else now + job.delay
                row = _Row(self.next_id, job.queue, job.kind, job.payload, job.priority,
                           job.max_attempts, job.unique_key, at, now, lease=job.lease,
                           headers=job.headers, global_key=shared is not None,
                           tags=job.tags)
                self.next_id += 1
                self.live[row.id] = row
                created.append(row)
                if key is not None:
                    self.unique[key] = row.id
                if shared is not None:
                    self.unique[shared] = row.id
                out.append(EnqueueResult(row.id, True))
            # The check is free here, so every queue is checked, whatever ``capped`` says.
            for queue in {row.queue for row in created}:
                cap = self.settings.get(queue, {}).get("max_jobs")
                if cap is not None and sum(r.queue == queue for r in self.live.values()) > cap:
                    for row in created:  # all or nothing, as a rolled-back transaction
                        del self.live[row.id]
                        if row.unique_key is not None:
                            self.unique.pop((row.queue, row.unique_key), None)
                            if row.global_key:
                                self.unique.pop(("", row.unique_key), None)
                    raise QueueFull(
                        f"queue {queue!r} holds its max_jobs={cap} live jobs; nothing was "
                        "enqueued"
                    )
            return out

    def _admit(self, queues: Collection[str]) -> None:
        """Counts ``queues``, or raises ``TooManyQueues`` (nothing changed) when the new
        ones would make more than ``max_queues``."""
        if self.max_queues is not None:
            known = self._known_queues()
            new = sorted(set(queues) - known)
            if new and len(known) + len(new) > self.max_queues:
                raise TooManyQueues(
                    f"queue {new[0]!r} would be queue {len(known) + 1} of at most "
                    f"max_queues={self.max_queues}; nothing was enqueued")
        self.queue_names.update(queues)

    def _recent_twin(
        self, key: tuple[str, str] | None, unique_for: float | None, now: float
    ) -> int | None:
        if key is None or not unique_for:
            return None
        job_id = self.finished_keys.get(key)
        h = self.history.get(job_id) if job_id is not None else None
        if h is not None and (h.finished_at or 0) > now - unique_for:
            return h.id
        return None

    def _setting(self, queue: str, name: str) -> Any:
        return self.settings.get(queue, {}).get(name)

    def _tokens(self, queue: str, now: float) -> float:
        tokens, at = self.buckets.get(queue, (None, None))
        return limits.tokens_now(self._setting(queue, "rate_per_sec"),
                                 self._setting(queue, "rate_burst"), tokens,
                                 None if at is None else now - at)

    def _running(self, queue: str) -> int:
        return sum(r.queue == queue and r.state == "running" for r in self.live.values())

    def _allowance(self, queue: str, limit: int, now: float) -> int:
        concurrency = self._setting(queue, "concurrency_limit")
        rate = self._setting(queue, "rate_per_sec")
        if concurrency is None and rate is None:
            return limit
        return limits.allowance(limit, concurrency,
                                self._running(queue) if concurrency is not None else 0,
                                rate, self._tokens(queue, now) if rate is not None else None)

    def due_now(self, queues: Sequence[str]) -> bool:
        with self.lock:
            now = self.clock()
            wanted = set(queues) - self._paused(now)
            return any(r.queue in wanted and r.state == "available" and r.available_at <= now
                       for r in self.live.values())

    def next_due(self, queues: Sequence[str]) -> float | None:
        with self.lock:
            now = self.clock()
            best: float | None = None
            for queue in set(queues) - self._paused(now, timed=False):
                times = [r.available_at for r in self.live.values()
                         if r.queue == queue and r.state == "available"]
                rate = self._setting(queue, "rate_per_sec")
                wait = limits.next_start(
                    min(times) - now if times else None, self._running(queue),
                    self._setting(queue, "concurrency_limit"), rate,
                    self._tokens(queue, now) if rate is not None else None)
                wait = limits.after_pause(wait, self.pauses.get(queue, now) - now)
                if wait is not None and (best is None or wait < best):
                    best = wait
            return best

    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        lease: float | None,
        limit: int,
        default_lease: float = 30.0,
        limited: Collection[str] = (),
    ) -> list[Job]:
        # The limits are checked for every queue (it is free here), whatever ``limited``.
        with self.lock:
            now = self.clock()
            wanted = set(queues) - self._paused(now)
            takes = {q: self._allowance(q, limit, now) for q in wanted}
            due = (r for r in self.live.values()
                   if r.state == "available" and r.queue in wanted and r.available_at <= now)
            order = lambda r: (-r.priority, r.available_at, r.id)  # noqa: E731
            if all(take >= limit for take in takes.values()):
                picked = heapq.nsmallest(limit, due, key=order)
            else:
                picked = []
                for r in sorted(due, key=order):
                    if len(picked) == limit:
                        break
                    if takes[r.queue] > 0:
                        takes[r.queue] -= 1
                        picked.append(r)
            for queue in {r.queue for r in picked}:
                if self._setting(queue, "rate_per_sec") is not None:
                    started = sum(r.queue == queue for r in picked)
                    self.buckets[queue] = (self._tokens(queue, now) - started, now)
            jobs = []
            for r in picked:
                settings = self.settings.get(r.queue, {})
                seconds = lease if lease is not None else (
                    r.lease if r.lease is not None else
                    settings.get("default_lease") or default_lease)
                if settings.get("max_lease") is not None:
                    seconds = min(seconds, settings["max_lease"])
                r.state, r.worker_id = "running", worker_id
                r.attempts += 1
                r.reserves += 1
                r.lease_token += 1
                r.lease_until = now + seconds
                r.touches, r.leased_at, r.touched_at = 0, now, None
                r.updated_at = now
                r.started_at = r.started_at if r.started_at is not None else now
                payload, headers = claimed(r.payload, r.headers)
                jobs.append(Job(
                    id=r.id, queue=r.queue, kind=r.kind, payload=payload,
                    priority=r.priority, attempts=r.attempts, max_attempts=r.max_attempts,
                    unique_key=r.unique_key, lease_token=r.lease_token,
                    lease_until=_dt(r.lease_until), worker_id=worker_id,  # type: ignore[arg-type]
                    created_at=_dt(r.created_at), lease=seconds,  # type: ignore[arg-type]
                    headers=headers, available_at=_dt(r.available_at),
                    reserves=r.reserves, releases=r.releases, timeouts=r.timeouts,
                    tags=stored_tags(r.tags), snoozes=r.snoozes,
                ))
            return jobs

    def _paused(self, now: float, timed: bool = True) -> set[str]:
        """The queues paused at ``now``; only the indefinite ones without ``timed``."""
        return {queue for queue, until in self.pauses.items()
                if until > now and (timed or until == math.inf)}

    def _held(self, job_id: int, token: int) -> _Row:
        r = self.live.get(job_id)
        if r is None or r.state != "running" or r.lease_token != token:
            raise LeaseLost.stale(job_id, token)
        return r

    def _holding(self, job_id: int, token: int) -> _Row | None:
        """The job when lease ``token`` holds it, else None."""
        r = self.live.get(job_id)
        if r is None or r.state != "running" or r.lease_token != token:
            return None
        return r

    def _repeat(self, job_id: int, token: int, verb: Verb) -> JobState:
        """What the call of ``verb`` that ended lease ``token`` returned, when that lease
        is the job's last ended one (a repeat after a lost reply); else ``LeaseLost``."""
        r = self.live.get(job_id) or self.history.get(job_id)
        state = None
        if r is not None and r.state != "completed":  # an ack ended a completed job's lease
            state = repeated(verb, token, r.ended_token, r.ended_as)
        if state is None:
            raise LeaseLost.stale(job_id, token)
        return state

    @staticmethod
    def _ended(r: _Row, how: str) -> None:
        """Records how ``r``'s current lease ended."""
        r.ended_token, r.ended_as = r.lease_token, how

    def _touch(self, r: _Row, extend: float) -> TouchLimitExceeded | None:
        """Extends ``r``'s lease within its queue's touch limits, or says why not."""
        now = self.clock()
        settings = self.settings.get(r.queue, {})
        max_touches = settings.get("max_touches")
        if max_touches is not None and r.touches >= max_touches:
            return TouchLimitExceeded(
                f"job {r.id}: lease {r.lease_token} was extended {r.touches} times, the "
                f"queue's max_touches; it will run out"
            )
        max_duration = settings.get("max_touch_duration")
        began = r.leased_at if r.leased_at is not None else now
        if max_duration is not None and now - began > max_duration:
            return TouchLimitExceeded(
                f"job {r.id}: lease {r.lease_token} began {now - began:.3f} s ago, past the "
                f"queue's max_touch_duration of {max_duration} s; it will run out"
            )
        interval = settings.get("min_touch_interval")
        last = r.touched_at if r.touched_at is not None else began
        if interval is not None and now - last < interval:
            return None  # touched a moment ago: the lease stands as it is
        if settings.get("max_lease") is not None:
            extend = min(extend, settings["max_lease"])
        r.lease_until, r.touched_at = now + extend, now
        r.touches += 1
        return None

    def renew(self, job_id: int, token: int, extend: float) -> datetime:
        with self.lock:
            r = self._held(job_id, token)
            refused = self._touch(r, extend)
            if refused is not None:
                raise refused
            until = _dt(r.lease_until)
            assert until is not None
            if r.cancel_requested:
                raise JobCancelled(f"job {job_id} was cancelled; stop work and release or nack it")
            return until

    def _archive(
        self, r: _Row, state: JobState, result: str | None, error: str | None,
        detail: str | None = None,
    ) -> None:
        del self.live[r.id]
        now = self.clock()
        if r.unique_key is not None:
            self.unique.pop((r.queue, r.unique_key), None)
            self.finished_keys[(r.queue, r.unique_key)] = r.id
            # A global enqueue's unique_for looks at finished jobs of the key in every queue.
            self.finished_keys[("", r.unique_key)] = r.id
            if r.global_key and self.unique.get(("", r.unique_key)) == r.id:
                del self.unique[("", r.unique_key)]
        if state == "completed":
            error = detail = None
        elif error is None:
            error, detail = r.error, r.error_detail
        self.history[r.id] = replace(r, state=state, result=result, error=error,
                                     error_detail=detail,
                                     finished_at=now, updated_at=now, lease_until=None,
                                     cancel_requested=False)

    def complete(self, job_id: int, token: int, result: str | None, conn: Any = None) -> None:
        if conn is not None:
            raise ConfigurationError("memory:// has no transactions to join")
        with self.lock:
            if self._completed_by(job_id, token):
                return  # a repeated ack of this very lease: already done
            self._archive(self._held(job_id, token), "completed", result, None)

    def _completed_by(self, job_id: int, token: int) -> bool:
        h = self.history.get(job_id)
        return h is not None and h.state == "completed" and h.lease_token == token

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> list[bool]:
        with self.lock:
            done = []
            for job_id, token, result in items:
                r = self.live.get(job_id)
                ok = r is not None and r.state == "running" and r.lease_token == token
                if ok:
                    self._archive(r, "completed", result, None)  # type: ignore[arg-type]
                done.append(ok or self._completed_by(job_id, token))
            return done

    def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], capped: Collection[str] = (),
        conn: Any = None, fresh: Collection[str] = (),
    ) -> list[EnqueueResult]:
        with self.lock:
            counted = set(self.queue_names)
            if conn is None:  # else enqueue refuses it below, before any write
                self._admit(flow.queues(jobs))  # later steps too: see Backend.start_flow
            specs = {i: encode_step(step) for i, step in enumerate(flow.steps, start=1)}
            callback = None if flow.then is None else encode_step(flow.then)
            try:
                results = self.enqueue(jobs, conn)  # refuses a conn: no transactions here
            except QueueFull:
                self.queue_names = counted  # all or nothing, as a rolled-back transaction
                raise
            first = results[0].id if flow.kind == "chain" else None
            self.flows[flow.flow_id] = _Flow(
                FlowState(flow.flow_id, flow.kind, flow.size, flow.size, 0, first),
                self.clock(), specs, callback, {})
            return results

    def complete_steps(self, items: Sequence[StepItem]) -> list[bool]:
        with self.lock:
            return [self._complete_step(*item) for item in items]

    def _complete_step(
        self, job_id: int, token: int, result: str | None, link: FlowLink
    ) -> bool:
        with self.lock:
            r = self.live.get(job_id)
            if r is None or r.state != "running" or r.lease_token != token:
                return self._completed_by(job_id, token)
            flow = self.flows.get(link.flow_id)
            if flow is None or flow.state.remaining <= 0:
                raise BackendError(f"job {job_id} names flow {link.flow_id}, which is not "
                                   "stored or already complete")
            self._archive(r, "completed", result, None)
            state = replace(flow.state, remaining=flow.state.remaining - 1)
            follow = None
            if link.kind == "chain":
                spec = flow.specs.get(link.index + 1)
                if spec is not None:
                    follow = decode_step(spec, result)
                    state = replace(state, step=link.index + 1)
            else:
                flow.results[link.index] = result
                if state.remaining == 0 and flow.callback is not None:
                    ordered = [flow.results[i] for i in sorted(flow.results)]
                    follow = decode_step(flow.callback, joined(ordered))
            if follow is not None:
                # Counted when the flow started; a recount since (configure_server) must
                # not refuse it now, with the step already completed.
                self.queue_names.add(follow.queue)
                state = replace(state, job_id=self.enqueue([follow])[0].id)
            flow.state = state
            return True

    def get_flow(self, flow_id: str) -> FlowState | None:
        with self.lock:
            flow = self.flows.get(flow_id)
            return None if flow is None else flow.state

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> list[RenewOutcome]:
        with self.lock:
            out: list[RenewOutcome] = []
            for job_id, token, extend in items:
                r = self.live.get(job_id)
                if r is None or r.state != "running" or r.lease_token != token:
                    out.append(None)
                    continue
                refused = self._touch(r, extend)
                out.append(refused or (_dt(r.lease_until), r.cancel_requested))  # type: ignore[arg-type]
            return out

    @staticmethod
    def _set_error(r: _Row, error: str | None, detail: str | None) -> None:
        """A new error replaces the text and the detail; no error keeps both."""
        if error is not None:
            r.error, r.error_detail = error, detail

    def _reschedule(
        self, r: _Row, delay: float, error: str | None, detail: str | None = None
    ) -> JobState:
        now = self.clock()
        r.state, r.lease_until, r.updated_at = "available", None, now
        r.available_at = now + delay
        self._set_error(r, error, detail)
        return "scheduled" if delay > 0 else "available"

    def _to_dead(self, r: _Row, error: str | None, detail: str | None = None) -> None:
        r.state, r.lease_until, r.updated_at = "dead", None, self.clock()
        r.buries += 1
        self._set_error(r, error, detail)

    def fail(
        self, job_id: int, token: int, error: str | None, delay: float,
        detail: str | None = None,
    ) -> JobState:
        with self.lock:
            r = self._holding(job_id, token)
            if r is None:
                return self._repeat(job_id, token, "nack")
            r.failed_at = self.clock()
            state: JobState = ("cancelled" if r.cancel_requested
                               else "dead" if r.attempts >= r.max_attempts
                               else "scheduled" if delay > 0 else "available")
            self._ended(r, ended_as("nack", state))  # before _archive copies the row
            if state == "cancelled":
                self._archive(r, "cancelled", None, error, detail)
            elif state == "dead":
                self._to_dead(r, error, detail)
            else:
                self._reschedule(r, delay, error, detail)
            return state

    def fail_many(self, items: Sequence[FailItem]) -> list[JobState | None]:
        with self.lock:  # one lock hold: all or nothing is seen, as one transaction
            out: list[JobState | None] = []
            for job_id, token, error, delay, detail in items:
                try:
                    out.append(self.fail(job_id, token, error, delay, detail))
                except LeaseLost:
                    out.append(None)
            return out

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None,
        error: str | None = None, detail: str | None = None,
    ) -> JobState:
        with self.lock:
            r = self._holding(job_id, token)
            if r is None:
                return self._repeat(job_id, token, "release")
            if r.cancel_requested:
                self._ended(r, ended_as("release", "cancelled"))
                self._archive(r, "cancelled", None, None)
                return "cancelled"
            r.attempts -= 1
            r.releases += 1
            if priority is not None:
                r.priority = priority
            state = self._reschedule(r, delay, error, detail)
            self._ended(r, ended_as("release", state))
            return state

    def snooze(
        self, job_id: int, token: int, delay: float, scope: SnoozeScope = "job"
    ) -> JobState:
        with self.lock:
            try:
                r = self._held(job_id, token)
            except LeaseLost:
                return self._repeat(job_id, token, "snooze")
            now = self.clock()
            if scope == "queue":
                # Only extends: an indefinite pause (inf) or a later end stays.
                self.pauses[r.queue] = max(self.pauses.get(r.queue, now), now + delay)
                self.settings.setdefault(r.queue, {})
            if r.cancel_requested:
                self._ended(r, ended_as("snooze", "cancelled"))  # before _archive copies it
                self._archive(r, "cancelled", None, None)
                return "cancelled"
            cap = self._setting(r.queue, "max_snoozes")
            if cap is not None and r.snoozes >= cap:
                self._to_dead(r, limits.snoozed_too_often(r.snoozes, cap))
                self._ended(r, ended_as("snooze", "dead"))
                return "dead"
            r.attempts -= 1
            r.snoozes += 1
            state = self._reschedule(r, delay, None)
            self._ended(r, ended_as("snooze", state))
            return state

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None,
        detail: str | None = None,
    ) -> None:
        with self.lock:
            r = self._holding(job_id, token)
            if r is None:
                self._repeat(job_id, token, "bury")
                return
            if priority is not None:
                r.priority = priority
            self._to_dead(r, reason, detail)
            self._ended(r, ended_as("bury", "dead"))

    def _revive(self, r: _Row) -> None:
        """dead → available now, with a fresh round of attempts."""
        now = self.clock()
        r.state, r.attempts, r.available_at, r.updated_at = "available", 0, now, now
        r.kicks += 1
        r.snoozes = 0

    def kick(self, queue: str, limit: int) -> int:
        with self.lock:
            dead = sorted((r for r in self.live.values() if r.queue == queue and r.state == "dead"),
                          key=_kick_order)[:limit]
            for r in dead:
                self._revive(r)
            return len(dead)

    def _state(self, r: _Row) -> JobState:
        if r.state == "available" and r.available_at > self.clock():
            return "scheduled"
        return r.state  # type: ignore[return-value]

    def _refuse(self, job_id: int, action: str, allowed: str) -> JobStateError | JobNotFound:
        r = self.live.get(job_id) or self.history.get(job_id)
        if r is None:
            return JobNotFound(f"no job with id {job_id}")
        return JobStateError(
            f"cannot {action} job {job_id}: it is {self._state(r)}; {action} works on "
            f"{allowed} jobs"
        )

    def retry(self, job_id: int) -> None:
        with self.lock:
            r = self.live.get(job_id)
            if r is None or self._state(r) not in ("dead", "scheduled"):
                raise self._refuse(job_id, "retry", "dead or scheduled")
            if r.state == "dead":
                self._revive(r)
            else:
                r.available_at = r.updated_at = self.clock()

    def discard(self, job_id: int, reason: str | None) -> None:
        with self.lock:
            r = self.live.get(job_id)
            if r is None or r.state not in ("available", "dead"):
                raise self._refuse(job_id, "discard", "dead, scheduled or available")
            error, detail = discard_record(reason, r.error, stored(r.error_detail))
            self._archive(r, "discarded", None, error, detail)

    def cancel(self, job_id: int) -> JobState:
        with self.lock:
            r = self.live.get(job_id)
            if r is None:
                h = self.history.get(job_id)
                if h is None:
                    raise JobNotFound(f"no job with id {job_id}")
                return h.state  # type: ignore[return-value]
            if r.state == "running":
                r.cancel_requested = True
                return "running"
            self._archive(r, "cancelled", None, "cancelled")
            return "cancelled"

    def get(self, job_id: int) -> JobInfo:
        with self.lock:
            r = self.live.get(job_id) or self.history.get(job_id)
            if r is None:
                raise JobNotFound(f"no job with id {job_id}")
            return self._info(r)

    def _info(self, r: _Row) -> JobInfo:
        live = r.finished_at is None
        return JobInfo(
            id=r.id, queue=r.queue, kind=r.kind, state=self._state(r),
            payload=stored(r.payload), priority=r.priority, attempts=r.attempts,
            max_attempts=r.max_attempts, unique_key=r.unique_key,
            available_at=_dt(r.available_at) if live else None,
            lease_until=_dt(r.lease_until), worker_id=r.worker_id,
            created_at=_dt(r.created_at), started_at=_dt(r.started_at),  # type: ignore[arg-type]
            finished_at=_dt(r.finished_at), result=stored(r.result), error=r.error,
            cancel_requested=r.cancel_requested, reserves=r.reserves, timeouts=r.timeouts,
            releases=r.releases, buries=r.buries, kicks=r.kicks, failed_at=_dt(r.failed_at),
            updated_at=_dt(r.updated_at if r.updated_at is not None else r.created_at),
            lease=r.lease, headers=stored(r.headers),
            error_detail=error_detail(r.error, stored(r.error_detail)),
            tags=stored_tags(r.tags), snoozes=r.snoozes,
        )

    def stats(self) -> dict[str, QueueStats]:
        with self.lock:
            now = self.clock()
            counts: dict[str, dict[str, Any]] = {q: {} for q in self.settings}
            for r in [*self.live.values(), *self.history.values()]:
                c = counts.setdefault(r.queue, {})
                state = self._state(r)
                c[state] = c.get(state, 0) + 1
                if state == "available":
                    age = now - r.available_at
                    c["oldest_available_age"] = max(age, c.get("oldest_available_age", age))
            for queue in self._paused(now):
                until = self.pauses[queue]
                counts.setdefault(queue, {}).update(
                    paused=True, paused_until=None if until == math.inf else _dt(until))
            return {q: QueueStats(queue=q, **c) for q, c in sorted(counts.items())}

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int,
        kind: str | None = None, unique_key: str | None = None, tag: str | None = None,
    ) -> list[JobInfo]:
        # A scan of every job, as for the other filters: the memory backend is for tests.
        quoted = None if tag is None else f'"{tag}"'
        with self.lock:
            rows = sorted(
                (r for r in [*self.live.values(), *self.history.values()]
                 if r.id > after and (queue is None or r.queue == queue)
                 and (kind is None or r.kind == kind)
                 and (unique_key is None or r.unique_key == unique_key)
                 and (quoted is None or (r.tags is not None and quoted in r.tags))
                 and (state is None or self._state(r) == state)),
                key=lambda r: r.id,
            )
            return [self._info(r) for r in rows[:limit]]

    def peek(self, queue: str, state: PeekState, limit: int) -> list[JobInfo]:
        with self.lock:
            rows = [r for r in self.live.values() if r.queue == queue and self._state(r) == state]
            if state == "available":
                rows.sort(key=lambda r: (-r.priority, r.available_at, r.id))
            elif state == "scheduled":
                rows.sort(key=lambda r: (r.available_at, r.id))
            else:
                rows.sort(key=_kick_order)
            return [self._info(r) for r in rows[:limit]]

    def priority_counts(self, queue: str) -> dict[int, int]:
        with self.lock:
            counts: dict[int, int] = {}
            for r in self.live.values():
                if r.queue == queue and self._state(r) == "available":
                    counts[r.priority] = counts.get(r.priority, 0) + 1
            return dict(sorted(counts.items(), reverse=True))

    def set_paused(self, queue: str, paused: bool, until: PauseEnd = None) -> None:
        with self.lock:
            if not paused:
                self.pauses.pop(queue, None)
            elif until is None:
                self.pauses[queue] = math.inf
            elif isinstance(until, datetime):
                self.pauses[queue] = until.timestamp()
            else:
                self.pauses[queue] = self.clock() + until
            self.settings.setdefault(queue, {})

    def configure_queue(
        self, queue: str, changes: Mapping[str, int | float | None]
    ) -> QueueConfig:
        with self.lock:
            stored = self.settings.setdefault(queue, {})
            for name, value in changes.items():
                if name not in QUEUE_SETTINGS:
                    raise InvalidArgument(f"unknown queue setting {name!r}")
                if value is None:
                    stored.pop(name, None)
                else:
                    stored[name] = value
            return QueueConfig(queue, **stored)

    def queue_configs(self) -> dict[str, QueueConfig]:
        with self.lock:
            return {q: QueueConfig(q, **c) for q, c in sorted(self.settings.items())}

    def _known_queues(self) -> set[str]:
        return self.queue_names | self.settings.keys() | self.pauses.keys()

    def configure_server(self, changes: Mapping[str, int | None]) -> ServerConfig:
        with self.lock:
            if "max_queues" in changes:
                self.max_queues = changes["max_queues"]
                # Counted afresh, as the SQL backends do: pruned queues drop out.
                self.queue_names = {r.queue for r in [*self.live.values(),
                                                      *self.history.values()]}
            return self.server_config()

    def server_config(self) -> ServerConfig:
        with self.lock:
            if self.max_queues is None:
                return ServerConfig()
            return ServerConfig(self.max_queues, len(self._known_queues()))

    def server_version(self) -> str:
        return f"in-process (Python {platform.python_version()})"

    def oldest_transaction_age(self) -> float | None:
        return None

    def paused(self) -> list[str]:
        with self.lock:
            return sorted(self._paused(self.clock()))

    def reclaim(self, limit: int) -> int:
        with self.lock:
            now = self.clock()
            expired = sorted(
                (r for r in self.live.values()
                 if r.state == "running" and r.lease_until is not None and r.lease_until <= now),
                key=lambda r: r.lease_until or 0,
            )[:limit]
            for r in expired:
                r.timeouts += 1
                r.failed_at = now
                self._ended(r, EXPIRED)
                if r.cancel_requested:
                    self._archive(r, "cancelled", None, "lease expired")
                elif r.attempts >= r.max_attempts:
                    self._to_dead(r, "lease expired")
                else:
                    r.state, r.lease_until, r.error = "available", None, "lease expired"
                    r.error_detail = None
                    r.available_at = r.updated_at = now
            return len(expired) + self._discard_old_dead(now, limit)

    def _discard_old_dead(self, now: float, limit: int) -> int:
        """Dead jobs past their queue's ``dead_retention`` → discarded (history)."""
        old = sorted(
            (r for r in self.live.values()
             if r.state == "dead" and self._setting(r.queue, "dead_retention") is not None
             and (r.updated_at or r.created_at) < now - self._setting(r.queue, "dead_retention")),
            key=lambda r: (r.updated_at or r.created_at, r.id),  # longest dead first
        )[:limit]
        for r in old:
            self._archive(r, "discarded", None, None)
        return len(old)

    def prune(self, older_than: float) -> int:
        with self.lock:
            cutoff = self.clock() - older_than
            old = [i for i, r in self.history.items() if (r.finished_at or 0) < cutoff]
            for job_id in old:
                del self.history[job_id]
            for flow_id in [f for f, flow in self.flows.items()
                            if flow.state.remaining == 0 and flow.created < cutoff]:
                del self.flows[flow_id]
            return len(old)

    def close(self) -> None:
        """Nothing to close."""


class AsyncMemoryBackend:
    """``MemoryBackend`` behind the async contract; its calls never block, so they run
    on the event loop directly."""

    name = "memory"
    supports_transactions = False

    def __init__(self, sync: MemoryBackend | None = None) -> None:
        self.sync = sync or MemoryBackend()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)  # a real suspension point, as every other backend has
            return method(*args, **kwargs)

        return call
