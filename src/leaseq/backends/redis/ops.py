"""The job state machine on Redis as plans, written once for the sync and async clients.

As with the SQL backends (``backends/_sql/plan.py``), an operation is a *plan*: a
generator that yields ``Call`` objects (a script from ``scripts/`` with its KEYS and ARGV,
or, for the start-up checks, a plain command) and receives each one's reply. The sync and
async runners in ``driver.py`` drive the same plans. Each state change is one script, so
it is atomic on the server; a plan adds at most a read before it (``locate``: which
queue a job id belongs to) or loops a bounded script in rounds.

Values cross into Lua as text: times and durations as integer microseconds, optional
values as ``""`` (null) or ``"+"`` and the value (``scripts/_common.lua``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from leaseq._core.job import EnqueueResult, Job, JobInfo, JobState, QueueStats
from leaseq._core.validate import decode
from leaseq.backends.base import NewJob
from leaseq.backends.redis.keys import Keys
from leaseq.backends.redis.lua import SCRIPTS
from leaseq.errors import (
    ConfigurationError,
    JobCancelled,
    JobNotFound,
    JobStateError,
    LeaseLost,
)

T = TypeVar("T")
log = logging.getLogger("leaseq")

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MIN_VERSION = (6, 2)
ROUND = 1000  # most jobs one kick, reclaim or prune script handles: keeps each one short
CHUNK = 256  # most queues one stats, reclaim or prune script reads


@dataclass(frozen=True)
class Call:
    """One server call: the script ``name`` (``scripts/<name>.lua``) with ``keys`` and
    ``args``; or, with ``command``, the Redis command ``name`` with ``args``. With
    ``tolerate``, a server error comes back as the reply instead of being raised."""

    name: str
    keys: Sequence[str] = ()
    args: Sequence[str | int] = ()
    command: bool = False
    tolerate: bool = False


Plan = Generator[Call, Any, T]


def us(seconds: float) -> int:
    """A duration in whole microseconds."""
    return round(seconds * 1_000_000)


def us_at(when: datetime) -> int:
    """An aware datetime as exact microseconds since the epoch."""
    return (when - EPOCH) // timedelta(microseconds=1)


def dt(value: str | int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=int(value))


def opt(value: str | int | None) -> str:
    """An optional ARGV value: "" for null, else "+" and the value."""
    return "" if value is None else f"+{value}"


def record(flat: Sequence[str]) -> dict[str, str]:
    """An HGETALL reply as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


class Located:
    """Job id → queue, remembered from enqueue, claim and locate. A job never changes
    queue, so holder calls on a job this client has seen skip the index read; a stale
    entry (the data was flushed and ids reused) shows as a missing job and is re-read."""

    SIZE = 65536

    def __init__(self) -> None:
        self._map: dict[int, str] = {}
        self._lock = threading.Lock()

    def get(self, job_id: int) -> str | None:
        return self._map.get(job_id)

    def put(self, job_id: int, queue: str) -> None:
        with self._lock:
            self._map[job_id] = queue
            if len(self._map) > self.SIZE:
                del self._map[next(iter(self._map))]

    def forget(self, job_id: int) -> None:
        with self._lock:
            self._map.pop(job_id, None)


