"""The job state machine on Redis as plans, written once for the sync and async clients.

As with the SQL backends (``backends/_sql/plan.py``), an operation is a *plan*: a
generator that yields ``Call`` objects (a script from ``scripts/`` with its KEYS and ARGV,
or, for the start-up checks, a plain command) and receives each one's reply. The sync and
async runners in ``driver.py`` drive the same plans. Each state change is one script, so
it is atomic on the server; a plan adds at most a read before it (``locate``: which
queue a job id belongs to) or loops a bounded script in rounds.

On Redis Cluster (``cluster=True``) a script may only touch keys of one slot: each queue's
keys share the slot of their ``{P:Q}`` hash tag, the global keys (id counter, id index,
queue lists) that of ``{P}``. There the plans split what is one script on a single server
into one call per slot, in an order that leaves a crash between them harmless (each
method says which); docs/redis.md lists what stops being atomic.

Values cross into Lua as text: times and durations as integer microseconds (leases and
queue settings as the seconds Python holds, so they read back exactly), optional values
as ``""`` (null) or ``"+"`` and the value (``scripts/_common.lua``).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from leaseq._core.flow import HEADER, FlowLink, FlowState, header
from leaseq._core.flow import link as flow_link
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
from leaseq._core.validate import claimed, stored, stored_tags
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
from leaseq.backends.redis.keys import Keys
from leaseq.backends.redis.lua import SCRIPTS
from leaseq.errors import (
    BackendError,
    ConfigurationError,
    JobCancelled,
    JobNotFound,
    JobStateError,
    LeaseLost,
    QueueFull,
    TooManyQueues,
    TouchLimitExceeded,
)

T = TypeVar("T")
log = logging.getLogger("leaseq")

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MIN_VERSION = (6, 2)
ROUND = 1000  # most jobs one kick, reclaim or prune script handles: keeps each one short
CHUNK = 256  # most queues one stats, reclaim or prune script reads
# A flow step's handoff older than this is taken for left behind by a crash, and reclaim
# finishes it (RedisOps.finish_handoffs); younger ones are the acking client's.
HANDOFF_AGE = 2.0
# unique_scope="global" on Redis Cluster (RedisOps.enqueue_global): a key reserved for a
# job that is still unwritten after this many seconds is taken for abandoned by a crashed
# producer (void.lua fences it); younger ones are waited for, polling from GLOBAL_POLL
# seconds up to ten times that. Module constants so tests can shorten them.
GLOBAL_PENDING = 30.0
GLOBAL_POLL = 0.002
LIVE = ("available", "running", "dead")
INT_SETTINGS = frozenset({"max_attempts", "max_jobs", "max_touches", "concurrency_limit",
                          "rate_burst", "max_snoozes"})  # the rest: floats


@dataclass(frozen=True)
class Call:
    """One server call: the script ``name`` (``scripts/<name>.lua``) with ``keys`` and
    ``args``; or, with ``command``, the Redis command ``name`` with ``args``. With
    ``tolerate``, a server error comes back as the reply instead of being raised. With
    ``pause``, no call: the runner sleeps that many seconds and replies None."""

    name: str
    keys: Sequence[str] = ()
    args: Sequence[str | int] = ()
    command: bool = False
    tolerate: bool = False
    pause: float = 0.0


Plan = Generator[Call, Any, T]


def us(seconds: float) -> int:
    """A duration in whole microseconds."""
    return round(seconds * 1_000_000)


def us_at(when: datetime) -> int:
    """An aware datetime as exact microseconds since the epoch."""
    return (when - EPOCH) // timedelta(microseconds=1)


def at(value: str | int) -> datetime:
    """Microseconds since the epoch (as Lua wrote them) as an aware UTC datetime."""
    return EPOCH + timedelta(microseconds=int(value))


def dt(value: str | int | None) -> datetime | None:
    return None if value is None else at(value)


def opt(value: str | float | None) -> str:
    """An optional ARGV value: "" for null, else "+" and the value."""
    return "" if value is None else f"+{value}"


def record(flat: Sequence[str]) -> dict[str, str]:
    """An HGETALL reply as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def setting_text(name: str, value: int | float | None) -> str:
    """A queue setting as stored: "" (delete) for None, else exact decimal text (repr of
    a float round-trips; Lua reads either with tonumber)."""
    if value is None:
        return ""
    return str(int(value)) if name in INT_SETTINGS else repr(float(value))


def queue_config(queue: str, flat: Sequence[str]) -> QueueConfig:
    """A settings hash (HGETALL reply) as a ``QueueConfig``; unknown fields are ignored."""
    stored = record(flat)
    values: dict[str, int | float] = {
        name: int(stored[name]) if name in INT_SETTINGS else float(stored[name])
        for name in QUEUE_SETTINGS if name in stored
    }
    return QueueConfig(queue, **values)  # type: ignore[arg-type]


def touch_refusal(job_id: int, token: int, reply: list[Any]) -> TouchLimitExceeded:
    """The exception for a renew refused by a touch limit (``touch`` in _common.lua)."""
    if reply[0] == "max_touches":
        return TouchLimitExceeded(
            f"job {job_id}: lease {token} was extended {reply[1]} times, the queue's "
            "max_touches; it will run out"
        )
    return TouchLimitExceeded(
        f"job {job_id}: lease {token} began {int(reply[1]) / 1e6:.3f} s ago, past the "
        f"queue's max_touch_duration of {reply[2]} s; it will run out"
    )


def refused_touch(reply: Any) -> bool:
    """True for a touch-limit refusal from ``touch`` in _common.lua."""
    return isinstance(reply, list) and reply[0] in ("max_touches", "max_touch_duration")


class Located:
    """Job id → queue, remembered from enqueue, claim and locate. A job never changes
    queue, so holder calls on a job this client has seen skip the index read; a stale
    entry (the data was flushed and ids reused) shows as a missing job and is re-read.
    A completed job is forgotten, so a worker's memory holds about its jobs in flight.

    Two generations of plain dicts, each up to half of ``SIZE``: when the young one fills
    it becomes the old one and the old one is dropped whole. A single dict evicting its
    oldest key (the earlier design) rebuilt its whole table every ~100,000 puts and made
    each eviction scan the deleted slots at its front; the soak (issue 23) traced a
    worker's one-off 5 MiB RSS step to one of those rebuilds. Entries hold interned queue
    names (``sys.intern``): each reply decodes the name afresh."""

    SIZE = 65536

    def __init__(self) -> None:
        self._young: dict[int, str] = {}
        self._old: dict[int, str] = {}
        self._lock = threading.Lock()

    def get(self, job_id: int) -> str | None:
        queue = self._young.get(job_id)
        return queue if queue is not None else self._old.get(job_id)

    def put(self, job_id: int, queue: str) -> None:
        with self._lock:
            self._young[job_id] = sys.intern(queue)
            if len(self._young) >= self.SIZE // 2:
                self._old, self._young = self._young, {}

    def forget(self, job_id: int) -> None:
        with self._lock:
            self._young.pop(job_id, None)
            self._old.pop(job_id, None)

    def __len__(self) -> int:
        return len(self._young) + len(self._old)


