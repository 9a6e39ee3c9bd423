"""Periodic jobs: a ``Schedule`` says when a task's job is due, and nothing else.

    @app.periodic(cron="*/5 * * * *", tz="Europe/Berlin")   # or every=30 (seconds)
    @app.task(queue="reports")
    def refresh() -> None: ...

A schedule's *ticks* are the instants its job is due:

* ``every=N``: the multiples of N seconds since the Unix epoch, so every host computes the
  same ticks without talking to the others;
* ``cron="..."``: the times cronsim yields for the expression read as wall-clock time in
  ``tz`` (Debian cron's DST rules: a fixed-time job inside a skipped hour runs when the
  hour resumes, inside a repeated hour once; ``*``-minute or ``*``-hour jobs follow real
  time through both transitions), kept as UTC instants.

This module is pure arithmetic; the worker's ``Scheduler`` turns ticks into jobs, one per
tick through a unique key (docs/schedules.md). Its public face is ``leaseq.schedules``; it
lives in ``_core`` because ``App.schedule`` (tasks.py) builds schedules and tasks.py
imports nothing above itself (docs/design.md §34). Importing it imports cronsim, so
tasks.py does that on the first declared schedule, not at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from leaseq.errors import ConfigurationError, ValidationError


class Schedulable(Protocol):
    """What a schedule needs of its task: a ``leaseq.Task`` (tasks.py sits above this
    module and builds schedules, so the task is known by what it offers)."""

    @property
    def name(self) -> str: ...

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]: ...


T = TypeVar("T", bound=Schedulable)

MAX_NAME = 150
"""Longest schedule name: with the prefix and the tick's ISO time, a job's unique key
stays within the 255 characters keys may have."""
KEY_PREFIX = "leaseq:schedule:"
"""Unique keys of scheduled jobs start with this, then ``name:tick``."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_MAX_STEPS = 10_000  # cronsim corrections around DST take one or two; this only bounds bugs


@dataclass(frozen=True)
class Schedule(Generic[T]):
    """When a task's job is due; made by ``App.periodic`` and ``App.schedule``.

    Attributes:
        name: Unique within the app, 1-150 characters; part of each tick's job key.
        task: The task whose job each tick enqueues (its queue, priority, lease...).
        cron: A cron expression (5 fields, or 6 with seconds first), read in ``tz``;
            None when ``every`` is set.
        every: The period; ticks are its multiples since the Unix epoch. None when
            ``cron`` is set.
        tz: IANA time zone name the cron expression is read in (and next runs are shown
            in). Defaults to ``"UTC"``.
        kwargs: The task's keyword arguments for every tick's job.
        catch_up: A tick missed while no worker ran is enqueued at start-up when younger
            than this; older ones are skipped and logged. Defaults to zero: skip all.
    """

    name: str
    task: T
    cron: str | None = None
    every: timedelta | None = None
    tz: str = "UTC"
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    catch_up: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= MAX_NAME:
            raise ConfigurationError(
                f"schedule name must be a string of 1-{MAX_NAME} characters (it is part of "
                f"each job's unique key), got {self.name!r:.200}; pass name="
            )
        if (self.cron is None) == (self.every is None):
            raise ConfigurationError(f"schedule {self.name!r}: give exactly one of cron= "
                                     "and every=")
        if self.every is not None and (
                not isinstance(self.every, timedelta) or self.every < _MICROSECOND):
            raise ConfigurationError(
                f"schedule {self.name!r}: every must be positive, got {self.every!r}")
        if not isinstance(self.catch_up, timedelta) or self.catch_up < timedelta(0):
            raise ConfigurationError(
                f"schedule {self.name!r}: catch_up must be >= 0, got {self.catch_up!r}")
        zone = _zone(self.name, self.tz)
        if self.cron is not None:
            _check_cron(self.name, self.cron, zone)
        try:
            arguments = self.task.arguments((), dict(self.kwargs))
        except ValidationError as exc:
            raise ConfigurationError(f"schedule {self.name!r}: kwargs do not fit the task: "
                                     f"{exc}") from exc
        # A read-only copy: a caller's later change to its dict cannot alter the ticks' jobs.
        object.__setattr__(self, "kwargs", MappingProxyType(arguments))

    @property
    def zone(self) -> ZoneInfo:
        """``tz`` as a ``ZoneInfo`` (zoneinfo caches them, so this is cheap)."""
        return ZoneInfo(self.tz)

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (an aware datetime), in UTC.

        Raises:
            ConfigurationError: The cron expression matches no time in the next 50 years.
        """
        after = _aware(after)
        if self.every is not None:
            return self._every_floor(after) + self.every
        tick = self._cron_next(after)
        for _ in range(_MAX_STEPS):
            # Read as naive wall time, a moment inside a repeated (fall-back) hour can
            # yield a tick that is earlier in real time: step on until it is not.
            if tick > after:
                return tick
            tick = self._cron_next(tick)
        raise AssertionError(f"schedule {self.name!r}: no tick found after {after}")

    def last_tick(self, at: datetime) -> datetime | None:
        """The latest tick at or before ``at`` (an aware datetime), in UTC; None when a cron
        expression matched nothing in the 50 years before."""
        at = _aware(at)
        if self.every is not None:
            return self._every_floor(at)
        try:
            # Reverse iteration yields ticks strictly before its start, to the second;
            # starting a microsecond later makes ``at`` itself count.
            found = next(CronSim(self.cron or "", (at + _MICROSECOND).astimezone(self.zone),
                                 reverse=True))
        except StopIteration:
            return None
        tick = found.astimezone(timezone.utc)
        for _ in range(_MAX_STEPS):
            # Around a fall-back hour the wall-clock search can land on either side of the
            # answer: step back while past ``at``, then forward while the next fits.
            if tick <= at:
                break
            tick = next(CronSim(self.cron or "", tick.astimezone(self.zone),
                                reverse=True)).astimezone(timezone.utc)
        for _ in range(_MAX_STEPS):
            following = self._cron_next(tick)
            if following > at:
                return tick
            tick = following
        raise AssertionError(f"schedule {self.name!r}: no tick found at or before {at}")

    def key(self, tick: datetime) -> str:
        """The unique key of ``tick``'s job: what makes each tick enqueue once."""
        return f"{KEY_PREFIX}{self.name}:{_aware(tick).isoformat()}"

    def describe(self) -> str:
        """``cron 0 8 * * 1-5`` or ``every 30s``, for listings."""
        if self.cron is not None:
            return f"cron {self.cron}"
        assert self.every is not None
        return f"every {_seconds_text(self.every)}"

    def _every_floor(self, when: datetime) -> datetime:
        assert self.every is not None
        # Whole microseconds since the epoch: integers, so hosts agree to the microsecond.
        period = self.every // _MICROSECOND
        elapsed = (when - _EPOCH) // _MICROSECOND
        return _EPOCH + (elapsed - elapsed % period) * _MICROSECOND

    def _cron_next(self, after: datetime) -> datetime:
        try:
            tick = next(CronSim(self.cron or "", after.astimezone(self.zone)))
        except StopIteration:
            raise ConfigurationError(
                f"schedule {self.name!r}: cron {self.cron!r} matches no time in the 50 years "
                f"after {after.isoformat()}") from None
        return tick.astimezone(timezone.utc)


