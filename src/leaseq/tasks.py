"""The task API: ``App`` registers functions as tasks; a task enqueues calls of itself.

    app = leaseq.App("postgresql://localhost/app")   # App() alone: LEASEQ_URL, else
                                                     # sqlite:///leaseq.db

    @app.task(queue="emails", max_attempts=5, timeout=60)
    def send_email(to: str, subject: str) -> None: ...

    send_email.enqueue(to="a@b.c", subject="hi")

A job's payload is the call's keyword arguments as a JSON object and its ``kind`` the
task's name. Arguments are bound to the function's signature at enqueue time, so a call
that the function would refuse is refused before anything is written. Arguments and
results annotated with dataclasses, pydantic models, ``datetime`` and a few other types
are stored as JSON and rebuilt before the call (``_typed.py``, docs/typed-payloads.md).

``on_failure`` and ``on_dead`` hooks, per task or for the whole app, are told about failed
attempts and dead jobs (docs/hooks.md). ``App.periodic`` and ``App.schedule`` enqueue a
task's job on a cron or fixed-period schedule, from every worker of the app, once per tick
(docs/schedules.md). ``task.s(...)`` makes a ``Signature``, a call that ``leaseq.flows``
composes into chains and groups (docs/workflows.md).

This module imports nothing above itself: flows.py and schedules.py build on it, never the
other way round (docs/design.md §34, tests/test_layers.py). So ``Signature`` lives here,
and the schedule arithmetic ``App.schedule`` needs lives below, in ``leaseq._core``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from leaseq import _results, _typed
from leaseq._aclient import AsyncQueue
from leaseq._client import Queue
from leaseq._core import backoff as _backoff
from leaseq._core import flow as _flow
from leaseq._core import redact
from leaseq._core import validate as v
from leaseq._core.backoff import Backoff
from leaseq._core.flow import FlowLink
from leaseq._core.job import EnqueueResult, Job, ResultWaiter
from leaseq._core.outcome import Hook
from leaseq._core.settings import Settings
from leaseq._core.url import resolve_url
from leaseq._hooks import FailureHook
from leaseq._shared import UniqueScope
from leaseq.backends.base import NewJob
from leaseq.errors import ConfigurationError, InvalidArgument

if TYPE_CHECKING:
    from leaseq._core.schedule import Schedule

P = ParamSpec("P")
R = TypeVar("R")
UniqueKey = str | Callable[..., str] | None


@dataclass(frozen=True)
class TaskOptions:
    """Per-task defaults, overridable per call with ``Task.options``."""

    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    timeout: float | None = None
    lease: float | None = None
    backoff: Backoff | None = None
    unique_key: UniqueKey = None
    unique_for: float | timedelta | None = None
    unique_scope: UniqueScope = "queue"
    delay: float | timedelta = 0
    run_at: datetime | None = None
    headers: Mapping[str, str] | None = None
    tags: Sequence[str] | None = None


class Task(Generic[P, R]):
    """A function registered with an ``App``. Calling it runs it; ``enqueue`` queues it."""

    def __init__(
        self,
        app: App,
        fn: Callable[P, R],
        name: str,
        options: TaskOptions,
        *,
        on_failure: FailureHook | None = None,
        on_dead: FailureHook | None = None,
    ):
        self.app = app
        self.fn = fn
        self.name = name
        self.defaults = options
        self.signature = inspect.signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        self._hooks: dict[Hook, FailureHook | None] = {
            "on_failure": _hook("on_failure", on_failure), "on_dead": _hook("on_dead", on_dead)
        }
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.defaults.queue!r}>"

    @property
    def lease(self) -> float:
        """Lease length its jobs are held and renewed with."""
        return self.defaults.lease or self.app.settings.lease

    @property
    def backoff(self) -> Backoff:
        """The task's own retry delays, else the app's default (``Settings.backoff``).
        A worker retries with ``retry_backoff``, which lets a queue's stored backoff come
        between the two."""
        return self.defaults.backoff or self.app.settings.backoff

    def retry_backoff(self, job: Job) -> Backoff | None:
        """The retry delays given for ``job``: by ``options(backoff=...)`` when it was
        enqueued, else by ``@app.task(backoff=...)``; None when neither gave any, and then
        the queue's stored backoff applies, else the app's (``Queue.nack``)."""
        return _backoff.from_header(job.headers) or self.defaults.backoff

    @property
    def on_failure(self) -> FailureHook | None:
        """Called as ``fn(job, exc)`` after every attempt that failed by raising: the
        task's own hook, else the app's."""
        return self.hook("on_failure")

    @property
    def on_dead(self) -> FailureHook | None:
        """Called as ``fn(job, exc)`` when a failure left the job dead (attempts used up,
        or ``Bury``): the task's own hook, else the app's."""
        return self.hook("on_dead")

    def hook(self, which: Hook) -> FailureHook | None:
        """The ``on_failure`` or ``on_dead`` hook that applies to this task, if any."""
        own = self._hooks[which]
        if own is not None:
            return own
        return self.app.on_failure if which == "on_failure" else self.app.on_dead

    @cached_property
    def conversion(self) -> _typed.Conversion | None:
        """How arguments and result of richer types than JSON's cross the queue, from the
        function's annotations (resolved on first use, once); None when no annotation
        needs converting, and then payloads pass untouched."""
        return _typed.conversion(self.fn, self.name)

    def decode_result(self, value: Any) -> Any:
        """Rebuild a stored result (``JobInfo.result``, plain JSON) into the type the
        function's return annotation names: ``task.decode_result(q.get(id).result)``.

        Raises:
            TypeError: The value does not fit the annotation.
        """
        conversion = self.conversion
        return value if conversion is None else conversion.load_result(value)

    def bind(self, results: list[EnqueueResult]) -> list[EnqueueResult]:
        """``results`` of this task's jobs, fresh from a client, set to wait through the
        task: ``wait``/``wait_async`` then return ``decode_result`` of the stored value."""
        if not results:
            return results
        return _results.bind(results, TaskWaiter(self, results[0].waiter))

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        unique_key: UniqueKey = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        backoff: Backoff | None = None,
        unique_for: float | timedelta | None = None,
        conn: Any = None,
        unique_scope: UniqueScope | None = None,
        tags: Sequence[str] | None = None,
    ) -> BoundTask[P, R]:
        """Per-call overrides: ``send_email.options(delay=300).enqueue(...)``. ``conn``
        enqueues inside your own database transaction; ``headers`` travel with the job
        (``Queue.enqueue``). ``backoff`` is these jobs' retry delays, ahead of the queue's
        stored backoff (it travels as a ``leaseq-backoff`` header). ``unique_for``: a
        job with the same key that finished less than this long ago also stands in for
        the new one (``Queue.enqueue``); it needs a ``unique_key``, here or on the task,
        else the enqueue raises ``InvalidArgument``. ``unique_scope="global"``: the key
        is unique across every queue (``Queue.enqueue``). ``tags`` replace the task's
        tags (``tags=[]``: none), they are not added to them."""
        if backoff is not None and not isinstance(backoff, Backoff):
            raise InvalidArgument(f"{self.name}: backoff must be a leaseq.Backoff, "
                                  f"got {backoff!r}")
        changes: dict[str, Any] = {k: val for k, val in {
            "queue": queue, "priority": priority, "delay": delay, "run_at": run_at,
            "unique_key": unique_key, "max_attempts": max_attempts, "headers": headers,
            "backoff": backoff, "unique_for": unique_for, "unique_scope": unique_scope,
            "tags": tags,
        }.items() if val is not None}
        return BoundTask(self, replace(self.defaults, **changes), conn)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Queue a call with these arguments (checked against the signature now)."""
        return BoundTask(self, self.defaults, None).enqueue(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Mapping[str, Any]]) -> list[EnqueueResult]:
        """Queue many calls, each a dict of keyword arguments, in one round trip."""
        return BoundTask(self, self.defaults, None).enqueue_many(calls)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A call to enqueue later as a step of ``leaseq.chain`` or ``leaseq.group``
        (docs/workflows.md). Arguments are checked against the signature now; a step that
        receives the previous result leaves its first parameter out."""
        return BoundTask(self, self.defaults, None).s(*args, **kwargs)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """``enqueue`` for asyncio code."""
        return await BoundTask(self, self.defaults, None).enqueue_async(*args, **kwargs)

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call as keyword arguments, refused now if the function would refuse it."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgument(f"{self.name}: {exc}") from exc
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
                raise InvalidArgument(
                    f"{self.name}: tasks take keyword arguments only; *{name} and "
                    "positional-only parameters cannot be queued"
                )
            if kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return named


class TaskWaiter:
    """The ``EnqueueResult.waiter`` of a task's jobs: the result decoded by
    ``Task.decode_result``. A blocking ``wait`` goes through the app's ``Queue`` and
    ``wait_async`` through the client that enqueued, so both work whether the job was
    enqueued with ``enqueue`` or ``enqueue_async``."""

    def __init__(self, task: Task[Any, Any], inner: ResultWaiter | None) -> None:
        self.task = task
        self.inner = inner

    def wait(self, job_id: int, timeout: float | None) -> Any:
        return self.task.decode_result(self.task.app.queue.wait(job_id, timeout))

    async def wait_async(self, job_id: int, timeout: float | None) -> Any:
        inner = self.inner or _results.QueueWaiter(self.task.app.queue)
        return self.task.decode_result(await inner.wait_async(job_id, timeout))


class EagerWaiter:
    """The ``EnqueueResult.waiter`` in inline mode (``leaseq.testing.inline``): the task
    already ran, so waiting returns its result at once, stored and read back as a worker
    would (encoded to JSON, then decoded to the annotated type)."""

    def __init__(self, task: Task[Any, Any], value: Any) -> None:
        self.task = task
        self.value = value

    def wait(self, job_id: int, timeout: float | None) -> Any:
        conversion = self.task.conversion
        stored = self.value if conversion is None else conversion.dump_result(self.value)
        text = v.encode(stored, self.task.app.settings.max_payload_bytes, "result")
        return self.task.decode_result(v.decode(text))

    async def wait_async(self, job_id: int, timeout: float | None) -> Any:
        return self.wait(job_id, timeout)


class BoundTask(Generic[P, R]):
    """A task with per-call options; made by ``Task.options``."""

    def __init__(self, task: Task[P, R], options: TaskOptions, conn: Any) -> None:
        self.task, self.opts, self.conn = task, options, conn

    def _item(self, arguments: dict[str, Any]) -> dict[str, Any]:
        opts = self.opts
        unique = opts.unique_key
        if callable(unique):
            unique = unique(**arguments)
        if opts.unique_for is not None and unique is None:
            raise InvalidArgument(
                f"{self.task.name}: unique_for needs a unique_key; give one with "
                "@app.task(unique_key=...) or .options(unique_key=...)")
        conversion = self.task.conversion
        payload = arguments if conversion is None else conversion.dump_arguments(arguments)
        headers = opts.headers
        if opts.backoff is not self.task.defaults.backoff and opts.backoff is not None:
            # Given per call, so the worker cannot know it from the task: it travels
            # with the job (a task's own backoff does not, the worker has it).
            headers = {**(headers or {}), _backoff.HEADER: _backoff.to_header(opts.backoff)}
        return {
            "queue": opts.queue, "payload": payload, "kind": self.task.name,
            "priority": opts.priority, "delay": opts.delay, "run_at": opts.run_at,
            "unique_key": unique, "max_attempts": opts.max_attempts,
            # A task's own lease travels with each job, so any worker or plain dequeue
            # leases it for as long as the task asked (within the queue's max_lease).
            "lease": opts.lease,
            "unique_for": opts.unique_for,
            "headers": headers,
            "unique_scope": opts.unique_scope,
            "tags": opts.tags,
        }

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Queue a call with these options."""
        item = self._item(self.task.arguments(args, kwargs))
        app = self.task.app
        if app.eager:
            return app.run_eagerly(self.task, item["payload"])
        return self.task.bind([app.queue.enqueue(**item, conn=self.conn)])[0]

    def enqueue_many(self, calls: Iterable[Mapping[str, Any]]) -> list[EnqueueResult]:
        """Queue many calls with these options in one round trip."""
        items = []
        for call in calls:
            if not isinstance(call, Mapping):
                raise InvalidArgument(f"{self.task.name}: each call must be a dict of arguments")
            items.append(self._item(self.task.arguments((), dict(call))))
        app = self.task.app
        if app.eager:
            return [app.run_eagerly(self.task, item["payload"]) for item in items]
        return self.task.bind(app.queue.enqueue_many(items, conn=self.conn))

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """``Task.s`` with these options (``conn`` is not used: a flow is enqueued in a
        transaction of its own)."""
        if self.conn is not None:
            raise InvalidArgument(f"{self.task.name}: a step of a chain or group takes no "
                                  "conn=; pass it to the chain's or group's enqueue(conn=...)")
        return Signature(self, args, kwargs)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> EnqueueResult:
        """Queue a call with these options, from asyncio code."""
        item = self._item(self.task.arguments(args, kwargs))
        app = self.task.app
        if app.eager:
            return await app.run_eagerly_async(self.task, item["payload"])
        return self.task.bind([await app.async_queue.enqueue(**item, conn=self.conn)])[0]


