"""Chains and groups of task calls, each step exactly once (docs/workflows.md).

    leaseq.chain(fetch.s(url), parse.s(), store.s()).enqueue()
    leaseq.group(resize.s(img, 64), resize.s(img, 128)).then(notify.s()).enqueue()

``task.s(*args, **kwargs)`` makes a ``Signature``: a call to enqueue later. In a chain each
step after the first receives the previous step's result as its first argument; a group's
members run in parallel and its ``then`` callback receives their results, in member order,
as its first argument. The signatures that receive a result are bound without their first
parameter, so a call the function would refuse is refused at once.

Nothing here runs a step: the jobs carry a ``leaseq-flow`` header, and their acks go
through ``Backend.complete_steps``, which enqueues what follows in the same transaction
(SQL) or script (Redis) as the completion. A worker killed at any point can therefore
neither lose nor duplicate a step: until the completion commits, the step stays leased
and runs again after its lease expires; once it commits, the follow-up exists too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from leaseq._core.flow import FlowKind, FlowLink, FlowState
from leaseq.backends.base import FlowStep, NewFlow, NewJob
from leaseq.errors import ConfigurationError, InvalidArgument, JobNotFound
from leaseq.tasks import App
from leaseq.tasks import Signature as Signature  # its home is tasks.py (docs/design.md §34)

if TYPE_CHECKING:
    from leaseq._aclient import AsyncQueue
    from leaseq._client import Queue

def chain(*steps: Signature) -> Chain:
    """Steps run one after another, each receiving the previous step's result as its first
    argument: ``chain(fetch.s(url), parse.s(), store.s()).enqueue()``."""
    _check(steps, "chain")
    return Chain(tuple(steps))


def group(*members: Signature) -> Group:
    """Members run in parallel: ``group(a.s(1), a.s(2)).then(total.s()).enqueue()``."""
    _check(members, "group")
    return Group(tuple(members))


def _check(signatures: Sequence[Signature], what: str) -> None:
    if not signatures:
        raise InvalidArgument(f"a {what} needs at least one signature")
    for sig in signatures:
        if not isinstance(sig, Signature):
            raise InvalidArgument(f"a {what} takes signatures (task.s(...)), got {sig!r}")


def _app_of(signatures: Sequence[Signature], what: str) -> App:
    _check(signatures, what)
    app = signatures[0].bound.task.app
    if any(sig.bound.task.app is not app for sig in signatures):
        raise ConfigurationError(f"every task of a {what} must belong to the same App")
    if app.eager:
        raise ConfigurationError(f"a {what} cannot run in inline (eager) mode; drain a "
                                 "memory:// queue with leaseq.testing instead")
    return app


@dataclass(frozen=True)
class Chain:
    """Steps run in order; made by ``leaseq.chain``."""

    steps: tuple[Signature, ...]

    def _plan(self, queue: Queue | AsyncQueue) -> tuple[NewFlow, NewJob]:
        flow_id = uuid.uuid4().hex
        jobs = []
        for i, sig in enumerate(self.steps):
            after = self.steps[i + 1].bound.opts.queue if i + 1 < len(self.steps) else None
            jobs.append(sig.new_job(queue, i > 0, FlowLink(flow_id, "chain", i, after)))
        steps = [FlowStep(job, sig.first_parameter)
                 for job, sig in zip(jobs[1:], self.steps[1:], strict=True)]
        return NewFlow(flow_id, "chain", len(jobs), steps), jobs[0]

    def _decoders(self) -> list[Callable[[Any], Any]]:
        return [self.steps[-1].bound.task.decode_result]

    def enqueue(self, *, conn: Any = None) -> FlowResult:
        """Stores the chain and enqueues its first step, in one transaction.

        Args:
            conn: Your own DB-API connection (as ``Queue.enqueue``'s): the chain is
                written in your transaction and exists only if you commit.
        """
        q = _app_of(self.steps, "chain").queue
        q._fresh_configs()  # a queue's stored max_attempts is each job's default
        flow, first = self._plan(q)
        [result] = q._start_flow(flow, [first], conn)
        return FlowResult(flow.flow_id, "chain", flow.size, (result.id,),
                          self.steps[0].bound.task.app, self._decoders())

    async def enqueue_async(self, *, conn: Any = None) -> FlowResult:
        """``enqueue`` for asyncio code (the app's ``async_queue``)."""
        app = _app_of(self.steps, "chain")
        await app.async_queue._fresh_configs()
        flow, first = self._plan(app.async_queue)
        [result] = await app.async_queue._start_flow(flow, [first], conn)
        return FlowResult(flow.flow_id, "chain", flow.size, (result.id,), app,
                          self._decoders())


@dataclass(frozen=True)
class Group:
    """Members run in parallel, then an optional callback; made by ``leaseq.group``."""

    members: tuple[Signature, ...]
    callback: Signature | None = None

    def then(self, callback: Signature) -> Group:
        """The group with ``callback`` enqueued once every member completed, receiving
        the list of their results (in member order) as its first argument."""
        if not isinstance(callback, Signature):
            raise InvalidArgument(f"then takes a signature (task.s(...)), got {callback!r}")
        callback.arguments(receives=True)  # refused now, not when the group completes
        return replace(self, callback=callback)

    def _decoders(self) -> list[Callable[[Any], Any]]:
        if self.callback is not None:
            return [self.callback.bound.task.decode_result]
        return [sig.bound.task.decode_result for sig in self.members]

    def _signatures(self) -> list[Signature]:
        return [*self.members, *([self.callback] if self.callback is not None else [])]

    def _plan(self, queue: Queue | AsyncQueue) -> tuple[NewFlow, list[NewJob]]:
        flow_id = uuid.uuid4().hex
        after = self.callback.bound.opts.queue if self.callback is not None else None
        jobs = [sig.new_job(queue, False, FlowLink(flow_id, "group", i, after))
                for i, sig in enumerate(self.members)]
        then = None
        if self.callback is not None:
            job = self.callback.new_job(queue, True, None)  # last in line: a plain ack
            then = FlowStep(job, self.callback.first_parameter)
        return NewFlow(flow_id, "group", len(jobs), then=then), jobs

    def enqueue(self, *, conn: Any = None) -> FlowResult:
        """Stores the group and enqueues its members, in one transaction (yours, with
        ``conn``, as ``Chain.enqueue``)."""
        q = _app_of(self._signatures(), "group").queue
        q._fresh_configs()
        flow, jobs = self._plan(q)
        results = q._start_flow(flow, jobs, conn)
        return FlowResult(flow.flow_id, "group", flow.size, tuple(r.id for r in results),
                          self.members[0].bound.task.app, self._decoders(),
                          then=self.callback is not None)

    async def enqueue_async(self, *, conn: Any = None) -> FlowResult:
        """``enqueue`` for asyncio code (the app's ``async_queue``)."""
        app = _app_of(self._signatures(), "group")
        await app.async_queue._fresh_configs()
        flow, jobs = self._plan(app.async_queue)
        results = await app.async_queue._start_flow(flow, jobs, conn)
        return FlowResult(flow.flow_id, "group", flow.size, tuple(r.id for r in results),
                          app, self._decoders(), then=self.callback is not None)


class FlowResult:
    """What ``enqueue`` of a chain or group returns: the flow's id and a way to wait for
    its outcome.

    Attributes:
        flow_id: The flow's id (32 hex digits).
        kind: ``"chain"`` or ``"group"``.
        size: Steps of the chain, members of the group.
        job_ids: The jobs enqueued at once: the chain's first step, the group's members.
    """

    def __init__(self, flow_id: str, kind: FlowKind, size: int, job_ids: tuple[int, ...],
                 app: App, decoders: Sequence[Callable[[Any], Any]], *,
                 then: bool = False) -> None:
        self.flow_id, self.kind, self.size, self.job_ids = flow_id, kind, size, job_ids
        self._app = app
        # Task.decode_result of what wait returns: the last step's or the callback's task,
        # or each member's; stored results are JSON, rebuilt as EnqueueResult.wait does.
        self._decoders = tuple(decoders)
        self._then = then

    def __repr__(self) -> str:
        return f"<FlowResult {self.kind} {self.flow_id} size={self.size}>"

    def state(self) -> FlowState:
        """The flow as stored now: how many steps or members remain, the chain's current
        step, the group callback's job id."""
        return self._found(self._app.queue._flow_state(self.flow_id))

    async def state_async(self) -> FlowState:
        """``state`` for asyncio code."""
        return self._found(await self._app.async_queue._flow_state(self.flow_id))

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the flow finished and return its outcome: the last step's result
        (chain), the callback's result (group with ``then``), or the list of member results
        in member order (group). Waits as ``Queue.wait`` does, job after job.

        Raises:
            JobFailed: A step, member or callback went dead, was cancelled or discarded:
                the flow stops there (a kicked or retried step carries it on).
            TimeoutError: ``timeout`` seconds passed first; the flow carries on.
        """
        q = self._app.queue
        clock = _Deadline(timeout)
        if self.kind == "group":
            results = [q.wait(job_id, clock.left()) for job_id in self.job_ids]
            if not self._then:
                return self._decoded(results)
        waited, lag = None, _Lag(self.flow_id, clock)
        while True:
            # The completion of the job waited for enqueued the next one in its own
            # transaction, so the flow names it by now; on Redis Cluster a moment later
            # (docs/workflows.md), which the JobNotFound of a follow-up not yet recorded
            # or written waits out.
            try:
                job_id, last = self._next(self.state(), waited)
                result = q.wait(job_id, clock.left())
            except JobNotFound as exc:
                time.sleep(lag.pause(exc))
                continue
            if last:
                return self._decoders[-1](result)
            waited = job_id

    async def wait_async(self, timeout: float | None = None) -> Any:
        """``wait`` for asyncio code (``AsyncQueue.wait``)."""
        aq = self._app.async_queue
        clock = _Deadline(timeout)
        if self.kind == "group":
            results = [await aq.wait(job_id, clock.left()) for job_id in self.job_ids]
            if not self._then:
                return self._decoded(results)
        waited, lag = None, _Lag(self.flow_id, clock)
        while True:
            try:
                job_id, last = self._next(await self.state_async(), waited)
                result = await aq.wait(job_id, clock.left())
            except JobNotFound as exc:
                await asyncio.sleep(lag.pause(exc))
                continue
            if last:
                return self._decoders[-1](result)
            waited = job_id

    def _decoded(self, results: list[Any]) -> list[Any]:
        return [decode(r) for decode, r in zip(self._decoders, results, strict=True)]

    def _found(self, state: FlowState | None) -> FlowState:
        if state is None:
            raise JobNotFound(f"no flow with id {self.flow_id}")
        return state

    def _next(self, state: FlowState, waited: int | None) -> tuple[int, bool]:
        """The job to wait for next, and whether it is the flow's last; ``waited`` is
        the chain step whose wait returned last."""
        if self.kind == "chain":
            job_id = state.job_id if state.job_id is not None else self.job_ids[0]
            if job_id == waited:
                raise JobNotFound(f"flow {self.flow_id}: step {state.step} completed, yet "
                                  "no next step is recorded")
            return job_id, state.step == self.size - 1
        if state.job_id is None:
            raise JobNotFound(f"flow {self.flow_id}: every member completed, yet no "
                              "callback is recorded")
        return state.job_id, True


class _Lag:
    """How long ``FlowResult.wait`` waits out a follow-up that is not recorded or written
    yet: on Redis Cluster a step's completion and its follow-up are separate calls, and
    reclaim finishes them after a crash (docs/design.md §45). Elsewhere it
    never happens, and the ``JobNotFound`` is raised after ``LIMIT`` seconds."""

    LIMIT = 30.0

    def __init__(self, flow_id: str, clock: _Deadline) -> None:
        self.flow_id, self.clock = flow_id, clock
        self.end = time.monotonic() + self.LIMIT
        self.step = 0.005

    def pause(self, missing: JobNotFound) -> float:
        """The next pause, backing off to 0.25 s; raises ``missing`` once ``LIMIT``
        passed, ``TimeoutError`` once the wait's timeout did."""
        left = self.clock.left()
        if left is not None and left <= 0:
            raise TimeoutError(f"flow {self.flow_id} did not finish in time")
        if time.monotonic() >= self.end:
            raise missing
        self.step = min(self.step * 2, 0.25)
        return self.step if left is None else min(self.step, left)


class _Deadline:
    """What is left of one overall timeout across the several waits of a flow."""

    def __init__(self, timeout: float | None) -> None:
        self.end = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.monotonic())