def new_schedule(
    task: T,
    *,
    cron: str | None,
    every: float | timedelta | None,
    tz: str,
    kwargs: Mapping[str, Any] | None,
    name: str | None,
    catch_up: float | timedelta | None,
) -> Schedule[T]:
    """A checked ``Schedule`` from ``App.schedule``'s arguments (seconds or timedeltas)."""
    label = task.name if name is None else name
    return Schedule(
        name=label,
        task=task,
        cron=cron,
        every=None if every is None else _period(label, "every", every, positive=True),
        tz=tz,
        kwargs={} if kwargs is None else _mapping(label, kwargs),
        catch_up=timedelta(0) if catch_up is None else _period(label, "catch_up", catch_up),
    )


def _period(label: str, what: str, value: object, *, positive: bool = False) -> timedelta:
    if isinstance(value, timedelta):
        period = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            period = timedelta(seconds=value)
        except (OverflowError, ValueError):
            period = timedelta(-1)  # refused just below, with the value
    else:
        raise ConfigurationError(
            f"schedule {label!r}: {what} must be seconds or a timedelta, got {value!r}")
    if period < (_MICROSECOND if positive else timedelta(0)):
        bound = "> 0" if positive else ">= 0"
        raise ConfigurationError(f"schedule {label!r}: {what} must be {bound}, got {value!r}")
    return period


def _mapping(label: str, kwargs: object) -> Mapping[str, Any]:
    if not isinstance(kwargs, Mapping):
        raise ConfigurationError(f"schedule {label!r}: kwargs must be a dict, got {kwargs!r}")
    return kwargs


def _zone(label: str, tz: object) -> ZoneInfo:
    try:
        if not isinstance(tz, str):
            raise TypeError(tz)
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"schedule {label!r}: unknown time zone {tz!r} (use an IANA name such as "
            "'UTC' or 'Europe/Berlin')") from exc


def _check_cron(label: str, cron: object, zone: ZoneInfo) -> None:
    if not isinstance(cron, str):
        raise ConfigurationError(f"schedule {label!r}: cron must be a string, got {cron!r}")
    try:
        next(CronSim(cron, datetime.now(zone)))
    except CronSimError as exc:
        raise ConfigurationError(f"schedule {label!r}: bad cron expression {cron!r}: "
                                 f"{exc}") from exc
    except StopIteration:
        raise ConfigurationError(
            f"schedule {label!r}: cron {cron!r} matches no time in the next 50 years"
        ) from None


def _aware(when: datetime) -> datetime:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ValueError(f"need a timezone-aware datetime, got {when!r}")
    return when.astimezone(timezone.utc)


def _seconds_text(period: timedelta) -> str:
    seconds = period.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