_HOLE = object()  # stands for the result a receiving step's first parameter will get


@dataclass(frozen=True)
class Signature:
    """A task call to enqueue later, as a chain step, group member or callback. Made by
    ``task.s(*args, **kwargs)`` (or ``task.options(...).s(...)``); ``leaseq.flows``
    composes them into chains and groups.

    Attributes:
        bound: The task with its per-call options.
        args: Positional arguments as given.
        kwargs: Keyword arguments as given.
    """

    bound: BoundTask[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        task = self.bound.task
        try:  # the checks that hold whether or not this call will receive a result
            task.signature.bind_partial(*self.args, **self.kwargs)
        except TypeError as exc:
            raise InvalidArgument(f"{task.name}: {exc}") from exc
        opts = self.bound.opts
        if (opts.unique_key is not None or opts.unique_for is not None
                or opts.unique_scope == "global"):
            raise InvalidArgument(
                f"{task.name}: a task with a unique_key, unique_for or unique_scope cannot be "
                "a step of a chain or group (a twin would stand in for the step, and its "
                "flow would wait forever)")

    @property
    def first_parameter(self) -> str:
        """The name of the parameter a result fills when this call receives one."""
        task = self.bound.task
        params = list(task.signature.parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_OR_KEYWORD,
                                                params[0].KEYWORD_ONLY):
            raise InvalidArgument(
                f"{task.name}: a step that receives a result needs a first parameter to "
                "receive it in (not *args, **kwargs or positional-only)")
        return params[0].name

    def arguments(self, receives: bool) -> dict[str, Any]:
        """The call's keyword arguments, checked against the function; with ``receives``,
        without the first parameter, which the previous result will fill."""
        task = self.bound.task
        if not receives:
            return task.arguments(self.args, dict(self.kwargs))
        first = self.first_parameter
        if first in self.kwargs:
            raise InvalidArgument(
                f"{task.name}: {first!r} receives the previous result; do not pass it")
        named = task.arguments((_HOLE, *self.args), dict(self.kwargs))
        del named[first]
        return named

    def new_job(self, queue: Queue | AsyncQueue, receives: bool, link: FlowLink | None
                ) -> NewJob:
        """The job of this call, with its ``leaseq-flow`` header (``link``; none for a
        group's callback, whose ack is a plain one)."""
        item = self.bound._item(self.arguments(receives))
        if receives and item["run_at"] is not None:
            raise InvalidArgument(
                f"{self.bound.task.name}: a step that waits for a result cannot have run_at; "
                "use delay (counted from when it is enqueued)")
        if link is not None:
            headers = dict(item["headers"] or {})
            headers[_flow.HEADER] = _flow.header(link)
            item["headers"] = headers
        return queue._new_job(**item, flow=True)

    def __repr__(self) -> str:
        return f"<Signature {self.bound.task.name} args={self.args!r} kwargs={self.kwargs!r}>"


class App:
    """A set of tasks and the queue they use.

    Args:
        url: Database URL. None: the ``LEASEQ_URL`` environment variable, read now,
            else ``sqlite:///leaseq.db`` in the current directory. An explicit URL wins
            over ``LEASEQ_URL``; only ``leaseq worker --url`` overrides it
            (docs/operations.md, "Which database").
        on_failure: Default ``on_failure`` hook of every task that has none of its own:
            ``fn(job, exc)``, plain or ``async def``, called after each attempt that
            failed by raising (docs/hooks.md).
        on_dead: Default ``on_dead`` hook: ``fn(job, exc)``, called when a failure left
            the job dead.
        unknown_task_delay: Seconds after which a worker of this app offers again a job
            whose task it does not know (another kind, or no kind): it hands the job back
            (a release: no attempt used) rather than burying it, since a newer worker may
            know it (a rolling deploy). Defaults to 60.
        unknown_task_grace: Seconds a job may stay unknown, counted from the first time a
            worker handed it back, before a worker buries it (dead, for ``leaseq kick``).
            Defaults to 3600; 0 buries at once.
        include: Names of modules that define tasks of this app (``["shop.emails",
            "shop.billing"]``), imported by ``load_includes()``: ``leaseq worker`` and
            ``Worker`` call it before they start, so tasks defined outside the app's own
            module are registered without the app's module importing them (which would
            often be a circular import).
        **settings: ``leaseq.Settings`` fields (lease, max_attempts, backoff, ...).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        on_failure: FailureHook | None = None,
        on_dead: FailureHook | None = None,
        unknown_task_delay: float = 60.0,
        unknown_task_grace: float = 3600.0,
        include: Iterable[str] = (),
        **settings: Any,
    ) -> None:
        for name, value in (("unknown_task_delay", unknown_task_delay),
                            ("unknown_task_grace", unknown_task_grace)):
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and 0 <= value < float("inf")):
                raise ConfigurationError(f"{name} must be a number of seconds >= 0, "
                                         f"got {value!r}")
        self.unknown_task_delay = float(unknown_task_delay)
        self.unknown_task_grace = float(unknown_task_grace)
        self.url = resolve_url(url)
        self.include: tuple[str, ...] = (include,) if isinstance(include, str) else tuple(
            include)
        for name in self.include:
            if not (isinstance(name, str) and name.strip()):
                raise ConfigurationError(f"include must list module names, got {name!r}")
        self.on_failure = _hook("on_failure", on_failure)
        self.on_dead = _hook("on_dead", on_dead)
        self.settings = Settings(**settings)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self._schedules: dict[str, Schedule[Task[Any, Any]]] = {}
        self.eager = False
        self._queue: Queue | None = None
        self._async_queue: AsyncQueue | None = None
        self._lock = threading.Lock()
        self._eager_ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<App {redact.redact_url(self.url)!r} tasks={sorted(self.tasks)}>"

    @property
    def queue(self) -> Queue:
        """The app's ``Queue`` client, opened on first use."""
        with self._lock:
            if self._queue is None:
                self._queue = Queue(self.url, self.settings)
            return self._queue

    @property
    def async_queue(self) -> AsyncQueue:
        """The app's ``AsyncQueue`` client, opened on first use (one event loop)."""
        with self._lock:
            if self._async_queue is None:
                self._async_queue = AsyncQueue(self.url, self.settings)
            return self._async_queue

    def load_includes(self) -> None:
        """Imports the modules of ``include``, so their tasks and schedules register;
        a module already imported is not imported again. A name that cannot be found
        raises ``ConfigurationError``; what a module raises while imported propagates."""
        for name in self.include:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is None or not (name + ".").startswith(exc.name + "."):
                    raise  # the module exists and imports something missing
                raise ConfigurationError(
                    f"App(include=...) names {name!r}, which cannot be imported: {exc}"
                ) from exc

    def no_tasks_hint(self, queues: Sequence[str]) -> str | None:
        """What a worker of ``queues`` logs when none of this app's tasks uses them (the
        module that defines them not imported, most often); None when some task does."""
        if any(t.defaults.queue in queues for t in self.tasks.values()):
            return None
        if not self.tasks:
            return (f"{self!r} has no tasks: is the module that defines them imported? "
                    "List it in App(include=[...]) or import it from the app's module")
        used = sorted({t.defaults.queue for t in self.tasks.values()})
        return (f"no task of this app uses queue {', '.join(queues)} (its tasks use "
                f"{', '.join(used)}): its jobs have no task here. Is the module that defines "
                "them listed in App(include=[...])?")

    def migrate(self) -> list[str]:
        """Create or upgrade the tables (``Queue.migrate``); returns the migrations
        applied."""
        return self.queue.migrate()

    def close(self) -> None:
        """Close the sync client (await ``async_queue.close()`` for the async one)."""
        with self._lock:
            if self._queue is not None:
                self._queue.close()
                self._queue = None

    @overload
    def task(self, fn: Callable[P, R]) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        backoff: Backoff | None = None,
        unique_key: UniqueKey = None,
        unique_for: float | timedelta | None = None,
        on_failure: FailureHook | None = None,
        on_dead: FailureHook | None = None,
        unique_scope: UniqueScope = "queue",
        tags: Sequence[str] | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        backoff: Backoff | None = None,
        unique_key: UniqueKey = None,
        unique_for: float | timedelta | None = None,
        on_failure: FailureHook | None = None,
        on_dead: FailureHook | None = None,
        unique_scope: UniqueScope = "queue",
        tags: Sequence[str] | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function (plain or ``async def``) as a task.

        Args:
            name: The job kind; defaults to ``module.qualname``.
            queue: Queue its jobs go to. Defaults to ``"default"``.
            priority: Default priority (higher first). Defaults to 0.
            max_attempts: Attempts before dead; defaults to the app's setting.
            timeout: Seconds a run may take before it counts as failed.
            lease: Lease length in seconds; renewed every lease/3 while it runs.
            backoff: Retry delays. Without it a failed job is retried after the queue's
                stored backoff (``configure_queue``), else the app's ``Settings.backoff``.
            unique_key: A string, or a function of the task's arguments returning one:
                at most one live job per key.
            unique_for: Seconds (or a timedelta): an enqueue also returns a job with the
                same key that finished less than this long ago, with ``created=False``,
                instead of making a new one (``Queue.enqueue``). Applies to every call
                with a key, the task's or one given by ``options(unique_key=...)``; an
                enqueue without any key raises ``InvalidArgument``.
            unique_scope: ``"global"``: the key is unique across every queue, not only
                in the task's queue (``Queue.enqueue``). Defaults to ``"queue"``.
            tags: Tags on every job of the task (``Queue.enqueue``);
                ``options(tags=...)`` replaces them for a call.
            on_failure: ``fn(job, exc)``, plain or ``async def``, called in the worker after
                every attempt that failed by raising, with the job as stored after the
                failure. Defaults to the app's ``on_failure``.
            on_dead: ``fn(job, exc)``, called when a failure left the job dead (attempts
                used up, or ``Bury``). Defaults to the app's ``on_dead``.
        """
        options = TaskOptions(
            queue=v.queue_name(queue),
            priority=v.integer("priority", priority, v.INT32[0]),
            max_attempts=max_attempts,
            timeout=None if timeout is None else v.seconds("timeout", timeout, positive=True),
            lease=None if lease is None else v.seconds("lease", lease, positive=True),
            backoff=backoff,
            unique_key=unique_key,
            unique_for=None if unique_for is None else v.seconds(
                "unique_for", unique_for.total_seconds() if isinstance(unique_for, timedelta)
                else unique_for, positive=True),
            unique_scope=unique_scope,
            tags=None if tags is None or v.tags(tags) is None else tuple(tags),
        )

        def register(fn: Callable[P, R]) -> Task[P, R]:
            task_name = name or f"{fn.__module__}.{fn.__qualname__}"
            v.optional_text("name", task_name, v.MAX_KIND)
            if task_name in self.tasks and self.tasks[task_name].fn is not fn:
                raise ConfigurationError(f"a task named {task_name!r} is already registered")
            task = Task(self, fn, task_name, options, on_failure=on_failure, on_dead=on_dead)
            self.tasks[task_name] = task
            return task

        return register(fn) if fn is not None else register

    @property
    def schedules(self) -> Mapping[str, Schedule[Task[Any, Any]]]:
        """The app's schedules by name (read-only), in the order they were declared."""
        return MappingProxyType(self._schedules)

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        name: str | None = None,
        kwargs: Mapping[str, Any] | None = None,
        catch_up: float | timedelta | None = None,
    ) -> Callable[[Task[P, R]], Task[P, R]]:
        """Run a task on a schedule; put it above ``@app.task``::

            @app.periodic(cron="*/5 * * * *", tz="Europe/Berlin")
            @app.task(queue="reports")
            def refresh() -> None: ...

        Takes ``App.schedule``'s arguments and returns the task unchanged.
        """

        def declare(task: Task[P, R]) -> Task[P, R]:
            if not isinstance(task, Task):
                raise ConfigurationError(
                    f"@app.periodic needs a task, got {task!r}: put @app.periodic above "
                    "@app.task")
            self.schedule(task, cron=cron, every=every, tz=tz, kwargs=kwargs, name=name,
                          catch_up=catch_up)
            return task

        return declare

    def schedule(
        self,
        task: Task[Any, Any],
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str = "UTC",
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        catch_up: float | timedelta | None = None,
    ) -> Schedule[Task[Any, Any]]:
        """Enqueue ``task``'s job at each tick of a schedule, from every worker of this app,
        once per tick however many run (docs/schedules.md)::

            app.schedule(send_report, cron="0 8 * * 1-5", kwargs={"team": "ops"},
                         name="weekday-report")

        Args:
            task: A task of this app.
            cron: A cron expression (5 fields, or 6 with seconds first), read in ``tz``.
            every: Instead of ``cron``: a period in seconds (or a timedelta); the ticks are
                its multiples since the Unix epoch, the same on every host.
            tz: IANA time zone for ``cron`` (DST-aware) and for listings. Defaults to UTC.
            kwargs: The task's keyword arguments for each job, checked against its
                signature now.
            name: Unique in the app, at most 150 characters. Defaults to the task's name.
            catch_up: At start-up, a tick missed while no worker ran is enqueued when
                younger than this (seconds or a timedelta). Defaults to None: missed ticks
                are skipped and logged.

        Raises:
            ConfigurationError: Not exactly one of cron and every, a bad cron expression,
                period or time zone, kwargs the task refuses, or a name already used.
        """
        if not isinstance(task, Task) or task.app is not self:
            raise ConfigurationError(
                f"app.schedule needs a task of this app (made by @app.task), got {task!r}")
        from leaseq._core.schedule import new_schedule  # on first use, with cronsim

        declared = new_schedule(task, cron=cron, every=every, tz=tz, kwargs=kwargs,
                                name=name, catch_up=catch_up)
        if declared.name in self._schedules:
            raise ConfigurationError(
                f"a schedule named {declared.name!r} is already declared; pass name=")
        self._schedules[declared.name] = declared
        return declared

    def run_eagerly(self, task: Task[Any, Any], payload: dict[str, Any]) -> EnqueueResult:
        """Inline mode (``leaseq.testing.inline``): run the call now, in this thread, with
        the payload as a worker would see it. No job is stored, so no hook runs."""
        arguments = self._through_json(task, payload)
        result = task.fn(**arguments)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        return EnqueueResult(next(self._eager_ids), True, waiter=EagerWaiter(task, result))

    async def run_eagerly_async(
        self, task: Task[Any, Any], payload: dict[str, Any]
    ) -> EnqueueResult:
        """``run_eagerly`` for ``enqueue_async``: awaits the task on the caller's loop."""
        arguments = self._through_json(task, payload)
        result = task.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return EnqueueResult(next(self._eager_ids), True, waiter=EagerWaiter(task, result))


    def _through_json(self, task: Task[Any, Any], payload: dict[str, Any]) -> dict[str, Any]:
        """The arguments a worker would call the task with: stored, read back, rebuilt."""
        stored = v.decode(v.encode(payload, self.settings.max_payload_bytes))
        conversion = task.conversion
        return stored if conversion is None else conversion.load_arguments(stored)


def _hook(which: str, hook: FailureHook | None) -> FailureHook | None:
    if hook is not None and not callable(hook):
        raise ConfigurationError(f"{which} must be a function fn(job, exc), got {hook!r}")
    return hook


async def _await(awaitable: Any) -> Any:
    return await awaitable