class RedisOps:
    """Plans for every contract method; see ``backends.base.Backend`` for the states."""

    def __init__(self, prefix: str, where: str) -> None:
        self.k = Keys(prefix)
        self.where = where
        self.located = Located()

    # -- start-up and migrate ----------------------------------------------------------

    def startup(self) -> Plan[None]:
        """Checks the server once per client: Redis 6.2+, and an eviction policy that
        cannot drop queue keys (anything but ``noeviction`` gets a WARNING)."""
        info = yield Call("INFO", args=("server",), command=True, tolerate=True)
        if isinstance(info, dict) and "redis_version" in info:
            version = str(info["redis_version"])
            parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
            if parts < MIN_VERSION:
                raise ConfigurationError(
                    f"Redis at {self.where} is version {version}; leaseq needs Redis 6.2+"
                )
        policy = yield Call("CONFIG GET", args=("maxmemory-policy",), command=True,
                            tolerate=True)
        if isinstance(policy, Exception):
            log.info("could not read maxmemory-policy of Redis at %s (%s); make sure it is "
                     "noeviction, or Redis may evict queued jobs", self.where, policy)
            return
        value = policy.get("maxmemory-policy") if isinstance(policy, dict) else None
        if value is not None and value != "noeviction":
            log.warning(
                "Redis at %s has maxmemory-policy %s: when memory runs out it may evict "
                "leaseq's keys and jobs vanish without a trace. Set maxmemory-policy "
                "noeviction (then writes fail loudly instead).", self.where, value,
            )

    def migrate(self) -> Plan[None]:
        """Nothing to create: checks the server and loads the scripts."""
        yield from self.startup()
        for script in SCRIPTS.values():
            yield Call("SCRIPT LOAD", args=(script.text,), command=True)

    # -- enqueue and claim -------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> Plan[list[EnqueueResult]]:
        refuse_connection(conn)
        if not jobs:
            return []
        groups: dict[str, int] = {}
        keys = [self.k.ids, self.k.index, self.k.queues]
        args: list[str | int] = []
        for job in jobs:
            if job.queue not in groups:
                groups[job.queue] = len(groups) + 1
                keys += self.k.queue(job.queue)
            run_at = None if job.run_at is None else us_at(job.run_at)
            args += [groups[job.queue], job.queue, opt(job.kind), job.payload, job.priority,
                     job.max_attempts, opt(job.unique_key), us(job.delay), opt(run_at)]
        reply = yield Call("enqueue", keys, args)
        results = [EnqueueResult(int(reply[i]), bool(reply[i + 1]))
                   for i in range(0, len(reply), 2)]
        for job, result in zip(jobs, results, strict=True):
            self.located.put(result.id, job.queue)
        return results

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float, limit: int
    ) -> Plan[list[Job]]:
        keys = [key for queue in queues for key in self.k.queue(queue)]
        reply = yield Call("claim", keys, (worker_id, max(1, us(lease)), limit))
        jobs = []
        for flat in reply:
            h = record(flat)
            job = Job(
                id=int(h["id"]), queue=h["queue"], kind=h.get("kind"),
                payload=decode(h["payload"]), priority=int(h["priority"]),
                attempts=int(h["attempts"]), max_attempts=int(h["max_attempts"]),
                unique_key=h.get("unique_key"), lease_token=int(h["lease_token"]),
                lease_until=dt(h["lease_until"]),  # type: ignore[arg-type]
                worker_id=h["worker_id"], created_at=dt(h["created_at"]),  # type: ignore[arg-type]
                lease=lease,
            )
            self.located.put(job.id, job.queue)
            jobs.append(job)
        return jobs

    # -- calls on one job --------------------------------------------------------------

    def on_job(self, job_id: int, call: Callable[[list[str]], Call]) -> Plan[Any]:
        """Runs ``call(keys)`` on the job's queue; None when no job has that id.

        The queue comes from this client's memory, else from the id index. A job never
        changes queue, so reading the index before the script is safe: a job that
        vanishes in between (pruned) makes the script answer "missing".
        """
        queue = self.located.get(job_id)
        if queue is not None:
            reply = yield call(self.k.with_job(queue, job_id))
            if reply != "missing":
                return reply
            self.located.forget(job_id)
        queue = yield Call("locate", (self.k.index,), (job_id,))
        if queue is None:
            return None
        self.located.put(job_id, queue)
        reply = yield call(self.k.with_job(queue, job_id))
        return None if reply == "missing" else reply

    def held(self, name: str, job_id: int, token: int, *args: str | int) -> Plan[Any]:
        """A fenced script: its reply, or ``LeaseLost`` when the lease is not held."""
        reply = yield from self.on_job(job_id, lambda keys: Call(name, keys, (token, *args)))
        if reply is None or reply == "lost":
            raise LeaseLost(
                f"lease {token} on job {job_id} is no longer valid: the job was reclaimed, "
                "re-delivered or finished; nothing was changed"
            )
        return reply

    def renew(self, job_id: int, token: int, extend: float) -> Plan[datetime]:
        until_us, cancel_requested = yield from self.held("renew", job_id, token,
                                                          max(1, us(extend)))
        until = dt(until_us)
        assert until is not None
        if cancel_requested:
            raise JobCancelled(
                f"job {job_id} was cancelled; its lease runs to {until.isoformat()}, "
                "stop work and release or nack it"
            )
        return until

    def complete(
        self, job_id: int, token: int, result: str | None, conn: Any = None
    ) -> Plan[None]:
        refuse_connection(conn)
        yield from self.held("complete", job_id, token, opt(result))

    def fail(self, job_id: int, token: int, error: str | None, delay: float) -> Plan[JobState]:
        state = yield from self.held("fail", job_id, token, opt(error), us(delay))
        return state  # type: ignore[no-any-return]

    def release(self, job_id: int, token: int, delay: float) -> Plan[JobState]:
        state = yield from self.held("release", job_id, token, us(delay))
        return state  # type: ignore[no-any-return]

    def bury(self, job_id: int, token: int, reason: str | None) -> Plan[None]:
        yield from self.held("bury", job_id, token, opt(reason))

    # -- operator verbs ------------------------------------------------------------------

    def kick(self, queue: str, limit: int) -> Plan[int]:
        keys = self.k.queue(queue)
        kicked = 0
        while kicked < limit:
            want = min(ROUND, limit - kicked)
            got = yield Call("kick", keys, (want,))
            kicked += got
            if got < want:
                break
        return kicked

    def operate(self, name: str, job_id: int, allowed: str, *args: str) -> Plan[str]:
        """An operator script on one job; ``JobNotFound`` or ``JobStateError`` when it
        refuses, else its reply."""
        reply = yield from self.on_job(job_id, lambda keys: Call(name, keys, args))
        if reply is None:
            raise JobNotFound(f"no job with id {job_id}")
        if allowed and reply != "ok":
            raise JobStateError(
                f"cannot {name} job {job_id}: it is {reply}; {name} works on {allowed} jobs"
            )
        return reply  # type: ignore[no-any-return]

    def retry(self, job_id: int) -> Plan[None]:
        yield from self.operate("retry", job_id, "dead or scheduled")

    def discard(self, job_id: int, reason: str | None) -> Plan[None]:
        yield from self.operate("discard", job_id, "dead, scheduled or available", opt(reason))

    def cancel(self, job_id: int) -> Plan[JobState]:
        state = yield from self.operate("cancel", job_id, "")
        return state  # type: ignore[return-value]

    # -- reads ---------------------------------------------------------------------------

    def get(self, job_id: int) -> Plan[JobInfo]:
        reply = yield from self.on_job(job_id, lambda keys: Call("get", keys[:1]))
        if reply is None:
            raise JobNotFound(f"no job with id {job_id}")
        now, flat = reply
        return info(record(flat), int(now))

    def queue_groups(self) -> Plan[list[tuple[list[str], list[str]]]]:
        """Every queue that ever held a job, sorted, as ``(names, keys)`` chunks."""
        names = sorted((yield Call("queues", (self.k.queues,))))
        chunks = [names[i:i + CHUNK] for i in range(0, len(names), CHUNK)]
        return [(chunk, [key for name in chunk for key in self.k.queue(name)])
                for chunk in chunks]

    def stats(self) -> Plan[dict[str, QueueStats]]:
        out: dict[str, QueueStats] = {}
        for names, keys in (yield from self.queue_groups()):
            counts = yield Call("stats", keys)
            for name, c in zip(names, counts, strict=True):
                if any(c):
                    out[name] = QueueStats(name, *(int(n) for n in c))
        return out

    # -- maintenance ---------------------------------------------------------------------

    def reclaim(self, limit: int) -> Plan[int]:
        reclaimed = 0
        for _, keys in (yield from self.queue_groups()):
            while reclaimed < limit:
                want = min(ROUND, limit - reclaimed)
                got = yield Call("reclaim", keys, (want,))
                reclaimed += got
                if got < want:
                    break
        return reclaimed

    def prune(self, older_than: float) -> Plan[int]:
        pruned = 0
        for _, keys in (yield from self.queue_groups()):
            while True:
                got = yield Call("prune", [self.k.index, *keys], (us(older_than), ROUND))
                pruned += got
                if got < ROUND:
                    break
        return pruned


def info(h: dict[str, str], now: int) -> JobInfo:
    """A job hash as ``get`` shows it; ``now`` is the server's time in µs."""
    state = h["state"]
    at = int(h["available_at"])
    live = "finished_at" not in h
    if state == "available" and at > now:
        state = "scheduled"
    return JobInfo(
        id=int(h["id"]), queue=h["queue"], kind=h.get("kind"),
        state=state,  # type: ignore[arg-type]
        payload=decode(h["payload"]), priority=int(h["priority"]),
        attempts=int(h["attempts"]), max_attempts=int(h["max_attempts"]),
        unique_key=h.get("unique_key"), available_at=dt(at) if live else None,
        lease_until=dt(h.get("lease_until")), worker_id=h.get("worker_id"),
        created_at=dt(h["created_at"]),  # type: ignore[arg-type]
        started_at=dt(h.get("started_at")), finished_at=dt(h.get("finished_at")),
        result=decode(h.get("result")), error=h.get("error"),
        cancel_requested=h.get("cancel_requested") == "1",
    )


def refuse_connection(conn: Any) -> None:
    if conn is not None:
        raise ConfigurationError(
            "redis:// has no transactions to join; transactional enqueue and ack need "
            "SQLite, PostgreSQL or MySQL"
        )
