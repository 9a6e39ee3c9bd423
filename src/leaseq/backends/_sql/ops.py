"""The job state machine as SQL plans, written once for every SQL dialect.

Each method returns a plan (see ``plan.py``). A ``Dialect`` supplies the query texts and
value conversions; where one dialect can do a step in fewer statements (PostgreSQL's
``UPDATE ... FROM (... SKIP LOCKED) RETURNING``), its subclass of ``SqlOps`` replaces that
plan and keeps the same result.

Fencing lives here: every holder write first locks the row by ``(id, lease_token,
state='running')`` (``lock_held``) and raises ``LeaseLost`` when nothing matches, so a
stale holder changes nothing; a ``nack``, ``release`` or ``bury`` that matches nothing
first asks whether it repeats the call that ended its lease (``repeat``,
``_core/ended.py``) and then returns that call's result instead.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, cast

from leaseq._core.ended import EXPIRED, Verb, ended_as, repeated
from leaseq._core.flow import FlowLink, FlowState, joined
from leaseq._core.job import (
    LIVE_STATES,
    QUEUE_SETTINGS,
    TERMINAL_STATES,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueConfig,
    QueueStats,
    ServerConfig,
    error_detail,
)
from leaseq._core.limits import (
    after_pause,
    allowance,
    next_start,
    snoozed_too_often,
    tokens_now,
)
from leaseq._core.validate import claimed, discard_record, stored, stored_tags
from leaseq.backends._flows import decode_step, encode_step
from leaseq.backends._sql.plan import (
    UNIQUE_RETRIES,
    Plan,
    Result,
    Stmt,
    latest_migration,
    load_queries,
)
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
    InvalidArgument,
    JobNotFound,
    JobStateError,
    LeaseLost,
    QueueFull,
    TooManyQueues,
    TouchLimitExceeded,
)

# Column order of every query that returns a leased job (claim, claim_candidates, ...).
JOB_COLUMNS = (
    "id, queue, kind, payload, priority, attempts, max_attempts, unique_key, "
    "lease_token, lease_until, worker_id, created_at, available_at"
)
# The queue settings stored as integers; the rest are seconds (float).
INT_SETTINGS = frozenset(f.name for f in fields(QueueConfig) if str(f.type).startswith("int"))


class Dialect:
    """Query texts and value conversions of one SQL dialect."""

    name: str
    package: str
    paramstyle: str
    returning: bool = True  # UPDATE ... RETURNING
    # One branch of a UNION ALL that has its own ORDER BY and LIMIT.
    branch = "({})"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.q = load_queries(self.package, prefix, self.paramstyle)

    def each(
        self, name: str, branches: Sequence[Mapping[str, Any]], shared: Mapping[str, Any]
    ) -> Stmt:
        """Statement ``name`` run once per mapping in ``branches``, as one ``UNION ALL``
        (one round trip, whatever the number of branches).

        Branch ``i`` binds each of its own parameters ``key`` as ``key_i``; ``shared``
        parameters are bound once for all. The text is built once per number of branches
        and kept with the dialect's queries.
        """
        if len(branches) == 1:
            return Stmt(name, {**shared, **branches[0]})
        keys = sorted(branches[0])
        union = f"{name}__{len(branches)}__{'_'.join(keys)}"
        if union not in self.q:
            names = "|".join(map(re.escape, keys))
            if self.paramstyle == "pyformat":
                mark, place = re.compile(rf"%\(({names})\)s"), r"%(\g<1>_{})s"
            else:
                mark, place = re.compile(rf":({names})(?!\w)"), r":\g<1>_{}"
            self.q[union] = "\nUNION ALL\n".join(
                self.branch.format(mark.sub(place.format(i), self.q[name]))
                for i in range(len(branches))
            )
        params = dict(shared)
        for i, branch in enumerate(branches):
            params.update({f"{key}_{i}": value for key, value in branch.items()})
        return Stmt(union, params)

    def pairs(self, pairs: Sequence[tuple[int, int]]) -> Any:
        """A list-of-``(id, lease_token)`` parameter for a row-value ``IN``."""
        return list(pairs)

    def later(self, now: Any, seconds: float) -> Any:
        """``now`` as read from the database, plus ``seconds``, exactly as the database
        would add them (a claim stores and returns this value)."""
        return now + timedelta(seconds=seconds)

    def clock(self, value: Any) -> Any:
        """The database's clock as a claim reads it, as ``later`` and a time parameter
        take it."""
        return value

    def span(self, seconds: float) -> Any:
        """A duration parameter."""
        return seconds

    def ts(self, value: datetime | None) -> Any:
        """An absolute time parameter (aware, UTC)."""
        return value

    def dt(self, value: Any) -> datetime | None:
        """A time read back from the database, as an aware UTC datetime."""
        if value is None or (isinstance(value, datetime) and value.tzinfo):
            return value.astimezone(timezone.utc) if value is not None else None
        return value.replace(tzinfo=timezone.utc)  # type: ignore[no-any-return]

    def ids(self, ids: Sequence[int]) -> Any:
        """A list-of-ids parameter for ``IN``/``ANY``."""
        return list(ids)

    def names(self, names: Sequence[str]) -> Any:
        """A list-of-names parameter for ``IN``/``ANY``."""
        return list(names)

    def row(self, job: NewJob) -> dict[str, Any]:
        return {
            "queue": job.queue,
            "kind": job.kind,
            "payload": job.payload,
            "priority": job.priority,
            "max_attempts": job.max_attempts,
            "unique_key": job.unique_key,
            "delay": self.span(job.delay),
            "run_at": self.ts(job.run_at),
            "lease": job.lease,  # seconds, as stored (not a span: no arithmetic on it)
            "headers": job.headers,  # JSON text or None, stored as it is
            "tags": job.tags,  # a JSON array's text or None, as headers
        }


TouchVerdict = Literal["extend", "soon", "touches", "duration"]


def lease_for(
    explicit: float | None, own: float | None, queue_default: float | None,
    queue_max: float | None, fallback: float,
) -> float:
    """The lease a claim gives one job (``Backend.claim``): the claim's ``explicit``
    lease, else the job's ``own``, else its queue's default, else the client's
    ``fallback``; capped by the queue's ``max_lease``. PostgreSQL's claim statement says
    the same in SQL."""
    if explicit is not None:
        seconds = explicit
    elif own is not None:
        seconds = own
    else:
        seconds = queue_default if queue_default is not None else fallback
    return seconds if queue_max is None else min(seconds, queue_max)


def touch_verdict(
    touches: int, age: float | None, quiet: float | None, max_touches: int | None,
    max_touch_duration: float | None, min_touch_interval: float | None,
) -> TouchVerdict:
    """What a heartbeat may do to a lease under its queue's touch limits (``Backend.renew``):
    ``"touches"`` or ``"duration"``, refused (``max_touches`` extensions made already, or
    the lease began more than ``max_touch_duration`` ago); ``"soon"``, a success without a
    write (the previous extension, or the lease's start, is less than
    ``min_touch_interval`` ago); else ``"extend"``. ``age`` and ``quiet`` are the seconds
    since the lease began and since it was last extended (None for a lease taken before
    migration 0004, which has no start on record). PostgreSQL's ``renew_many`` statement
    says the same in SQL."""
    if max_touches is not None and touches >= max_touches:
        return "touches"
    if max_touch_duration is not None and age is not None and age > max_touch_duration:
        return "duration"
    if min_touch_interval is not None and quiet is not None and quiet < min_touch_interval:
        return "soon"
    return "extend"


def touch_refusal(
    job_id: int, token: int, verdict: TouchVerdict, touches: int, age: float | None,
    max_touch_duration: float | None,
) -> TouchLimitExceeded:
    """The error of a refused heartbeat (``verdict`` "touches" or "duration")."""
    if verdict == "touches":
        return TouchLimitExceeded(
            f"job {job_id}: lease {token} was extended {touches} times, the queue's "
            "max_touches; it will run out"
        )
    return TouchLimitExceeded(
        f"job {job_id}: lease {token} began {age or 0.0:.3f} s ago, past the queue's "
        f"max_touch_duration of {max_touch_duration} s; it will run out"
    )


class SqlOps:
    """Plans for every contract method; see ``backends.base.Backend`` for the states."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect

    def single(self, operation: str, jobs: Sequence[NewJob] = ()) -> bool:
        """True when this dialect runs ``operation`` as one statement, which needs no
        explicit transaction around it."""
        return False

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(
        self, jobs: Sequence[NewJob], capped: Sequence[str] = (), fresh: Sequence[str] = ()
    ) -> Plan[list[EnqueueResult]]:
        """Inserts the batch; ``capped`` are the batch's queues the client believes have
        ``max_jobs`` (see ``Backend.enqueue``), in name order. Their settings rows are
        locked first, in that order (two batches cannot deadlock on them), which makes the
        enqueuers of a capped queue count its jobs one after another; after the inserts
        each is counted. Other queues cost nothing more. ``fresh`` queues (not seen
        counted against ``max_queues``) are admitted first (``admit_queues``)."""
        if fresh:
            yield from self.admit_queues(fresh)
        caps: dict[str, int] = {}
        for queue in capped:
            r = yield Stmt("lock_queue_cap", {"queue": queue})
            if r.rows and r.rows[0][0] is not None:
                caps[queue] = int(r.rows[0][0])
        results = yield from self.insert_all(jobs)
        if caps:
            yield from self.check_caps(caps, jobs, results)
        return results

    def admit_queues(self, fresh: Sequence[str]) -> Plan[None]:
        """Counts the ``fresh`` queues against ``max_queues``, under the server row's
        lock (taken before any queue's, so no deadlock with ``lock_queue_cap``), or
        raises ``TooManyQueues`` having written nothing. A queue already holding jobs,
        history or settings is counted without refusal: it exists."""
        r = yield Stmt("lock_server")
        cap = r.rows[0][0] if r.rows else None
        if cap is None:
            return  # the client's belief was stale: no cap now
        new: list[str] = []
        uncounted: list[str] = []
        for queue in fresh:
            counted = yield Stmt("queue_counted", {"queue": queue})
            if counted.rows:
                continue
            uncounted.append(queue)
            used = yield Stmt("queue_in_use", {"queue": queue})
            if not int(used.rows[0][0]):
                new.append(queue)
        if new:
            r = yield Stmt("count_queues")
            if int(r.rows[0][0]) + len(new) > int(cap):
                raise TooManyQueues(
                    f"queue {new[0]!r} would be queue {int(r.rows[0][0]) + 1} of at most "
                    f"max_queues={int(cap)}; nothing was enqueued")
        for queue in uncounted:
            yield Stmt("add_queue_name", {"queue": queue})

    def configure_server(self, changes: Mapping[str, int | None]) -> Plan[ServerConfig]:
        """Stores ``max_queues``; a cap set counts the queues afresh (one read of the
        jobs, the history and the settings), under the server row's lock."""
        if "max_queues" in changes:
            cap = changes["max_queues"]
            yield Stmt("set_max_queues", {"max_queues": cap})
            yield Stmt("clear_queue_names")
            if cap is not None:
                yield Stmt("fill_queue_names")
        return (yield from self.server_config())

    def server_config(self) -> Plan[ServerConfig]:
        r = yield Stmt("server_config")
        cap = r.rows[0][0] if r.rows else None
        if cap is None:
            return ServerConfig()
        return ServerConfig(int(cap), int(r.rows[0][1]))

    def check_caps(
        self, caps: Mapping[str, int], jobs: Sequence[NewJob], results: Sequence[EnqueueResult]
    ) -> Plan[None]:
        """Raises ``QueueFull`` when a capped queue that gained jobs now holds more than
        its ``max_jobs``, after taking back this batch's rows: the runner rolls back too,
        but inside a caller's transaction that has no savepoint (psycopg's implicit
        transaction) the rows would otherwise stay for the caller to commit."""
        added = {jobs[i].queue for i, r in enumerate(results) if r.created}
        for queue, cap in caps.items():
            if queue not in added:
                continue  # nothing written to it: a full queue refuses only new jobs
            r = yield Stmt("live_count", {"queue": queue, "cap": cap + 1})
            if int(r.rows[0][0]) > cap:
                new = [result.id for result in results if result.created]
                yield Stmt("delete_new_jobs", {"ids": self.d.ids(new)})
                raise QueueFull(
                    f"queue {queue!r} holds its max_jobs={cap} live jobs; nothing was enqueued"
                )

    def insert_all(self, jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
        results: list[EnqueueResult | None] = [None] * len(jobs)
        plain = [i for i, job in enumerate(jobs) if job.unique_key is None]
        if plain:
            ids = yield from self.insert_plain([jobs[i] for i in plain])
            for i, job_id in zip(plain, ids, strict=True):
                results[i] = EnqueueResult(job_id, True)
        # Keyed rows go in one global order, so two batches that share keys wait on each
        # other instead of deadlocking (each would otherwise hold a key the other needs).
        # Global keys first, by key alone: they are shared by every queue.
        keyed = sorted((i for i, job in enumerate(jobs) if job.unique_key is not None),
                       key=lambda i: (not jobs[i].unique_global,
                                      "" if jobs[i].unique_global else jobs[i].queue,
                                      jobs[i].unique_key or "", i))
        for i in keyed:
            results[i] = yield from self.insert_unique(jobs[i])
        return [r for r in results if r is not None]

    def insert_plain(self, jobs: Sequence[NewJob]) -> Plan[list[int]]:
        # The lease, headers and tags columns are written only when some job has one of
        # them: one more bound parameter per row cost SQLite's executemany about 6 %.
        full = any(job.lease is not None or job.headers is not None or job.tags is not None
                   for job in jobs)
        name = "insert_full_job" if full else "insert_job"
        if len(jobs) == 1:
            r = yield Stmt(name, self.d.row(jobs[0]))
            return [self.new_id(r)]
        r = yield Stmt(name, [self.d.row(job) for job in jobs], many=True)
        return [row[0] for row in r.rows]

    def insert_unique(self, job: NewJob) -> Plan[EnqueueResult]:
        """Inserts a keyed job unless a live twin holds the key (then returns the twin).

        With ``unique_for`` history is read only *after* the insert succeeded: had a twin
        still been live, the insert would have waited for it to commit its move to
        history (or found it live), so the read, a later statement under READ COMMITTED,
        sees any twin that finished. Reading first would miss a twin finishing between the
        read and the insert. A recent twin found, the row is taken back."""
        # unique_scope="global": the key goes into global_key too, unique in every queue.
        insert, recent, find = (("insert_global_job", "recent_global_twin", "find_global")
                                if job.unique_global else
                                ("insert_unique_job", "recent_twin", "find_unique"))
        for _ in range(UNIQUE_RETRIES):
            r = yield Stmt(insert, self.d.row(job), duplicate_ok=True)
            if not r.duplicate and (r.rows or r.rowcount == 1):
                job_id = self.new_id(r)
                if not job.unique_for:
                    return EnqueueResult(job_id, True)
                params = {"queue": job.queue, "unique_key": job.unique_key,
                          "unique_for": self.d.span(job.unique_for)}
                twin = yield Stmt(recent, params)
                if not twin.rows:
                    return EnqueueResult(job_id, True)
                yield Stmt("delete_new_jobs", {"ids": self.d.ids([job_id])})
                return EnqueueResult(int(twin.rows[0][0]), False)
            found = yield Stmt(find, {"queue": job.queue, "unique_key": job.unique_key})
            if found.rows:
                return EnqueueResult(int(found.rows[0][0]), False)
            # The twin left the live table between our insert and our lookup: insert again.
        raise BackendError(f"unique key {job.unique_key!r} kept changing hands; try again")

    @staticmethod
    def new_id(r: Result) -> int:
        return int(r.rows[0][0] if r.rows else r.lastrowid)  # type: ignore[arg-type]

    # -- claim and lease -------------------------------------------------------------------

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float | None, limit: int,
        default_lease: float = 30.0, limited: Sequence[str] = (),
    ) -> Plan[list[tuple[Any, ...]]]:
        """One locking read of every queue's candidates (paused queues excluded in SQL)
        that also returns the job columns, the database's clock, and each job's own lease
        with its queue's ``default_lease`` and ``max_lease``; then one ``UPDATE`` of the
        chosen ids per distinct lease (``lease_for``; usually one). MySQL first reads where
        to start, see ``claim_branches``. The jobs are built from the rows read, so MySQL
        needs no re-read for want of ``UPDATE ... RETURNING``.

        ``limited`` queues (in name order) are first read under lock (``allowances``),
        each branch then takes at most what its limits allow, and the tokens spent are
        written back (``spend``).

        Returns the rows as leased; ``jobs`` makes them ``Job``s once the transaction has
        committed (``SqlBackend.claim``), so no payload is decoded while the rows are
        locked and no value, however bad, can undo the claim (design §52)."""
        names = list(dict.fromkeys(queues))  # a repeated queue would return its rows twice
        takes, rated = yield from self.allowances(limited, limit)
        names = [name for name in names if takes.get(name, 1) > 0]
        if not names:
            return []
        branches = yield from self.claim_branches(names, [n for n in names if n not in takes])
        if not branches:
            return []
        for branch in branches:
            take = takes.get(branch["queue"])
            branch["take"] = limit if take is None else take
            branch["gate"] = int(take is None)
        r = yield self.d.each("claim_candidates", branches, {})
        if not r.rows:
            return []
        # Each queue's candidates come in index order; merge them into the global order.
        rows = sorted(r.rows, key=lambda c: (-c[4], c[12], c[0]))[:limit]
        now = self.d.clock(rows[0][13])
        by_lease: dict[float, list[tuple[Any, ...]]] = {}
        for c in rows:
            by_lease.setdefault(lease_for(lease, c[14], c[15], c[16], default_lease), []).append(c)
        leased: list[tuple[Any, ...]] = []
        for seconds, group in by_lease.items():
            leased += yield from self.lease_rows(group, seconds, now, worker_id)
        yield from self.spend(rated, leased)
        return leased

    def allowances(
        self, limited: Sequence[str], limit: int
    ) -> Plan[tuple[dict[str, int], set[str]]]:
        """How many jobs each limited queue may start in this claim, and which of them
        have a rate, read (and on PostgreSQL and MySQL locked until the claim commits)
        from their settings rows. A queue missing from the answer has no settings row or
        is paused; the claim treats it as any other queue. No queues, no statement."""
        if not limited:
            return {}, set()
        r = yield Stmt("lock_limits", {"names": self.d.names(limited)})
        counted = [row[0] for row in r.rows if row[1] is not None]
        running: dict[str, int] = {}
        if counted:
            c = yield Stmt("running_counts", {"names": self.d.names(counted)})
            running = {queue: int(n) for queue, n in c.rows}
        takes: dict[str, int] = {}
        rated: set[str] = set()
        for name, concurrency, rate, burst, tokens, elapsed in r.rows:
            have = None
            if rate is not None:
                rated.add(name)
                have = tokens_now(float(rate), burst, None if tokens is None else float(tokens),
                                  None if elapsed is None else float(elapsed))
            takes[name] = allowance(limit, concurrency, running.get(name, 0),
                                    None if rate is None else float(rate), have)
        return takes, rated

    def spend(self, rated: Collection[str], leased: Sequence[tuple[Any, ...]]) -> Plan[None]:
        """Takes a token from its queue's bucket for every job started in a ``rated``
        queue (``leased``: the rows as leased, the queue second). The database refills
        the bucket to its clock as it writes (``spend_tokens``): the allowance was worked
        out from no more tokens than that, so none goes negative."""
        for queue in rated:
            started = sum(1 for row in leased if row[1] == queue)
            if started:
                yield Stmt("spend_tokens", {"queue": queue, "started": started})

    def next_due(self, queues: Sequence[str]) -> Plan[float | None]:
        """One read per queue (``next_due`` in queries.sql), judged by
        ``limits.next_start``; the least wait wins."""
        best: float | None = None
        for queue in dict.fromkeys(queues):
            row = yield from self.due_row(queue)
            earliest, paused, concurrency, running, rate, burst, tokens, elapsed, held = row
            if paused:
                continue
            have = None if rate is None else tokens_now(
                float(rate), burst, None if tokens is None else float(tokens),
                None if elapsed is None else float(elapsed))
            wait = next_start(None if earliest is None else float(earliest), int(running or 0),
                              concurrency, None if rate is None else float(rate), have)
            wait = after_pause(wait, None if held is None else float(held))
            if wait is not None and (best is None or wait < best):
                best = wait
        return best

    def due_now(self, queues: Sequence[str]) -> Plan[bool]:
        """Whether a queue of ``queues`` that is not paused holds a job due now, limits or
        not (``next_due``'s rows, without their limits; a timed pause in force counts as
        a pause)."""
        for queue in dict.fromkeys(queues):
            row = yield from self.due_row(queue)
            earliest, paused, held = row[0], row[1], row[-1]
            if paused or (held is not None and float(held) > 0):
                continue
            if earliest is not None and float(earliest) <= 0:
                return True
        return False

    def due_row(self, queue: str) -> Plan[tuple[Any, ...]]:
        """``next_due``'s row for one queue: seconds until its earliest available job is
        due, then paused, concurrency_limit, running, rate_per_sec, rate_burst,
        rate_tokens, the seconds since the bucket was spent, and the seconds until a timed
        pause ends (<= 0 or None: none in force)."""
        r = yield Stmt("next_due", {"queue": queue})
        return tuple(r.rows[0])

    def lease_rows(
        self, rows: list[tuple[Any, ...]], seconds: float, now: Any, worker_id: str
    ) -> Plan[list[tuple[Any, ...]]]:
        """``claim_ids`` of candidate ``rows`` that get the same lease; the rows as leased,
        with the lease applied, then the headers, the counters and the tags."""
        until = self.d.later(now, seconds)
        params = {"ids": self.d.ids([c[0] for c in rows]), "worker_id": worker_id,
                  "until": until, "now": now}
        r = yield Stmt("claim_ids", params)
        if r.rowcount == len(rows):
            # What claim_ids just wrote, from values read under the same lock.
            return [(*c[:5], c[5] + 1, c[6], c[7], c[8] + 1, until, worker_id, c[11], c[12],
                     seconds, c[17], c[18] + 1, c[19], c[20], c[21], c[22]) for c in rows]
        # Cannot happen while the rows stay locked from read to update (FOR UPDATE on
        # MySQL, BEGIN IMMEDIATE on SQLite); if it ever does, report only what this claim
        # really leased, as stored.
        r = yield Stmt("jobs_by_ids", params)
        tokens = {c[0]: c[8] + 1 for c in rows}
        return [(*j[:13], seconds, *j[13:]) for j in r.rows if tokens.get(j[0]) == j[8]]

    def claim_branches(
        self, queues: Sequence[str], gated: Collection[str] = ()
    ) -> Plan[list[dict[str, Any]]]:
        """The parameters of each queue's branch of ``claim_candidates`` (``claim`` adds
        each one's take and gate); no branch, no locking read. ``gated`` queues are those
        claimed without a worked-out take."""
        return [{"queue": queue} for queue in queues]
        yield  # unreachable: makes this a plan that runs no statement

    def jobs(self, rows: list[tuple[Any, ...]]) -> list[Job]:
        """Leased jobs in claim order from rows of ``JOB_COLUMNS`` followed by the lease
        applied, in seconds, the headers, the counters reserves (this lease
        included), releases and timeouts, the tags and the snoozes (columns added later
        come last, so that none moves an index). Decoded job by job, never raising: a job whose
        payload or headers do not decode carries an ``Undecodable`` payload
        (``validate.claimed``), for the client to bury."""
        rows = sorted(rows, key=lambda r: (-r[4], r[12], r[0]))
        convert = self.d.dt
        # A claim's jobs share their lease's end, and jobs enqueued together their
        # creation and due times: each distinct value is converted once (three
        # conversions a job were a tenth of a 500-job claim on MariaDB).
        times: dict[Any, datetime | None] = {}

        def dt(value: Any) -> datetime | None:
            if value in times:
                return times[value]
            moment = times[value] = convert(value)
            return moment

        jobs = []
        for r in rows:
            payload, headers = claimed(r[3], r[14])
            jobs.append(Job(
                id=int(r[0]), queue=r[1], kind=r[2], payload=payload, priority=r[4],
                attempts=r[5], max_attempts=r[6], unique_key=r[7], lease_token=int(r[8]),
                lease_until=dt(r[9]), worker_id=r[10], created_at=dt(r[11]),  # type: ignore[arg-type]
                lease=float(r[13]), headers=headers, available_at=dt(r[12]),
                reserves=int(r[15]), releases=int(r[16]), timeouts=int(r[17]),
                tags=stored_tags(r[18]), snoozes=int(r[19]),
            ))
        return jobs

    def renew(self, job_id: int, token: int, extend: float) -> Plan[tuple[datetime, bool]]:
        """``renew_many`` of one job, its refusals raised: ``LeaseLost`` for a stale
        lease, ``TouchLimitExceeded`` when a touch limit refused the extension (nothing
        was written either way). Returns ``(lease_until, cancel_requested)``."""
        [outcome] = yield from self.renew_many([(job_id, token, extend)])
        if outcome is None:
            raise LeaseLost.stale(job_id, token)
        if isinstance(outcome, TouchLimitExceeded):
            raise outcome
        return outcome

    def lock_held(self, job_id: int, token: int) -> Plan[tuple[int, int, bool] | None]:
        """Locks the job held under ``token``: ``(attempts, max_attempts,
        cancel_requested)``, or None when that lease does not hold it."""
        r = yield Stmt("lock_held", {"id": job_id, "token": token})
        if not r.rows:
            return None
        attempts, max_attempts, cancel_requested = r.rows[0]
        return attempts, max_attempts, bool(cancel_requested)

    def repeat(self, job_id: int, token: int, verb: Verb) -> Plan[JobState]:
        """``verb`` by lease ``token``, which no longer holds the job: what the call that
        ended that lease returned, when it was this verb's and the lease is still the
        job's last ended one (a repeat after a lost reply changes nothing); else
        ``LeaseLost``. One read, only on this path."""
        ended = yield from self.ended_leases([job_id])
        state = repeated(verb, token, *ended.get(job_id, (None, None)))
        if state is None:
            raise LeaseLost.stale(job_id, token)
        return state

    def ended_leases(self, job_ids: Sequence[int]) -> Plan[dict[int, tuple[Any, Any]]]:
        """``{id: (ended_token, ended_as)}`` of the jobs, live or in history (completed
        jobs left out: see ``ended_leases`` in queries.sql)."""
        r = yield Stmt("ended_leases", {"ids": self.d.ids(job_ids)})
        return {int(job_id): (token, how) for job_id, token, how in r.rows}

    # -- holder outcomes ---------------------------------------------------------------

    def complete(
        self, job_id: int, token: int, result: str | None, repeatable: bool = True
    ) -> Plan[None]:
        """With ``repeatable``, an ack repeated by the lease that completed the job is a
        no-op. Inside a caller's transaction it is not: a retried transaction must fail
        rather than commit its side effects twice."""
        if (yield from self.finish_held(job_id, token, result)):
            return
        if not repeatable:
            raise LeaseLost.stale(job_id, token)
        yield from self.unless_completed_by(job_id, token)

    def unless_completed_by(self, job_id: int, token: int) -> Plan[None]:
        """Raises ``LeaseLost`` unless this very lease already completed the job (an ack
        retried after its reply was lost is a success, not a stale write)."""
        done = yield from self.completed_by([job_id])
        if done.get(job_id) != token:
            raise LeaseLost.stale(job_id, token)

    def completed_by(self, job_ids: Sequence[int]) -> Plan[dict[int, int]]:
        r = yield Stmt("completed_tokens", {"ids": self.d.ids(job_ids)})
        return {int(job_id): token for job_id, token in r.rows}

    def complete_many(
        self, items: Sequence[tuple[int, int, str | None]]
    ) -> Plan[list[bool]]:
        """Completes each ``(id, token, result)`` still held under its token; True per
        job completed (or completed before by the same lease), False per lease lost.

        One transaction: a fenced ``INSERT ... SELECT`` into history (locking the rows on
        MySQL) for the jobs without a result, one per job with a result, then one fenced
        ``DELETE``. Only when fewer rows moved than were presented does a last read of
        history tell which items are done."""
        first: dict[tuple[int, int], str | None] = {}
        for job_id, token, res in items:
            first.setdefault((job_id, token), res)
        plain = [pair for pair, res in first.items() if res is None]
        moved = 0
        if plain:
            params = {"ids": self.d.ids([i for i, _ in plain]), "pairs": self.d.pairs(plain)}
            moved += (yield Stmt("archive_held_many", params)).rowcount
        for (job_id, token), res in first.items():
            if res is not None:
                params = {"id": job_id, "token": token, "result": res}
                moved += (yield Stmt("archive_held", params)).rowcount
        if moved:
            pairs = list(first)
            params = {"ids": self.d.ids([i for i, _ in pairs]), "pairs": self.d.pairs(pairs)}
            deleted = (yield Stmt("delete_held_many", params)).rowcount
            if deleted != moved:
                # The archived rows are locked (or the database is), so both statements
                # match the same rows; anything else must not commit.
                raise BackendError(
                    f"ack_many archived {moved} jobs but removed {deleted}; rolled back"
                )
        if moved == len(first):
            return [True] * len(items)
        done = yield from self.completed_by([job_id for job_id, _ in first])
        return [done.get(job_id) == token for job_id, token, _ in items]

    # -- chains and groups (docs/workflows.md) ---------------------------------------------

    def start_flow(
        self, flow: NewFlow, jobs: Sequence[NewJob], capped: Sequence[str] = (),
        fresh: Sequence[str] = (),
    ) -> Plan[list[EnqueueResult]]:
        """The ``fresh`` queues of the whole flow admitted against ``max_queues`` before
        any write (``admit_queues``), then the flow row, a chain's later steps as specs,
        then the first jobs (``enqueue``, caps included); a chain's row then names its
        first step."""
        if fresh:
            yield from self.admit_queues(fresh)
        callback = None if flow.then is None else encode_step(flow.then)
        yield Stmt("insert_flow", {"id": flow.flow_id, "kind": flow.kind, "size": flow.size,
                                   "job_id": None, "callback": callback})
        if flow.steps:
            yield from self.insert_steps(flow.flow_id, [encode_step(step) for step in flow.steps])
        results = yield from self.enqueue(jobs, capped)
        if flow.kind == "chain":
            yield Stmt("set_flow_job", {"id": flow.flow_id, "job_id": results[0].id, "step": 0})
        return results

    def insert_steps(self, flow_id: str, specs: Sequence[str]) -> Plan[None]:
        """A chain's steps after the first, numbered from 1, as one batch."""
        parts = [{"flow_id": flow_id, "idx": i, "spec": spec, "result": None}
                 for i, spec in enumerate(specs, start=1)]
        yield Stmt("insert_flow_part", parts, many=True)

    def complete_steps(self, items: Sequence[StepItem]) -> Plan[list[bool]]:
        """``complete_step`` of each item, in one transaction, by flow id: two batches
        that share flows lock their rows in the same order (each batch's jobs are its
        own), so they wait for each other instead of deadlocking."""
        done = [False] * len(items)
        for i in sorted(range(len(items)), key=lambda i: (items[i][3].flow_id, items[i][0])):
            done[i] = yield from self.complete_step(*items[i])
        return done

    def complete_step(
        self, job_id: int, token: int, result: str | None, link: FlowLink
    ) -> Plan[bool]:
        """Fenced like ``complete``: the job row locked under its lease, else nothing
        happens (True only when this very lease completed it before). Then, in the same
        transaction, the flow row is locked and counted down (``lock_flow``: a group's
        members complete one after another), and what follows is enqueued."""
        if not (yield from self.finish_held(job_id, token, result)):
            done = yield from self.completed_by([job_id])
            return done.get(job_id) == token
        f = yield from self.count_down(link.flow_id)
        if f is None:
            raise BackendError(f"job {job_id} names flow {link.flow_id}, which is not stored")
        remaining, callback = f
        if remaining <= 0:
            # Fencing allows one completion per job, so this means a corrupt flow: roll back.
            raise BackendError(f"flow {link.flow_id} is complete, yet job {job_id} completed")
        if link.kind == "chain":
            yield from self.next_step(link, result)
        else:
            yield Stmt("insert_flow_part", {"flow_id": link.flow_id, "idx": link.index,
                                            "spec": None, "result": result})
            if int(remaining) == 1 and callback is not None:
                yield from self.group_callback(link.flow_id, callback)
        return True

    def finish_held(self, job_id: int, token: int, result: str | None) -> Plan[bool]:
        """running → completed when held under ``token``: True, else False (nothing
        changed)."""
        r = yield Stmt("lock_held", {"id": job_id, "token": token})
        if not r.rows:
            return False
        yield from self.archive(job_id, "completed", result=result, error=None)
        return True

    def count_down(self, flow_id: str) -> Plan[tuple[int, str | None] | None]:
        """Locks the flow's row and counts one completion: ``(remaining before, the
        callback spec)``, None when no such flow is stored."""
        f = yield Stmt("lock_flow", {"id": flow_id})
        if not f.rows:
            return None
        yield Stmt("count_down_flow", {"id": flow_id})
        return int(f.rows[0][0]), f.rows[0][2]

    def next_step(self, link: FlowLink, result: str | None) -> Plan[None]:
        """Enqueues the step after ``link`` (if any) with ``result`` spliced in."""
        nxt = link.index + 1
        r = yield Stmt("flow_spec", {"flow_id": link.flow_id, "idx": nxt})
        if not r.rows:
            return  # the last step
        [created] = yield from self.insert_all([decode_step(r.rows[0][0], result)])
        yield Stmt("set_flow_job", {"id": link.flow_id, "job_id": created.id, "step": nxt})

    def group_callback(self, flow_id: str, callback: str) -> Plan[None]:
        """Enqueues a completed group's callback with its members' results in order."""
        r = yield Stmt("flow_results", {"flow_id": flow_id})
        results = [row[1] for row in sorted(r.rows, key=lambda row: int(row[0]))]
        [created] = yield from self.insert_all([decode_step(callback, joined(results))])
        yield Stmt("set_flow_job", {"id": flow_id, "job_id": created.id, "step": 0})

    def get_flow(self, flow_id: str) -> Plan[FlowState | None]:
        r = yield Stmt("get_flow", {"id": flow_id})
        if not r.rows:
            return None
        fid, kind, size, remaining, step, job = r.rows[0]
        return FlowState(str(fid), kind, int(size), int(remaining), int(step),
                         None if job is None else int(job))

    def already_done(
        self, items: Sequence[tuple[int, int, str | None]], done: Sequence[bool]
    ) -> Plan[list[bool]]:
        """For the items not completed now, whether the same lease completed them before."""
        missed = [job_id for (job_id, _, _), ok in zip(items, done, strict=True) if not ok]
        if not missed:
            return [False] * len(items)
        earlier = yield from self.completed_by(missed)
        return [not ok and earlier.get(job_id) == token
                for (job_id, token, _), ok in zip(items, done, strict=True)]

    def renew_many(self, items: Sequence[tuple[int, int, float]]) -> Plan[list[RenewOutcome]]:
        """Extends each ``(id, token, extend)`` still held, within its queue's touch
        limits; per job ``(lease_until, cancel_requested)``, None when the lease is lost,
        or the ``TouchLimitExceeded`` that refused it (see ``RenewOutcome``).

        One fenced ``UPDATE ... RETURNING`` per distinct extension (a worker renews with
        one) of the held jobs whose queues' limits allow the touch: as many statements as
        before touch limits. Only when some job was not renewed (its lease lost, or its
        queue's limits said no) does one read of those jobs (``leases_held``) tell which,
        by ``touch_verdict``; a touch too soon reports the lease as it stands."""
        first: dict[tuple[int, int], float] = {}
        for job_id, token, extend in items:
            first.setdefault((job_id, token), extend)  # a job listed twice is renewed once
        by_extend: dict[float, list[tuple[int, int]]] = {}
        for pair, extend in first.items():
            by_extend.setdefault(extend, []).append(pair)
        outcomes: dict[tuple[int, int], RenewOutcome] = {}
        for extend, pairs in by_extend.items():
            params = {"ids": self.d.ids([i for i, _ in pairs]), "pairs": self.d.pairs(pairs),
                      "extend": self.d.span(extend)}
            for job_id, token, until, cancel in (yield Stmt("renew_held_many", params)).rows:
                outcomes[int(job_id), int(token)] = (cast(datetime, self.d.dt(until)),
                                                     bool(cancel))
        rest = [pair for pair in first if pair not in outcomes]
        if rest:
            params = {"ids": self.d.ids([i for i, _ in rest]), "pairs": self.d.pairs(rest)}
            for row in (yield Stmt("leases_held", params)).rows:
                job_id, token = int(row[0]), int(row[1])
                # "extend" here too: a touch too soon a moment ago, due by now; unwritten.
                outcomes[job_id, token] = self.touch(job_id, token, row)[1]
        return [outcomes.get((job_id, token)) for job_id, token, _ in items]

    def touch(
        self, job_id: int, token: int, row: tuple[Any, ...]
    ) -> tuple[TouchVerdict, RenewOutcome]:
        """The ``touch_verdict`` on a held lease from its ``leases_held`` row (``id,
        lease_token, lease_until, cancel_requested, touches``, the seconds since the lease
        began and since its last extension, the queue's ``max_touches,
        max_touch_duration, min_touch_interval, max_lease``, the clock), and its outcome:
        the refusal, or the lease as it stands."""
        (_, _, until, cancel, touches, age, quiet, max_touches, max_touch_duration,
         min_touch_interval, _, _) = row
        verdict = touch_verdict(touches, age, quiet, max_touches, max_touch_duration,
                                min_touch_interval)
        if verdict in ("touches", "duration"):
            return verdict, touch_refusal(job_id, token, verdict, touches, age,
                                          max_touch_duration)
        return verdict, (cast(datetime, self.d.dt(until)), bool(cancel))

    def archive(
        self, job_id: int, state: JobState, *, result: str | None, error: str | None,
        detail: str | None = None, ended: str | None = None,
    ) -> Plan[None]:
        """Writes the history row and removes the live row; callers hold the row.
        ``ended``: how the lease this archive ends ended (``_core/ended.py``); None keeps
        the job's last ended lease as it was (an ack, which repeats by
        ``completed_tokens``, or a job no lease holds)."""
        params = {"id": job_id, "state": state, "result": result, "error": error,
                  "detail": detail, "ended": ended}
        yield Stmt("archive", params)
        yield Stmt("delete_job", {"id": job_id})

    def fail(
        self, job_id: int, token: int, error: str | None, delay: float,
        detail: str | None = None,
    ) -> Plan[JobState]:
        held = yield from self.lock_held(job_id, token)
        if held is None:
            return (yield from self.repeat(job_id, token, "nack"))
        return (yield from self.fail_held(job_id, *held, error=error, delay=delay,
                                          detail=detail))

    def fail_many(self, items: Sequence[FailItem]) -> Plan[list[JobState | None]]:
        """``fail`` for each ``(id, token, error, delay)`` in one transaction: one locking
        read of every job still held (``lock_held_many``), then each job's own write; for
        the rest, one read of their last ended leases (only when some job was not held):
        a repeat's first result (a job listed twice is failed once, its second listing a
        repeat), None (nothing changed) per stale lease."""
        pairs = list(dict.fromkeys((item[0], item[1]) for item in items))
        params = {"ids": self.d.ids([i for i, _ in pairs]), "pairs": self.d.pairs(pairs)}
        r = yield Stmt("lock_held_many", params)
        held = {(int(row[0]), int(row[1])): (row[2], row[3], bool(row[4])) for row in r.rows}
        states: list[JobState | None] = []
        for job_id, token, error, delay, detail in items:
            lease = held.pop((job_id, token), None)  # a job listed twice fails once
            if lease is None:
                states.append(None)
            else:
                states.append((yield from self.fail_held(job_id, *lease, error=error,
                                                         delay=delay, detail=detail)))
        missed = [item[0] for item, state in zip(items, states, strict=True) if state is None]
        if missed:
            ended = yield from self.ended_leases(missed)
            states = [state if state is not None
                      else repeated("nack", token, *ended.get(job_id, (None, None)))
                      for (job_id, token, *_), state in zip(items, states, strict=True)]
        return states

    def fail_held(
        self, job_id: int, attempts: int, max_attempts: int, cancel_requested: bool, *,
        error: str | None, delay: float, detail: str | None = None,
    ) -> Plan[JobState]:
        """The failure of a job this transaction holds: cancelled when a cancel was
        requested, dead when its attempts are used up, else back to the queue after
        ``delay``; ``failed_at`` set in each case."""
        if cancel_requested:
            yield Stmt("note_failure", {"id": job_id, "timeout": 0})
            yield from self.archive(job_id, "cancelled", result=None, error=error,
                                    detail=detail, ended=ended_as("nack", "cancelled"))
            return "cancelled"
        if attempts >= max_attempts:
            params = {"id": job_id, "error": error, "detail": detail, "priority": None,
                      "failed": True, "ended": ended_as("nack", "dead")}
            yield Stmt("to_dead", params)
            return "dead"
        return (yield from self.reschedule(job_id, delay, error, give_back=0, detail=detail))

    def reschedule(
        self, job_id: int, delay: float, error: str | None, give_back: int,
        priority: int | None = None, detail: str | None = None,
    ) -> Plan[JobState]:
        """Back to the queue after ``delay``: a release (``give_back`` 1, the attempt
        returned) or a failure (0). The state returned is recorded with the lease that
        ends, so a repeat returns it even once the job is due."""
        state: JobState = "scheduled" if delay > 0 else "available"
        params = {"id": job_id, "delay": self.d.span(delay), "error": error,
                  "detail": detail, "give_back": give_back, "priority": priority,
                  "ended": ended_as("release" if give_back else "nack", state)}
        yield Stmt("reschedule", params)
        return state

    def release(
        self, job_id: int, token: int, delay: float, priority: int | None = None,
        error: str | None = None, detail: str | None = None,
    ) -> Plan[JobState]:
        held = yield from self.lock_held(job_id, token)
        if held is None:
            return (yield from self.repeat(job_id, token, "release"))
        _, _, cancel_requested = held
        if cancel_requested:
            yield from self.archive(job_id, "cancelled", result=None, error=None,
                                    ended=ended_as("release", "cancelled"))
            return "cancelled"
        return (yield from self.reschedule(job_id, delay, error, give_back=1, priority=priority,
                                           detail=detail))

    def snooze(
        self, job_id: int, token: int, delay: float, scope: SnoozeScope = "job"
    ) -> Plan[JobState]:
        """``lock_snoozed`` locks the held job (the fence, as ``lock_held``) and reads its
        queue's ``max_snoozes`` with it; then the queue's pause (``scope="queue"``) and the
        job's own write, in one transaction. The pause goes first: the job's row is then
        only locked, not yet updated, while the snooze waits for the queue's row, so an
        enqueuer holding that row (``max_jobs``) is not waiting on the job's new version
        (PostgreSQL); on MySQL a unique-key insert can still meet the lock, and the
        deadlock it makes is retried like any other. Each ending records the lease it ended
        (``_core/ended.py``), so a repeat by that lease returns what this call did."""
        r = yield Stmt("lock_snoozed", {"id": job_id, "token": token})
        if not r.rows:
            return (yield from self.repeat(job_id, token, "snooze"))
        queue, snoozes, cancel_requested, max_snoozes = r.rows[0]
        span = self.d.span(delay)
        if scope == "queue":
            yield Stmt("extend_pause", {"queue": queue, "delay": span})
        if cancel_requested:
            yield from self.archive(job_id, "cancelled", result=None, error=None,
                                    ended=ended_as("snooze", "cancelled"))
            return "cancelled"
        if max_snoozes is not None and int(snoozes) >= int(max_snoozes):
            params = {"id": job_id, "error": snoozed_too_often(int(snoozes), int(max_snoozes)),
                      "detail": None, "priority": None, "failed": False,
                      "ended": ended_as("snooze", "dead")}
            yield Stmt("to_dead", params)
            return "dead"
        state: JobState = "scheduled" if delay > 0 else "available"
        yield Stmt("snooze_job", {"id": job_id, "delay": span,
                                  "ended": ended_as("snooze", state)})
        return state

    def bury(
        self, job_id: int, token: int, reason: str | None, priority: int | None = None,
        detail: str | None = None,
    ) -> Plan[None]:
        if (yield from self.lock_held(job_id, token)) is None:
            yield from self.repeat(job_id, token, "bury")
            return
        yield Stmt("to_dead", {"id": job_id, "error": reason, "detail": detail,
                               "priority": priority, "failed": False,
                               "ended": ended_as("bury", "dead")})

    # -- operator verbs ------------------------------------------------------------------

    def kick(self, queue: str, limit: int) -> Plan[int]:
        """Up to ``limit`` dead jobs by priority desc, then id: the order of
        ``peek_dead``."""
        r = yield Stmt("kick", {"queue": queue, "limit": limit})
        return r.rowcount

    def retry(self, job_id: int) -> Plan[None]:
        r = yield Stmt("retry_job", {"id": job_id})
        if not r.rowcount:
            yield from self.refuse(job_id, "retry", "dead or scheduled")

    def discard(self, job_id: int, reason: str | None) -> Plan[None]:
        r = yield Stmt("lock_idle", {"id": job_id})
        if not r.rows:
            yield from self.refuse(job_id, "discard", "dead, scheduled or available")
        error, detail = discard_record(reason, r.rows[0][1], stored(r.rows[0][2]))
        yield from self.archive(job_id, "discarded", result=None, error=error, detail=detail)

    def cancel(self, job_id: int) -> Plan[JobState]:
        r = yield Stmt("lock_live", {"id": job_id})
        if not r.rows:
            h = yield Stmt("history_state", {"id": job_id})
            if not h.rows:
                raise JobNotFound(f"no job with id {job_id}")
            return h.rows[0][0]  # type: ignore[no-any-return]
        if r.rows[0][0] == "running":
            yield Stmt("request_cancel", {"id": job_id})
            return "running"
        yield from self.archive(job_id, "cancelled", result=None, error="cancelled")
        return "cancelled"

    def refuse(self, job_id: int, action: str, allowed: str) -> Plan[None]:
        r = yield Stmt("state_of", {"id": job_id})
        if not r.rows:
            raise JobNotFound(f"no job with id {job_id}")
        raise JobStateError(
            f"cannot {action} job {job_id}: it is {r.rows[0][0]}; {action} works on "
            f"{allowed} jobs"
        )

    # -- reads ---------------------------------------------------------------------------

    def schema_versions(self) -> Plan[tuple[int, int] | None]:
        """The newest migration recorded in these tables and the newest this leaseq has;
        ``SchemaMissing`` when there is no migrations table."""
        r = yield Stmt("applied_versions", {})
        recorded = max((int(row[0]) for row in r.rows), default=0)
        return recorded, latest_migration(self.d.package)

    def get(self, job_id: int) -> Plan[JobInfo]:
        r = yield Stmt("get_live", {"id": job_id})
        if not r.rows:
            r = yield Stmt("get_history", {"id": job_id})
        if not r.rows:
            raise JobNotFound(f"no job with id {job_id}")
        return self.info(r.rows[0])

    def info(self, r: tuple[Any, ...]) -> JobInfo:
        """A ``JobInfo`` from a row of ``get_live``'s 31 columns: ``id`` .. ``now``, then
        reserves, timeouts, releases, buries, kicks, failed_at, updated_at, lease,
        headers, error_detail, tags, snoozes."""
        dt = self.d.dt
        state, available_at, now = r[3], dt(r[9]), dt(r[18])
        if state == "available" and available_at and now and available_at > now:
            state = "scheduled"
        return JobInfo(
            id=int(r[0]), queue=r[1], kind=r[2], state=state, payload=stored(r[4]),
            priority=r[5], attempts=r[6], max_attempts=r[7], unique_key=r[8],
            available_at=available_at, lease_until=dt(r[10]), worker_id=r[11],
            created_at=dt(r[12]), started_at=dt(r[13]),  # type: ignore[arg-type]
            finished_at=dt(r[14]), result=stored(r[15]), error=r[16],
            cancel_requested=bool(r[17]), reserves=int(r[19]), timeouts=int(r[20]),
            releases=int(r[21]), buries=int(r[22]), kicks=int(r[23]), failed_at=dt(r[24]),
            updated_at=dt(r[25]), lease=None if r[26] is None else float(r[26]),
            headers=stored(r[27]), error_detail=error_detail(r[16], stored(r[28])),
            tags=stored_tags(r[29]), snoozes=int(r[30]),
        )

    def stats(self) -> Plan[dict[str, QueueStats]]:
        """Three reads, as many as before queue settings: ``live_counts`` also returns
        the age of each queue's oldest due job, and ``queue_rows`` (every settings row,
        paused or not) replaces the read of the paused queues."""
        counts: dict[str, dict[str, Any]] = {}
        for queue, state, n, later, age in (yield Stmt("live_counts")).rows:
            c = counts.setdefault(queue, {})
            if state == "available":
                # Stored 'available' holds both: due now, and scheduled for later.
                c["scheduled"] = int(later or 0)
                c["available"] = int(n) - c["scheduled"]
                if age is not None:
                    c["oldest_available_age"] = max(0.0, float(age))  # clock steps
            else:
                c[state] = int(n)
        for queue, state, n in (yield Stmt("history_counts")).rows:
            counts.setdefault(queue, {})[state] = int(n)
        for queue, paused, until in (yield Stmt("queue_rows")).rows:
            counts.setdefault(queue, {}).update(paused=bool(paused),
                                                paused_until=self.d.dt(until))
        return {q: QueueStats(queue=q, **c) for q, c in sorted(counts.items())}

    def peek(self, queue: str, state: PeekState, limit: int) -> Plan[list[JobInfo]]:
        """One read by the index that holds the state in the wanted order (see the
        ``peek_*`` queries)."""
        r = yield Stmt(f"peek_{state}", {"queue": queue, "limit": limit})
        return [self.info(row) for row in r.rows]

    def priority_counts(self, queue: str) -> Plan[dict[int, int]]:
        """One grouped read of the queue's due range of the claim index."""
        r = yield Stmt("priority_counts", {"queue": queue})
        return {int(priority): int(n) for priority, n in r.rows}

    def configure_queue(
        self, queue: str, changes: Mapping[str, int | float | None]
    ) -> Plan[QueueConfig]:
        """One upsert whose text names every setting: ``set_<name>`` says which to
        change, so the statement never depends on the call."""
        unknown = set(changes) - set(QUEUE_SETTINGS)
        if unknown:
            raise InvalidArgument(f"unknown queue settings {sorted(unknown)}")
        params: dict[str, Any] = {"queue": queue}
        for name in QUEUE_SETTINGS:
            params[name] = changes.get(name)
            params[f"set_{name}"] = name in changes
        r = yield Stmt("configure_queue", params)
        if not self.d.returning:
            r = yield Stmt("queue_config", {"queue": queue})
        return self.config(r.rows[0])

    def queue_configs(self) -> Plan[dict[str, QueueConfig]]:
        r = yield Stmt("queue_configs")
        return {row[0]: self.config(row) for row in r.rows}

    @staticmethod
    def config(row: tuple[Any, ...]) -> QueueConfig:
        """A ``QueueConfig`` from ``(name, *QUEUE_SETTINGS)``, with each value the type
        its field declares (SQLite's REAL columns hand back 30.0 for 30, MySQL's
        computed values may come as Decimal)."""
        values: dict[str, Any] = {
            name: None if value is None else int(value) if name in INT_SETTINGS else float(value)
            for name, value in zip(QUEUE_SETTINGS, row[1:], strict=True)
        }
        return QueueConfig(row[0], **values)

    def server_version(self) -> Plan[str]:
        r = yield Stmt("server_version")
        return str(r.rows[0][0])

    def oldest_transaction_age(self) -> Plan[float | None]:
        r = yield Stmt("oldest_transaction_age")
        age = r.rows[0][0]  # SQLite's statement gives NULL; the servers' give 0 or more
        return None if age is None else float(age)

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int,
        kind: str | None = None, unique_key: str | None = None, tag: str | None = None,
    ) -> Plan[list[JobInfo]]:
        # tag: matched as its quoted text in the stored JSON array (a tag holds no quote
        # or backslash, so "tag" appears there exactly when the job carries it), row by
        # row along the walk the other filters take: no index, so writes pay nothing.
        params = {"queue": queue, "state": state, "limit": limit, "after": after,
                  "kind": kind, "unique_key": unique_key, "tag": tag}
        rows: list[tuple[Any, ...]] = []
        if state is None or state in LIVE_STATES:
            rows += (yield Stmt("list_live", params)).rows
        if state is None or state in TERMINAL_STATES:
            rows += (yield Stmt("list_history", params)).rows
        rows.sort(key=lambda r: r[0])
        return [self.info(r) for r in rows[:limit]]

    def set_paused(self, queue: str, paused: bool, until: PauseEnd = None) -> Plan[None]:
        """One upsert: ``paused`` stays the indefinite pause, a timed one is
        ``paused_until`` alone (``until`` a time, or seconds the statement adds to the
        database's clock)."""
        at = until if isinstance(until, datetime) else None
        seconds = until if paused and isinstance(until, (int, float)) else None
        yield Stmt("set_paused", {"queue": queue, "paused": paused and until is None,
                                  "until": self.d.ts(at) if paused else None,
                                  "seconds": None if seconds is None else self.d.span(seconds)})

    def paused(self) -> Plan[list[str]]:
        r = yield Stmt("paused_queues")
        return [name for (name,) in r.rows]

    # -- maintenance ---------------------------------------------------------------------

    def reclaim(self, limit: int) -> Plan[int]:
        """Expired leases back to the queue, to dead, or (cancel requested) to history,
        each counted as a timeout and a failure; then ``discard_expired_dead``."""
        r = yield Stmt("expired_leases", {"limit": limit})
        again: list[int] = []
        dead: list[int] = []
        reclaimed = 0
        for job_id, attempts, max_attempts, cancel_requested in r.rows:
            if cancel_requested:
                yield Stmt("note_failure", {"id": job_id, "timeout": 1})
                yield from self.archive(job_id, "cancelled", result=None, error="lease expired",
                                        ended=EXPIRED)
                reclaimed += 1
            elif attempts >= max_attempts:
                dead.append(job_id)
            else:
                again.append(job_id)
        if again:
            reclaimed += (yield Stmt("reclaim_to_available", {"ids": self.d.ids(again)})).rowcount
        if dead:
            params = {"ids": self.d.ids(dead), "error": "lease expired"}
            reclaimed += (yield Stmt("reclaim_to_dead", params)).rowcount
        return reclaimed + (yield from self.discard_expired_dead(limit))

    def discard_expired_dead(self, limit: int) -> Plan[int]:
        """Up to ``limit`` dead jobs kept longer than their queue's ``dead_retention`` →
        discarded (history, last error kept)."""
        expired = yield from self.expired_dead(limit)
        if not expired:
            return 0
        ids = self.d.ids(expired)
        yield Stmt("archive_dead", {"ids": ids})
        return (yield Stmt("delete_dead", {"ids": ids})).rowcount

    def expired_dead(self, limit: int) -> Plan[list[int]]:
        """The ids of up to ``limit`` expired dead jobs, locked: one statement, which
        reads only the settings rows when no queue sets a retention."""
        r = yield Stmt("expired_dead", {"limit": limit})
        return [int(row[0]) for row in r.rows]

    def drop(self) -> Plan[None]:
        """Removes every table of this prefix, and its enqueue routine (benchmarks and tests
        clean up with it)."""
        if "drop_routine" in self.d.q:  # the SQL enqueue entry (enqueue.sql)
            yield Stmt("drop_routine")
        if "drop_routine_with" in self.d.q:  # MySQL's enqueue_with, which enqueue calls
            yield Stmt("drop_routine_with")
        if "drop_tables" in self.d.q:
            yield Stmt("drop_tables")
        else:
            for table in ("history", "jobs", "queues", "migrations", "flows", "flow_parts",
                          "server", "queue_names"):
                yield Stmt(f"drop_{table}")

    def prune(self, older_than: float, batch: int = 5000) -> Plan[int]:
        """History rows in batches; also the flows that finished and were made more than
        ``older_than`` ago (not counted: the count is of jobs)."""
        age = {"age": self.d.span(older_than)}
        yield Stmt("prune_flow_parts", age)
        yield Stmt("prune_flows", age)
        pruned = 0
        while True:
            r = yield Stmt("prune", {"age": self.d.span(older_than), "limit": batch})
            pruned += r.rowcount
            if r.rowcount < batch:
                return pruned