class RedisOps:
    """Plans for every contract method; see ``backends.base.Backend`` for the states."""

    def __init__(self, prefix: str, where: str, cluster: bool = False) -> None:
        self.k = Keys(prefix)
        self.where = where
        self.located = Located()
        self.cluster = cluster
        # Most queues one script call reads: on a cluster each queue's keys have a slot
        # of their own, so one.
        self.chunk = 1 if cluster else CHUNK
        self.version: tuple[int, ...] = ()  # (major, minor) once startup read it

    # -- start-up and migrate ----------------------------------------------------------

    def startup(self) -> Plan[None]:
        """Checks the server once per client: Redis 6.2+, and an eviction policy that
        cannot drop queue keys (anything but ``noeviction`` gets a WARNING)."""
        # Connects (AUTH, SELECT): their errors must surface, unlike the tolerated ones below.
        yield Call("PING", command=True)
        info = yield Call("INFO", args=("server",), command=True, tolerate=True)
        if isinstance(info, dict) and "redis_version" in info:
            version = str(info["redis_version"])
            parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
            self.version = parts
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

    def migrate(self) -> Plan[list[str]]:
        """Nothing to create (returns []): checks the server, loads the scripts, refiles dead jobs
        an older leaseq filed by id alone in kick order (``order_dead.lua``) and files
        those it buried in the buried set (``index_dead.lua``)."""
        yield from self.startup()
        for script in SCRIPTS.values():
            yield Call("SCRIPT LOAD", args=(script.text,), command=True)
        for names, _ in (yield from self.queue_groups()):
            todo = list(names)
            while todo:  # dead sets filed before the kick order (order_dead.lua)
                keys = [key for name in todo for key in self.k.queue(name)]
                moved = yield Call("order_dead", keys, (ROUND,))
                todo = [name for name, n in zip(todo, moved, strict=True) if n == ROUND]
            starts = dict.fromkeys(names, 0)
            while starts:
                keys = [key for name in starts for key in self.k.queue(name)]
                read = yield Call("index_dead", keys, (ROUND, *starts.values()))
                starts = {name: start + ROUND
                          for (name, start), n in zip(starts.items(), read, strict=True)
                          if n == ROUND}
        return []

    # -- enqueue and claim -------------------------------------------------------------

    def enqueue(
        self, jobs: Sequence[NewJob], conn: Any = None, capped: Collection[str] = ()
    ) -> Plan[list[EnqueueResult]]:
        """Every queue's ``max_jobs`` is checked inside the script (one HGET per queue of
        the batch), so ``capped`` is not needed here."""
        refuse_connection(conn)
        if not jobs:
            return []
        if self.cluster:
            if any(job.unique_global for job in jobs):
                return (yield from self.enqueue_global(jobs))
            return (yield from self.enqueue_sliced(jobs))
        groups: dict[str, int] = {}
        keys = [self.k.ids, self.k.index, self.k.queues, self.k.server]
        if any(job.unique_global for job in jobs):
            keys.append(self.k.global_keys)
        args: list[str | int] = []
        for job in jobs:
            if job.queue not in groups:
                groups[job.queue] = len(groups) + 1
                keys += self.k.queue(job.queue)
            args += job_args(groups[job.queue], job)
        reply = yield Call("enqueue", keys, args)
        if reply and reply[0] == "queues":
            raise too_many_queues(reply)
        if reply and reply[0] == "full":
            queue = next(name for name, number in groups.items() if number == int(reply[1]))
            raise queue_full(queue, reply[2])
        results = [EnqueueResult(int(reply[i]), bool(reply[i + 1]))
                   for i in range(0, len(reply), 2)]
        for job, result in zip(jobs, results, strict=True):
            self.located.put(result.id, job.queue)
        return results

    def enqueue_sliced(self, jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
        """Enqueue on Redis Cluster: ``allocate.lua`` hands out and indexes an id per job
        (the ``{P}`` slot), then ``enqueue.lua`` writes each queue's jobs (its own slot).
        Until then an indexed id names no job, which readers take for "no such job"; ids
        of twins and of refused jobs are removed from the index afterwards.

        A batch over several queues first asks each queue, writing nothing, whether it
        has room (max_jobs), so a refusal writes nothing; only a producer that fills a
        queue in between can make a later queue refuse after earlier ones were written,
        and the ``QueueFull`` then says which jobs were."""
        by_queue: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            by_queue.setdefault(job.queue, []).append(i)
        if len(by_queue) > 1:
            for queue, items in by_queue.items():
                args = ["1", *(a for i in items for a in [*job_args(1, jobs[i]), 0])]
                reply = yield Call("enqueue", self.k.queue(queue), args)
                if reply:
                    raise queue_full(queue, reply[2])
        first = yield Call("allocate", (self.k.ids, self.k.index, self.k.queues,
                                        self.k.server), [job.queue for job in jobs])
        if isinstance(first, list):
            raise too_many_queues(first)
        ids = [int(first) + i for i in range(len(jobs))]
        results: list[EnqueueResult | None] = [None] * len(jobs)
        for queue, items in by_queue.items():
            args = ["0", *(a for i in items for a in [*job_args(1, jobs[i]), ids[i]])]
            reply = yield Call("enqueue", self.k.queue(queue), args)
            if reply and reply[0] == "full":
                yield Call("HDEL", args=(self.k.index, *(
                    ids[i] for i, r in enumerate(results) if r is None or r.id != ids[i]
                )), command=True)
                written = sorted(r.id for r in results if r is not None and r.created)
                raise queue_full(queue, reply[2], written)
            for n, i in enumerate(items):
                results[i] = EnqueueResult(int(reply[2 * n]), bool(reply[2 * n + 1]))
                self.located.put(results[i].id, queue)  # type: ignore[union-attr]
        done = [r for r in results if r is not None]
        unused = [ids[i] for i, r in enumerate(done) if r.id != ids[i]]
        if unused:
            yield Call("HDEL", args=(self.k.index, *unused), command=True)
        return done

    # -- unique_scope="global" on Redis Cluster (docs/design.md §47) --------------------

    def enqueue_global(self, jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
        """Enqueue on Redis Cluster of a batch with ``unique_scope="global"`` jobs. Their
        keys live in the ``{P}`` slot and the jobs in their queues' slots, so no script
        can check and write both; the enqueue reads, reserves, then writes:

        1. ``holders.lua`` reads each key's holder, then its job is read in its queue's
           slot (``global_holders``). Live, or finished within the job's ``unique_for``:
           the new job is its twin. Finished or gone: free for good, since no script
           makes a finished job live again. Indexed but not written: another producer is
           between steps 2 and 3, so wait and read again, until its reservation is
           ``GLOBAL_PENDING`` old; then it is taken for abandoned, its id voided
           (``void.lua``, so a producer that was only slow can never write it) and free.
        2. ``allocate.lua`` hands out the ids and reserves each free key for its job's id,
           if every key still names the holder read in step 1; else back to step 1.
        3. ``enqueue.lua`` writes each queue's jobs, as ``enqueue_sliced`` does.
        4. A job not created under its reserved id (a twin of a live job of its own
           queue, refused by max_jobs, voided) gives its key back (``unreserve.lua``, a
           compare-and-set); a voided job is then enqueued afresh from step 1.

        The first global job of a key in the batch reserves it; later ones of that key
        become twins of whatever it became, unless their own queue holds the key."""
        owners: dict[str, int] = {}
        for i, job in enumerate(jobs):
            if job.unique_global and job.unique_key is not None:
                owners.setdefault(job.unique_key, i)
        began: int | None = None
        poll = GLOBAL_POLL
        while True:
            now, found = yield from self.global_holders(jobs, owners)
            began = now if began is None else began
            if found is not None:
                written = yield from self.write_reserved(jobs, owners, found)
                if written is not None:
                    break
            elif now - began > us(3 * GLOBAL_PENDING):
                raise BackendError(
                    f"Redis at {self.where}: the global unique keys {sorted(owners)} kept "
                    f"changing hands for {3 * GLOBAL_PENDING:g} s; nothing was enqueued")
            else:  # another producer is writing a holder: give it a moment
                yield Call("pause", pause=poll)
                poll = min(poll * 2, GLOBAL_POLL * 10)
        results, voided, ids = written
        if voided:  # this producer was the slow one: its reservations were taken over
            again = yield from self.enqueue_global([jobs[i] for i in voided])
            for i, result in zip(voided, again, strict=True):
                results[i] = result
        for i, job in enumerate(jobs):  # later jobs of a key: twins of its first job
            owner = owners.get(job.unique_key or "") if job.unique_global else None
            if owner is not None and owner != i and results[i].id == ids[owner]:
                results[i] = EnqueueResult(results[owner].id, False)
        return results

    def global_holders(
        self, jobs: Sequence[NewJob], owners: Mapping[str, int]
    ) -> Plan[tuple[int, dict[str, tuple[str, str, str]] | None]]:
        """Step 1 of ``enqueue_global``: the server's time (µs) and, per key of
        ``owners``, ``("=", holder, "")`` when the new job is the holder's twin, else
        ``("", holder, reserved_at)``: free, and the holder to expect when reserving
        (both "" when the key has none). None instead of the keys when a holder is being
        written (wait and read again)."""
        keys = list(owners)
        reply = yield Call("holders", (self.k.global_keys, self.k.global_at, self.k.index),
                           keys)
        now = int(reply[0])
        found: dict[str, tuple[str, str, str]] = {}
        writing = False
        for n, key in enumerate(keys):
            holder, reserved, queue = reply[1 + 3 * n: 4 + 3 * n]
            if holder is None or queue is None:
                # No holder, or its index entry is gone: a pruned job, or an id that
                # never became a job (its producer took it out of the index).
                found[key] = ("", holder or "", reserved or "")
                continue
            job_key = self.k.job(queue, int(holder))
            state, finished = yield Call("HMGET", args=(job_key, "state", "finished_at"),
                                         command=True)
            job = jobs[owners[key]]
            window = us(job.unique_for) if job.unique_for else 0
            if state in LIVE or (window and finished is not None
                                    and int(finished) > now - window):
                found[key] = ("=", holder, "")
            elif state is not None:
                found[key] = ("", holder, reserved or "")
            elif reserved is not None and now - int(reserved) < us(GLOBAL_PENDING):
                writing = True
            elif (yield Call("void", (job_key, self.k.void(queue)), (holder,))):
                found[key] = ("", holder, reserved or "")
            else:  # written after all, just now: read it again
                writing = True
        return now, None if writing else found

    def write_reserved(
        self, jobs: Sequence[NewJob], owners: Mapping[str, int],
        found: Mapping[str, tuple[str, str, str]],
    ) -> Plan[tuple[list[EnqueueResult], list[int], list[int]] | None]:
        """Steps 2 to 4 of ``enqueue_global``: the results, the positions of voided jobs
        (not yet enqueued) and the ids handed out; None when a key changed holder since
        ``found`` was read (nothing written). Multi-queue batches are dry-run first, as in
        ``enqueue_sliced``."""
        by_queue: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            by_queue.setdefault(job.queue, []).append(i)

        def flag(i: int, ids: Sequence[int]) -> str:
            """The global value of job ``i`` for enqueue.lua's cluster form."""
            job = jobs[i]
            if not job.unique_global or job.unique_key is None:
                return "0"
            twin, holder, _ = found[job.unique_key]
            owner = owners[job.unique_key]
            if twin:
                return f"={holder}"
            return "1" if owner == i else f"={ids[owner]}"

        def args(dry: str, items: Sequence[int], ids: Sequence[int]) -> list[str | int]:
            return [dry, *(a for i in items
                           for a in [*job_args(1, jobs[i])[:-1], flag(i, ids), ids[i]])]

        if len(by_queue) > 1:
            for queue, items in by_queue.items():
                reply = yield Call("enqueue", self.k.queue(queue), args("1", items,
                                                                        [0] * len(jobs)))
                if reply:
                    raise queue_full(queue, reply[2])
        reserve = [(owner, key, found[key][1]) for key, owner in owners.items()
                   if not found[key][0]]
        first = yield Call(
            "allocate", (self.k.ids, self.k.index, self.k.queues, self.k.server,
                         self.k.global_keys, self.k.global_at),
            [len(jobs), *(job.queue for job in jobs),
             *(v for owner, key, holder in reserve for v in (owner + 1, key, holder))])
        if isinstance(first, list):
            if first[0] == "moved":
                return None
            raise too_many_queues(first)
        ids = [int(first) + i for i in range(len(jobs))]
        replies: list[tuple[int, int] | None] = [None] * len(jobs)
        full: tuple[str, str] | None = None
        for queue, items in by_queue.items():
            reply = yield Call("enqueue", self.k.queue(queue), args("0", items, ids))
            if reply and reply[0] == "full":
                full = (queue, reply[2])
                break
            for n, i in enumerate(items):
                replies[i] = (int(reply[2 * n]), int(reply[2 * n + 1]))
                if replies[i] == (ids[i], 1):
                    self.located.put(ids[i], queue)
        back = [v for owner, key, holder in reserve if replies[owner] != (ids[owner], 1)
                for v in (key, ids[owner], holder, found[key][2])]
        if back:
            yield Call("unreserve", (self.k.global_keys, self.k.global_at), back)
        unused = [ids[i] for i, r in enumerate(replies) if r != (ids[i], 1)]
        if unused:
            yield Call("HDEL", args=(self.k.index, *unused), command=True)
        if full is not None:
            written = sorted(r[0] for r in replies if r is not None and r[1] == 1)
            raise queue_full(full[0], full[1], written)
        done = [r for r in replies if r is not None]
        voided = [i for i, r in enumerate(done) if r[1] == 2]
        return [EnqueueResult(r[0], r[1] == 1) for r in done], voided, ids

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0,
    ) -> Plan[list[Job]]:
        """The script resolves each job's lease and each queue's limits (``claim.lua``)
        and replies the fields a ``Job`` needs, by position. No ``limited`` (the backend
        drops it): the script reads every queue's limits in the same HMGET as its lease
        settings, atomically, so the client's belief about limits changes nothing."""
        args = (worker_id, opt(lease), limit, repr(default_lease))
        if self.cluster:
            return (yield from self.claim_sliced(queues, args, limit))
        keys = [key for queue in queues for key in self.k.queue(queue)]
        reply = yield Call("claim", keys, args)
        return self.claimed(reply, worker_id)

    def claim_sliced(self, queues: Sequence[str], args: tuple[str | int, ...], limit: int
                     ) -> Plan[list[Job]]:
        """A claim on Redis Cluster, one ``claim.lua`` call per queue. Over several
        queues, ``heads.lua`` first reads each one's candidates (nothing written); their
        merge in the global claim order says how many jobs to claim from each queue. A
        claimer racing in between can leave a queue short, so such a claim may return
        fewer jobs, never more and never out of any queue's own order."""
        names = list(dict.fromkeys(queues))
        if len(names) == 1:
            reply = yield Call("claim", self.k.queue(names[0]), args)
            return self.claimed(reply, str(args[0]))
        heads: list[tuple[int, str, str]] = []
        for queue in names:
            flat = yield Call("heads", self.k.queue(queue), (limit,))
            heads += [(int(flat[i]), flat[i + 1], queue) for i in range(0, len(flat), 2)]
        heads.sort()
        wanted: dict[str, int] = {}
        for _, _, queue in heads[:limit]:
            wanted[queue] = wanted.get(queue, 0) + 1
        order = {(queue, int(member[-20:])): n for n, (_, member, queue) in enumerate(heads)}
        jobs: list[Job] = []
        for queue, count in wanted.items():
            reply = yield Call("claim", self.k.queue(queue), (*args[:2], count, args[3]))
            jobs += self.claimed(reply, str(args[0]))
        jobs.sort(key=lambda job: order.get((job.queue, job.id), len(order)))
        return jobs

    def claimed(self, reply: list[Any], worker_id: str) -> list[Job]:
        """The jobs of a ``claim.lua`` reply."""
        jobs = []
        # The jobs of one claim share their lease's end, and those enqueued together their
        # creation and due times: each distinct value becomes a datetime once (three per
        # job were a third of the client's claim time on a 500-job batch).
        times: dict[str | int, datetime] = {}

        def when(value: str | int) -> datetime:
            moment = times.get(value)
            if moment is None:
                moment = times[value] = at(value)
            return moment

        for (job_id, queue, kind, payload, priority, attempts, max_attempts, unique_key,
             token, lease_until, created_at, seconds, headers, available_at, reserves,
             releases, timeouts, tags, snoozes) in reply:
            # The script has leased the job: decoding must not raise, or the batch would
            # be lost until its leases ran out (design §52).
            value, names = claimed(payload, headers)
            job = Job(
                id=int(job_id), queue=queue, kind=kind, payload=value,
                priority=int(priority), attempts=int(attempts),
                max_attempts=int(max_attempts), unique_key=unique_key,
                lease_token=int(token), lease_until=when(lease_until), worker_id=worker_id,
                created_at=when(created_at), lease=float(seconds),
                headers=names, available_at=when(available_at),
                reserves=int(reserves), releases=int(releases), timeouts=int(timeouts),
                tags=stored_tags(tags), snoozes=int(snoozes),
            )
            self.located.put(job.id, queue)
            jobs.append(job)
        return jobs

    def next_due(self, queues: Sequence[str]) -> Plan[float | None]:
        """One read-only script over the queues (``next_due.lua``), by the server's clock."""
        if not queues:
            return None
        if self.cluster:  # one read per queue (slot); the least wait wins
            waits = []
            for queue in dict.fromkeys(queues):
                reply = yield Call("next_due", self.k.queue(queue))
                if reply is not None:
                    waits.append(float(reply))
            return min(waits, default=None)
        keys = [key for queue in queues for key in self.k.queue(queue)]
        reply = yield Call("next_due", keys)
        return None if reply is None else float(reply)

    def due_now(self, queues: Sequence[str]) -> Plan[bool]:
        """``next_due.lua`` asked whether a job is due now, limits left aside."""
        if not queues:
            return False
        names = list(dict.fromkeys(queues))
        # One read per queue (slot) on a cluster, one for them all elsewhere.
        groups = (list(self.k.queue(name)) for name in names) if self.cluster else [
            [key for name in names for key in self.k.queue(name)]]
        for keys in groups:
            if (yield Call("next_due", keys, ("due",))) is not None:
                return True
        return False

    # -- calls on one job --------------------------------------------------------------

    def on_jobs(
        self, job_ids: Sequence[int], call: Callable[[list[tuple[int, str]]], Call],
        single: bool = False,
    ) -> Plan[list[Any]]:
        """Runs ``call([(item, queue), ...])`` on the queues of ``job_ids``; its script
        replies per item (with ``single``, once for its one item). Returns the replies,
        None where no job has that id.

        Queues come from this client's memory, else from the id index (``locate``). A job
        never changes queue, so reading the index before the script is safe: a job that
        vanishes in between (pruned) makes the script answer "missing". A remembered queue
        that turns out wrong (the data was flushed and ids reused) is read again once.
        """
        replies: list[Any] = [None] * len(job_ids)
        pending = list(range(len(job_ids)))
        fresh: set[int] = set()
        while pending:
            where = {i: q for i in pending if (q := self.located.get(job_ids[i])) is not None}
            unknown = [i for i in pending if i not in where]
            for start in range(0, len(unknown), ROUND):
                part = unknown[start:start + ROUND]
                found = yield Call("locate", (self.k.index,), [job_ids[i] for i in part])
                for i, queue in zip(part, found, strict=True):
                    if queue is not None:
                        where[i] = queue
                        fresh.add(i)
                        self.located.put(job_ids[i], queue)
            run = [(i, where[i]) for i in pending if i in where]
            if not run:
                break
            if self.cluster and not single:
                # One call per queue (slot), in the order of each queue's first item; the
                # replies go back into item order.
                slices: dict[str, list[tuple[int, str]]] = {}
                for i, queue in run:
                    slices.setdefault(queue, []).append((i, queue))
                run = [item for items in slices.values() for item in items]
                out = []
                for items in slices.values():
                    out += yield call(items)
            else:
                out = yield call(run)
            pending = []
            for (i, _), reply in zip(run, [out] if single else out, strict=True):
                if reply == "missing":
                    self.located.forget(job_ids[i])
                    if i not in fresh:
                        pending.append(i)
                else:
                    replies[i] = reply
        return replies

    def on_job(self, name: str, job_id: int, *args: str | int, only_job_key: bool = False
               ) -> Plan[Any]:
        """Script ``name`` on one job (KEYS: its hash, then its queue's GROUP); its
        reply, or None when no job has that id."""
        def call(run: list[tuple[int, str]]) -> Call:
            keys = self.k.with_job(run[0][1], job_id)
            return Call(name, keys[:1] if only_job_key else keys, args)

        [reply] = yield from self.on_jobs([job_id], call, single=True)
        return reply

    def grouped(self, name: str, run: list[tuple[int, str]],
                item: Callable[[int], Sequence[str | int]]) -> Call:
        """One script call over items of several queues: one key GROUP per distinct queue,
        and per item its group number followed by ``item(i)``."""
        groups: dict[str, int] = {}
        keys: list[str] = []
        args: list[str | int] = []
        for i, queue in run:
            if queue not in groups:
                groups[queue] = len(groups) + 1
                keys += self.k.queue(queue)
            args += [groups[queue], *item(i)]
        return Call(name, keys, args)

    def held(self, name: str, job_id: int, token: int, *args: str | int) -> Plan[Any]:
        """A fenced script: its reply, or ``LeaseLost`` when the lease is not held."""
        reply = yield from self.on_job(name, job_id, token, *args)
        if reply is None or reply == "lost":
            raise LeaseLost.stale(job_id, token)
        return reply

    def renew(self, job_id: int, token: int, extend: float) -> Plan[datetime]:
        reply = yield from self.held("renew", job_id, token, max(1, us(extend)), job_id)
        if refused_touch(reply):
            raise touch_refusal(job_id, token, reply)
        until_us, cancel_requested = reply
        until = at(until_us)
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
        self.located.forget(job_id)

    def complete_many(self, items: Sequence[tuple[int, int, str | None]]) -> Plan[list[bool]]:
        def item(i: int) -> tuple[int, int, str]:
            job_id, token, result = items[i]
            return job_id, token, opt(result)

        replies = yield from self.on_jobs(
            [job_id for job_id, _, _ in items],
            lambda run: self.grouped("complete_many", run, item),
        )
        for (job_id, _, _), reply in zip(items, replies, strict=True):
            if reply == "ok":
                self.located.forget(job_id)
        return [reply == "ok" for reply in replies]

    # -- chains and groups (docs/workflows.md) -------------------------------------------

    def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], conn: Any = None,
        fresh: Collection[str] = (),
    ) -> Plan[list[EnqueueResult]]:
        """The flow hash first, then the jobs (``enqueue``): a crash in between leaves a
        flow no job names, which nothing reads. A chain's hash then names its first step
        unless that step completed already (HSETNX: its completion wrote the next)."""
        refuse_connection(conn)
        if fresh:
            # Every queue of the flow counted against max_queues before anything is
            # written, the later steps' too (admit.lua); a client that saw them all
            # counted, or no cap, pays nothing.
            reply = yield Call("admit", (self.k.queues, self.k.server), flow.queues(jobs))
            if reply:
                raise too_many_queues(reply)
        key = self.k.flow(flow.flow_id)
        values: list[str | int] = ["kind", flow.kind, "size", flow.size,
                                   "remaining", flow.size, "step", 0]
        if flow.then is not None:
            values += ["then", encode_step(flow.then)]
        for i, step in enumerate(flow.steps, start=1):
            values += [f"s:{i}", encode_step(step)]
        yield Call("HSET", args=(key, *values), command=True)
        yield Call("ZADD", args=(self.k.flows, (yield from self.server_us()), flow.flow_id),
                   command=True)
        results = yield from self.enqueue(jobs)
        if flow.kind == "chain":
            yield Call("HSETNX", args=(key, "job_id", results[0].id), command=True)
        return results

    def complete_steps(self, items: Sequence[StepItem]) -> Plan[list[bool]]:
        """``complete_step.lua`` per item: each job's completion and follow-up are
        atomic together (the batch as a whole is not, unlike SQL's one transaction)."""
        done = []
        for item in items:
            done.append((yield from self.complete_step(*item)))
        return done

    def complete_step(
        self, job_id: int, token: int, result: str | None, link: FlowLink
    ) -> Plan[bool]:
        """One script (``complete_step.lua``) completes the job and enqueues what follows;
        on a cluster, three (``complete_step_sliced``)."""
        if self.cluster:
            return (yield from self.complete_step_sliced(job_id, token, result, link))
        tail = [self.k.ids, self.k.index, self.k.queues, self.k.flow(link.flow_id)]
        if link.queue is not None:
            tail += self.k.queue(link.queue)
        args = (token, opt(result), link.kind, link.index)

        def call(run: list[tuple[int, str]]) -> Call:
            return Call("complete_step", [*self.k.with_job(run[0][1], job_id), *tail], args)

        [reply] = yield from self.on_jobs([job_id], call, single=True)
        if reply == "noflow":
            raise BackendError(f"job {job_id} names flow {link.flow_id}, which is not "
                               "stored or already complete; nothing was changed")
        return bool(reply == "ok")

    def complete_step_sliced(
        self, job_id: int, token: int, result: str | None, link: FlowLink
    ) -> Plan[bool]:
        """A flow step's ack on Redis Cluster, where the job's queue, the flow (``{P}``)
        and the next job's queue lie in different slots (docs/design.md
        §45): ``complete_handoff.lua`` completes the job and records a
        handoff in its queue's slot, atomically; ``hand_off`` then applies it to the flow
        and writes what follows, each call idempotent, so a crash anywhere after the first
        leaves a handoff that a repeated ack or ``reclaim`` finishes exactly once."""
        where: list[str] = []

        def call(run: list[tuple[int, str]]) -> Call:
            where.append(run[0][1])
            keys = [*self.k.with_job(run[0][1], job_id), self.k.handoff(run[0][1])]
            return Call("complete_handoff", keys, (token, opt(result), header(link)))

        [reply] = yield from self.on_jobs([job_id], call, single=True)
        if not isinstance(reply, list):
            return False  # lost or missing: nothing changed
        if reply[0] == "again":  # a repeated ack: finish the handoff with what it stored
            result = reply[1][1:] if reply[1] else None
        if not (yield from self.hand_off(where[-1], job_id, result, link)) and reply[0] == "ok":
            raise BackendError(f"job {job_id} names flow {link.flow_id}, which is not "
                               "stored or already complete; the job was completed, "
                               "nothing followed it")
        return True

    def hand_off(self, queue: str, job_id: int, result: str | None, link: FlowLink
                 ) -> Plan[bool]:
        """Finishes the handoff of flow step ``job_id`` (of ``queue``), completed with
        ``result``: ``flow_step.lua`` applies it to the flow and hands out the next job's
        id, ``enqueue_step.lua`` writes that job under that id unless it exists, and the
        handoff ends (in the same script when the next job shares the queue). False when
        the flow is not stored: the handoff ends, nothing else happens."""
        reply = yield Call("flow_step", (self.k.ids, self.k.index, self.k.queues,
                                         self.k.flow(link.flow_id)),
                           (link.kind, link.index, opt(result)))
        handoff = self.k.handoff(queue)
        if reply and reply != "noflow":
            next_id, spec, value = reply
            job = decode_step(spec, value)
            same = job.queue == queue
            keys = [*self.k.queue(job.queue), *([handoff] if same else [])]
            yield Call("enqueue_step", keys, (
                next_id, job.queue, opt(job.kind), job.payload, job.priority,
                job.max_attempts, us(job.delay), opt(job.lease), opt(job.headers), job_id,
                opt(job.tags)))
            self.located.put(int(next_id), job.queue)
            if same:
                return True
        yield Call("HDEL", args=(handoff, job_id), command=True)
        return bool(reply != "noflow")

    def finish_handoffs(self, queue: str) -> Plan[None]:
        """Redis Cluster: finishes the handoffs of ``queue`` recorded more than
        ``HANDOFF_AGE`` ago, which a crash between a flow step's calls left behind
        (``complete_step_sliced``). Run by ``reclaim``; the acking client normally
        finishes each handoff itself, and a race with it is harmless (each call is
        idempotent)."""
        while True:
            flat = yield Call("handoffs", (self.k.handoff(queue),), (us(HANDOFF_AGE), ROUND))
            for i in range(0, len(flat), 3):
                job_id, text, result = int(flat[i]), flat[i + 1], flat[i + 2]
                try:
                    found = flow_link({HEADER: text})
                except BackendError:
                    found = None
                if found is None:
                    yield Call("HDEL", args=(self.k.handoff(queue), job_id), command=True)
                elif not (yield from self.hand_off(queue, job_id, result[1:] or None, found)):
                    log.warning("job %s of queue %r names flow %s, which is not stored; "
                                "nothing followed it", job_id, queue, found.flow_id)
            if len(flat) < 3 * ROUND:
                return

    def server_us(self) -> Plan[int]:
        """The server's clock in µs (TIME), as scripts read it."""
        seconds, micros = yield Call("TIME", command=True)
        return int(seconds) * 1_000_000 + int(micros)

    def prune_flows(self, older_than: float) -> Plan[None]:
        """Deletes the flows whose every step or member completed, made more than
        ``older_than`` ago. A finished flow never changes again, so reading one and
        deleting it need not be atomic; a running one is skipped, however old."""
        cutoff = (yield from self.server_us()) - us(older_than)
        kept = 0
        while True:
            ids = yield Call("ZRANGEBYSCORE", args=(self.k.flows, "-inf", f"({cutoff}", "LIMIT",
                                                    kept, ROUND), command=True)
            for flow_id in ids:
                key = self.k.flow(flow_id)
                remaining, then, job_id = yield Call(
                    "HMGET", args=(key, "remaining", "then", "job_id"), command=True)
                if (self.cluster and then is not None and job_id is not None
                        and (yield from self.written_later(int(job_id)))):
                    kept += 1  # its callback's handoff is not finished: it needs the flow
                elif remaining is None or int(remaining) == 0:
                    yield Call("UNLINK", args=(key,), command=True)
                    yield Call("ZREM", args=(self.k.flows, flow_id), command=True)
                else:
                    kept += 1
            if len(ids) < ROUND:
                return

    def written_later(self, job_id: int) -> Plan[bool]:
        """Redis Cluster: True while id ``job_id`` is handed out (indexed) but its job not
        written yet (``hand_off``). Prune deletes a job before its index entry, so a
        pruned job reads as written."""
        queue = yield Call("HGET", args=(self.k.index, job_id), command=True)
        if queue is None:
            return False
        return not (yield Call("EXISTS", args=(self.k.job(queue, job_id),), command=True))

    def get_flow(self, flow_id: str) -> Plan[FlowState | None]:
        kind, size, remaining, step, job = yield Call(
            "HMGET", args=(self.k.flow(flow_id), "kind", "size", "remaining", "step",
                           "job_id"), command=True)
        if kind is None:
            return None
        return FlowState(flow_id, kind, int(size), int(remaining), int(step),
                         None if job is None else int(job))

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Plan[list[RenewOutcome]]:
        def item(i: int) -> tuple[int, int, int]:
            job_id, token, extend = items[i]
            return job_id, token, max(1, us(extend))

        replies = yield from self.on_jobs(
            [job_id for job_id, _, _ in items],
            lambda run: self.grouped("renew_many", run, item),
        )
        out: list[RenewOutcome] = []
        for (job_id, token, _), r in zip(items, replies, strict=True):
            if refused_touch(r):
                out.append(touch_refusal(job_id, token, r))
            elif isinstance(r, list):
                out.append((at(r[0]), bool(r[1])))
            else:
                out.append(None)
        return out

    def fail(
        self, job_id: int, token: int, error: str | None, delay: float,
        detail: str | None = None,
    ) -> Plan[JobState]:
        state = yield from self.held("fail", job_id, token, opt(error), us(delay), opt(detail))
        return state  # type: ignore[no-any-return]

    def fail_many(self, items: Sequence[FailItem]) -> Plan[list[JobState | None]]:
        """One script over every item's queue (``fail_many.lua``): all or nothing, like
        one transaction, across queues too."""
        def item(i: int) -> tuple[int, int, str, int, str]:
            job_id, token, error, delay, detail = items[i]
            return job_id, token, opt(error), us(delay), opt(detail)

        replies = yield from self.on_jobs(
            [item[0] for item in items],
            lambda run: self.grouped("fail_many", run, item),
        )
        return [None if r in (None, "lost", "missing") else r for r in replies]

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None,
        error: str | None = None, detail: str | None = None,
    ) -> Plan[JobState]:
        state = yield from self.held("release", job_id, token, us(delay), opt(priority),
                                     opt(error), opt(detail))
        return state  # type: ignore[no-any-return]

    def snooze(
        self, job_id: int, token: int, delay: float, scope: SnoozeScope = "job"
    ) -> Plan[JobState]:
        """``snooze.lua``: the job's move and its queue's pause in one script. With
        ``scope="queue"`` the queue also gets a settings row: in the same script on one
        server ({P}:queues and {P}:configured as extra KEYS); on Redis Cluster, whose
        script may touch the queue's slot only, by ``register.lua`` first (a refused
        snooze then leaves the queue listed with default settings, nothing more)."""
        pausing = scope == "queue"

        def call(run: list[tuple[int, str]]) -> Call:
            keys = self.k.with_job(run[0][1], job_id)
            if pausing and not self.cluster:
                keys += [self.k.queues, self.k.configured]
            return Call("snooze", keys, (token, us(delay), scope))

        if pausing and self.cluster:
            queue = self.located.get(job_id)
            if queue is None:
                found = yield Call("locate", (self.k.index,), [job_id])
                queue = found[0]
            if queue is not None:
                self.located.put(job_id, queue)
                yield Call("register", (self.k.queues, self.k.configured), (queue,))
        [reply] = yield from self.on_jobs([job_id], call, single=True)
        if reply is None or reply == "lost":
            raise LeaseLost.stale(job_id, token)
        return reply  # type: ignore[no-any-return]

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None,
        detail: str | None = None,
    ) -> Plan[None]:
        yield from self.held("bury", job_id, token, opt(reason), opt(priority), opt(detail))

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
        reply = yield from self.on_job(name, job_id, *args)
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

    def schema_versions(self) -> Plan[tuple[int, int] | None]:
        """None: Redis keeps no schema versions (scripts load on first use). Reaches the
        server all the same (AUTH, SELECT), so a bad password or database fails here."""
        yield Call("PING", command=True)
        return None

    def get(self, job_id: int) -> Plan[JobInfo]:
        reply = yield from self.on_job("get", job_id, only_job_key=True)
        if reply is None:
            raise JobNotFound(f"no job with id {job_id}")
        now, flat = reply
        return info(record(flat), int(now))

    def queue_groups(self) -> Plan[list[tuple[list[str], list[str]]]]:
        """Every queue that ever held a job or was paused, sorted, in chunks of
        ``(names, keys)``."""
        names = sorted((yield Call("queues", (self.k.queues,))))
        chunks = [names[i:i + self.chunk] for i in range(0, len(names), self.chunk)]
        return [(chunk, [key for name in chunk for key in self.k.queue(name)])
                for chunk in chunks]

    def stats(self) -> Plan[dict[str, QueueStats]]:
        """Every queue with jobs, history or a settings row (configured or ever paused)."""
        out: dict[str, QueueStats] = {}
        configured: set[str] = set()
        if self.cluster:  # the {P}:configured set lies in another slot than the queues
            configured = set((yield Call("queues", (self.k.configured,))))
        for names, keys in (yield from self.queue_groups()):
            head = [] if self.cluster else [self.k.configured]
            counts = yield Call("stats", [*head, *keys], names)
            for name, c in zip(names, counts, strict=True):
                n = [int(v) for v in c[:9]]
                n[8] = n[8] or int(name in configured)
                if any(n):
                    age = c[9] if len(c) > 9 else None
                    out[name] = QueueStats(
                        name, available=n[0], scheduled=n[1], running=n[2], dead=n[3],
                        completed=n[4], cancelled=n[5], discarded=n[6], paused=bool(n[7]),
                        paused_until=dt(c[10]) if len(c) > 10 and n[7] else None,
                        oldest_available_age=None if age is None else int(age) / 1e6,
                    )
        return out

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int,
        kind: str | None = None, unique_key: str | None = None, tag: str | None = None,
    ) -> Plan[list[JobInfo]]:
        """Each chunk of queues gives its own first ``limit`` matches (``list.lua`` pages
        through them); the overall first ``limit`` are among those. No index holds every
        job of a kind, a unique key or a tag (``unique`` and ``finished`` name one job per
        key), so those filters are checked job by job, ``scan`` ids per queue per call."""
        if queue is None:
            chunks = yield from self.queue_groups()
        else:
            chunks = [([queue], self.k.queue(queue))]
        found: list[JobInfo] = []
        for names, keys in chunks:
            scan = max(16, 1024 // len(names))
            cursor, wanted = after, limit
            while wanted:
                cursor, now, flats = yield Call(
                    "list", keys, (cursor, wanted, opt(state), scan, opt(kind), opt(unique_key),
                                   opt(tag))
                )
                found += [info(record(flat), int(now)) for flat in flats]
                wanted -= len(flats)
                if not int(cursor):
                    break
        found.sort(key=lambda job: job.id)
        return found[:limit]

    def peek(self, queue: str, state: PeekState, limit: int) -> Plan[list[JobInfo]]:
        now, flats = yield Call("peek", self.k.queue(queue), (state, limit))
        return [info(record(flat), int(now)) for flat in flats]

    def priority_counts(self, queue: str) -> Plan[dict[int, int]]:
        flat = yield Call("priority_counts", self.k.queue(queue))
        return {int(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    # -- queue settings ------------------------------------------------------------------

    def configure_queue(
        self, queue: str, changes: Mapping[str, int | float | None]
    ) -> Plan[QueueConfig]:
        args: list[str] = [queue]
        for name, value in changes.items():
            if name not in QUEUE_SETTINGS:
                raise ValueError(f"unknown queue setting {name!r}")
            args += [name, setting_text(name, value)]
        if self.cluster:  # listed first: a crash in between leaves default settings
            yield Call("register", (self.k.queues, self.k.configured), (queue,))
            flat = yield Call("configure", (self.k.settings(queue),), args)
        else:
            keys = (self.k.queues, self.k.configured, self.k.settings(queue))
            flat = yield Call("configure", keys, args)
        return queue_config(queue, flat)

    def queue_configs(self) -> Plan[dict[str, QueueConfig]]:
        """Every queue with a settings row, by name: two calls per 256 such queues at
        most (clients re-read this every few seconds, so it must stay cheap)."""
        names = sorted((yield Call("queues", (self.k.configured,))))
        out: dict[str, QueueConfig] = {}
        for start in range(0, len(names), self.chunk):
            chunk = names[start:start + self.chunk]
            flats = yield Call("configs", [self.k.settings(name) for name in chunk])
            for name, flat in zip(chunk, flats, strict=True):
                out[name] = queue_config(name, flat)
        return out

    def configure_server(self, changes: Mapping[str, int | None]) -> Plan[ServerConfig]:
        """Stores ``max_queues`` in ``{P}:server``. The queues counted are those of
        ``{P}:queues`` (every queue that ever held a job, was paused or configured), so
        there is nothing to count afresh."""
        if "max_queues" in changes:
            cap = changes["max_queues"]
            if cap is None:
                yield Call("HDEL", args=(self.k.server, "max_queues"), command=True)
            else:
                yield Call("HSET", args=(self.k.server, "max_queues", cap), command=True)
        return (yield from self.server_config())

    def server_config(self) -> Plan[ServerConfig]:
        cap = yield Call("HGET", args=(self.k.server, "max_queues"), command=True)
        if cap is None:
            return ServerConfig()
        known = yield Call("SCARD", args=(self.k.queues,), command=True)
        return ServerConfig(int(cap), int(known))

    def server_version(self) -> Plan[str]:
        info = yield Call("INFO", args=("server",), command=True)
        return str(info["redis_version"])

    def oldest_transaction_age(self) -> Plan[float | None]:
        """None: Redis has no long-lived transactions (MULTI/EXEC and scripts run whole),
        so nothing holds old data back."""
        return None
        yield  # a plan is a generator, even one that sends nothing

    def set_paused(self, queue: str, paused: bool, until: PauseEnd = None) -> Plan[None]:
        """``pause.lua``; a timed pause's end goes as µs since the epoch, or µs from now
        by the server's clock."""
        at_us = us_at(until) if paused and isinstance(until, datetime) else None
        after = us(until) if paused and isinstance(until, (int, float)) else None
        args = (queue, int(paused), opt(at_us), opt(after))
        if self.cluster:  # listed first: a crash in between leaves the queue unpaused
            yield Call("register", (self.k.queues, self.k.configured), (queue,))
            yield Call("pause", self.k.queue(queue), args)
        else:
            yield Call("pause", [self.k.queues, self.k.configured, *self.k.queue(queue)],
                       args)

    def paused(self) -> Plan[list[str]]:
        stats = yield from self.stats()
        return [name for name, s in stats.items() if s.paused]

    # -- maintenance ---------------------------------------------------------------------

    def reclaim(self, limit: int) -> Plan[int]:
        """Up to ``limit`` expired leases and up to ``limit`` dead jobs past their queue's
        ``dead_retention``, in rounds of at most ``ROUND`` of each."""
        reclaimed = discarded = 0
        for names, keys in (yield from self.queue_groups()):
            if self.cluster:  # one queue per chunk there
                yield from self.finish_handoffs(names[0])
            while reclaimed < limit or discarded < limit:
                want = min(ROUND, limit - reclaimed), min(ROUND, limit - discarded)
                got = yield Call("reclaim", keys, want)
                reclaimed += got[0]
                discarded += got[1]
                if all(n < w or not w for n, w in zip(got, want, strict=True)):
                    break  # each duty is done: short of its want, or wanting nothing
        return reclaimed + discarded

    def prune(self, older_than: float) -> Plan[int]:
        """History jobs in rounds; also finished flows (``prune_flows``; not counted)."""
        yield from self.prune_flows(older_than)
        pruned = 0
        for _, keys in (yield from self.queue_groups()):
            while True:
                if self.cluster:
                    # The jobs go first, their index entries and global keys after (the
                    # {P} slot): a crash in between leaves entries that name no job,
                    # which readers take for "no such job" and enqueues for a free key.
                    reply = yield Call("prune", keys, (us(older_than), ROUND))
                    ids, unique_keys = reply[0::2], reply[1::2]
                    if ids:
                        yield Call("HDEL", args=(self.k.index, *ids), command=True)
                    held = [v for job_id, key in zip(ids, unique_keys, strict=True) if key
                            for v in (key, job_id, "", "")]
                    if held:  # a key still naming its pruned job goes (unreserve.lua)
                        yield Call("unreserve", (self.k.global_keys, self.k.global_at), held)
                    got = len(ids)
                else:
                    got = yield Call("prune", [self.k.index, self.k.global_keys, *keys],
                                     (us(older_than), ROUND))
                pruned += got
                if got < ROUND:
                    break
        return pruned

    def drop(self) -> Plan[int]:
        """Not part of the contract: deletes every key under this prefix (``leaseq bench``
        and tests clean up with it). SCAN with the escaped prefix pattern (keys.py), so
        only this prefix's keys match."""
        cursor, deleted = 0, 0
        while True:
            cursor, keys = yield Call("SCAN", args=(cursor, "MATCH", self.k.pattern(),
                                                    "COUNT", 1000), command=True)
            if keys:
                deleted += yield Call("UNLINK", args=keys, command=True)
            if int(cursor) == 0:
                return deleted


def info(h: dict[str, str], now: int) -> JobInfo:
    """A job hash as ``get`` shows it; ``now`` is the server's time in µs. Absent counters
    are 0, and a job that never changed state was last updated when it was created."""
    state = h["state"]
    available_at = int(h["available_at"])
    live = "finished_at" not in h
    if state == "available" and available_at > now:
        state = "scheduled"
    lease = h.get("lease")
    return JobInfo(
        id=int(h["id"]), queue=h["queue"], kind=h.get("kind"),
        state=state,  # type: ignore[arg-type]
        payload=stored(h["payload"]), priority=int(h["priority"]),
        attempts=int(h["attempts"]), max_attempts=int(h["max_attempts"]),
        unique_key=h.get("unique_key"), available_at=at(available_at) if live else None,
        lease_until=dt(h.get("lease_until")), worker_id=h.get("worker_id"),
        created_at=at(h["created_at"]), started_at=dt(h.get("started_at")),
        finished_at=dt(h.get("finished_at")),
        result=stored(h.get("result")), error=h.get("error"),
        cancel_requested=h.get("cancel_requested") == "1",
        reserves=int(h.get("reserves", 0)), timeouts=int(h.get("timeouts", 0)),
        releases=int(h.get("releases", 0)), buries=int(h.get("buries", 0)),
        kicks=int(h.get("kicks", 0)), failed_at=dt(h.get("failed_at")),
        updated_at=at(h.get("updated_at") or h["created_at"]),
        lease=None if lease is None else float(lease), headers=stored(h.get("headers")),
        error_detail=error_detail(h.get("error"), stored(h.get("error_detail"))),
        tags=stored_tags(h.get("tags")), snoozes=int(h.get("snoozes", 0)),
    )


def job_args(group: int, job: NewJob) -> list[str | int]:
    """The 14 ARGV values of one job for ``enqueue.lua`` (the global flag last)."""
    run_at = None if job.run_at is None else us_at(job.run_at)
    window = us(job.unique_for) if job.unique_for and job.unique_key is not None else None
    return [group, job.queue, opt(job.kind), job.payload, job.priority, job.max_attempts,
            opt(job.unique_key), us(job.delay), opt(run_at), opt(job.lease), opt(window),
            opt(job.headers), opt(job.tags), int(job.unique_global)]


def too_many_queues(reply: Sequence[Any]) -> TooManyQueues:
    """The refusal ``{"queues", name, max_queues, n}`` of enqueue.lua or allocate.lua."""
    return TooManyQueues(f"queue {reply[1]!r} would be queue {reply[3]} of at most "
                         f"max_queues={reply[2]}; nothing was enqueued")


def queue_full(queue: str, cap: str | int, written: Sequence[int] = ()) -> QueueFull:
    """The refusal of an enqueue by queue ``queue``'s max_jobs."""
    if written:
        return QueueFull(
            f"queue {queue!r} holds its max_jobs={cap} live jobs; its jobs were not "
            f"enqueued, but a producer filled it during this batch and the jobs "
            f"{written} of other queues were enqueued already"
        )
    return QueueFull(f"queue {queue!r} holds its max_jobs={cap} live jobs; nothing was "
                     "enqueued")


def refuse_connection(conn: Any) -> None:
    if conn is not None:
        raise ConfigurationError(
            "redis:// has no transactions to join; transactional enqueue and ack need "
            "SQLite, PostgreSQL or MySQL"
        )
