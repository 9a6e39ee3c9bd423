"""The job state machine as SQL plans, written once for every SQL dialect.

Each method returns a plan (see ``plan.py``). A ``Dialect`` supplies the query texts and
value conversions; where one dialect can do a step in fewer statements (PostgreSQL's
``UPDATE ... FROM (... SKIP LOCKED) RETURNING``), its subclass of ``SqlOps`` replaces that
plan and keeps the same result.

Fencing lives here: every holder write first locks the row by ``(id, lease_token,
state='running')`` (``lock_held``) and raises ``LeaseLost`` when nothing matches, so a
stale holder changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from leaseq._core.job import (
    LIVE_STATES,
    TERMINAL_STATES,
    EnqueueResult,
    Job,
    JobInfo,
    JobState,
    QueueStats,
)
from leaseq._core.validate import decode
from leaseq.backends._sql.plan import Plan, Result, Stmt, load_queries
from leaseq.backends.base import NewJob
from leaseq.errors import BackendError, JobNotFound, JobStateError, LeaseLost

# Column order of every query that returns a leased job (claim, claim_candidates, ...).
JOB_COLUMNS = (
    "id, queue, kind, payload, priority, attempts, max_attempts, unique_key, "
    "lease_token, lease_until, worker_id, created_at, available_at"
)
UNIQUE_RETRIES = 100


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
        }


class SqlOps:
    """Plans for every contract method; see ``backends.base.Backend`` for the states."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect

    def single(self, operation: str, jobs: Sequence[NewJob] = ()) -> bool:
        """True when this dialect runs ``operation`` as one statement, which needs no
        explicit transaction around it."""
        return False

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
        results: list[EnqueueResult | None] = [None] * len(jobs)
        plain = [i for i, job in enumerate(jobs) if job.unique_key is None]
        if plain:
            ids = yield from self.insert_plain([jobs[i] for i in plain])
            for i, job_id in zip(plain, ids, strict=True):
                results[i] = EnqueueResult(job_id, True)
        # Keyed rows go in one global order, so two batches that share keys wait on each
        # other instead of deadlocking (each would otherwise hold a key the other needs).
        keyed = sorted((i for i, job in enumerate(jobs) if job.unique_key is not None),
                       key=lambda i: (jobs[i].queue, jobs[i].unique_key or "", i))
        for i in keyed:
            results[i] = yield from self.insert_unique(jobs[i])
        return [r for r in results if r is not None]

    def insert_plain(self, jobs: Sequence[NewJob]) -> Plan[list[int]]:
        if len(jobs) == 1:
            r = yield Stmt("insert_job", self.d.row(jobs[0]))
            return [self.new_id(r)]
        r = yield Stmt("insert_job", [self.d.row(job) for job in jobs], many=True)
        return [row[0] for row in r.rows]

    def insert_unique(self, job: NewJob) -> Plan[EnqueueResult]:
        for _ in range(UNIQUE_RETRIES):
            r = yield Stmt("insert_unique_job", self.d.row(job), duplicate_ok=True)
            if not r.duplicate and (r.rows or r.rowcount == 1):
                return EnqueueResult(self.new_id(r), True)
            found = yield Stmt("find_unique", {"queue": job.queue, "unique_key": job.unique_key})
            if found.rows:
                return EnqueueResult(int(found.rows[0][0]), False)
            # The twin left the live table between our insert and our lookup: insert again.
        raise BackendError(f"unique key {job.unique_key!r} kept changing hands; try again")

    @staticmethod
    def new_id(r: Result) -> int:
        return int(r.rows[0][0] if r.rows else r.lastrowid)  # type: ignore[arg-type]

    # -- claim and lease -------------------------------------------------------------------

    def claim(
        self, queues: Sequence[str], worker_id: str, lease: float, limit: int
    ) -> Plan[list[Job]]:
        """One locking read of every queue's candidates (paused queues excluded in SQL)
        that also returns the job columns and the database's clock, then one ``UPDATE``
        of the chosen ids (MySQL first reads where to start, see ``claim_branches``). The
        jobs are built from the rows read, so MySQL needs no re-read for want of
        ``UPDATE ... RETURNING``."""
        names = list(dict.fromkeys(queues))  # a repeated queue would return its rows twice
        if not names:
            return []
        branches = yield from self.claim_branches(names)
        if not branches:
            return []
        r = yield self.d.each("claim_candidates", branches, {"limit": limit})
        if not r.rows:
            return []
        # Each queue's candidates come in index order; merge them into the global order.
        rows = sorted(r.rows, key=lambda c: (-c[4], c[12], c[0]))[:limit]
        now = rows[0][13]
        until = self.d.later(now, lease)
        ids = self.d.ids([c[0] for c in rows])
        params = {"ids": ids, "worker_id": worker_id, "until": until, "now": now}
        r = yield Stmt("claim_ids", params)
        if r.rowcount != len(rows):
            # Cannot happen while the rows stay locked from read to update (FOR UPDATE on
            # MySQL, BEGIN IMMEDIATE on SQLite); if it ever does, report only what this
            # claim really leased, as stored.
            r = yield Stmt("jobs_by_ids", params)
            tokens = {c[0]: c[8] + 1 for c in rows}
            return self.jobs([j for j in r.rows if tokens.get(j[0]) == j[8]], lease)
        # What claim_ids just wrote, from values read under the same lock.
        leased = [(*c[:5], c[5] + 1, c[6], c[7], c[8] + 1, until, worker_id, c[11], c[12])
                  for c in rows]
        return self.jobs(leased, lease)

    def claim_branches(self, queues: Sequence[str]) -> Plan[list[dict[str, Any]]]:
        """The parameters of each queue's branch of ``claim_candidates``; no branch, no
        locking read."""
        return [{"queue": queue} for queue in queues]
        yield  # unreachable: makes this a plan that runs no statement

    def jobs(self, rows: list[tuple[Any, ...]], lease: float) -> list[Job]:
        rows = sorted(rows, key=lambda r: (-r[4], r[12], r[0]))
        dt = self.d.dt
        return [
            Job(
                id=int(r[0]), queue=r[1], kind=r[2], payload=decode(r[3]), priority=r[4],
                attempts=r[5], max_attempts=r[6], unique_key=r[7], lease_token=int(r[8]),
                lease_until=dt(r[9]), worker_id=r[10], created_at=dt(r[11]),  # type: ignore[arg-type]
                lease=lease,
            )
            for r in rows
        ]

    def renew(self, job_id: int, token: int, extend: float) -> Plan[tuple[datetime, bool]]:
        params = {"id": job_id, "token": token, "extend": self.d.span(extend)}
        r = yield Stmt("renew", params)
        if not r.rowcount:
            raise self.lost(job_id, token)
        if not self.d.returning:
            r = yield Stmt("lease_of", {"id": job_id})
        until, cancel_requested = r.rows[0]
        return self.d.dt(until), bool(cancel_requested)  # type: ignore[return-value]

    @staticmethod
    def lost(job_id: int, token: int) -> LeaseLost:
        return LeaseLost(
            f"lease {token} on job {job_id} is no longer valid: the job was reclaimed, "
            "re-delivered or finished; nothing was changed"
        )

    def lock_held(self, job_id: int, token: int) -> Plan[tuple[int, int, bool]]:
        r = yield Stmt("lock_held", {"id": job_id, "token": token})
        if not r.rows:
            raise self.lost(job_id, token)
        attempts, max_attempts, cancel_requested = r.rows[0]
        return attempts, max_attempts, bool(cancel_requested)

    # -- holder outcomes ---------------------------------------------------------------

    def complete(
        self, job_id: int, token: int, result: str | None, repeatable: bool = True
    ) -> Plan[None]:
        """With ``repeatable``, an ack repeated by the lease that completed the job is a
        no-op. Inside a caller's transaction it is not: a retried transaction must fail
        rather than commit its side effects twice."""
        r = yield Stmt("lock_held", {"id": job_id, "token": token})
        if not r.rows:
            if not repeatable:
                raise self.lost(job_id, token)
            yield from self.unless_completed_by(job_id, token)
            return
        yield from self.archive(job_id, "completed", result=result, error=None)

    def unless_completed_by(self, job_id: int, token: int) -> Plan[None]:
        """Raises ``LeaseLost`` unless this very lease already completed the job (an ack
        retried after its reply was lost is a success, not a stale write)."""
        done = yield from self.completed_by([job_id])
        if done.get(job_id) != token:
            raise self.lost(job_id, token)

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

    def renew_many(
        self, items: Sequence[tuple[int, int, float]]
    ) -> Plan[list[tuple[datetime, bool] | None]]:
        """Extends each ``(id, token, extend)`` still held; per job ``(lease_until,
        cancel_requested)`` or None when the lease is lost.

        One fenced ``UPDATE`` per distinct ``extend`` (a worker renews with one), returning
        the leases where the dialect can; otherwise one read of the renewed rows, which
        this transaction now holds, so they are exactly the rows it updated."""
        groups: dict[float, list[tuple[int, int]]] = {}
        for job_id, token, extend in items:
            groups.setdefault(extend, []).append((job_id, token))
        rows: list[tuple[Any, ...]] = []
        renewed = 0
        for extend, pairs in groups.items():
            params = {"ids": self.d.ids([i for i, _ in pairs]), "pairs": self.d.pairs(pairs),
                      "extend": self.d.span(extend)}
            r = yield Stmt("renew_held_many", params)
            rows += r.rows
            renewed += r.rowcount
        if renewed and not self.d.returning:
            pairs = [(job_id, token) for job_id, token, _ in items]
            params = {"ids": self.d.ids([i for i, _ in pairs]), "pairs": self.d.pairs(pairs)}
            rows = (yield Stmt("leases_held", params)).rows
        leases: dict[tuple[int, int], tuple[datetime, bool]] = {
            (int(job_id), int(token)): (self.d.dt(until), bool(cancel))  # type: ignore[misc]
            for job_id, token, until, cancel in rows
        }
        return [leases.get((job_id, token)) for job_id, token, _ in items]

    def archive(
        self, job_id: int, state: JobState, *, result: str | None, error: str | None
    ) -> Plan[None]:
        """Writes the history row and removes the live row; callers hold the row."""
        params = {"id": job_id, "state": state, "result": result, "error": error}
        yield Stmt("archive", params)
        yield Stmt("delete_job", {"id": job_id})

    def fail(self, job_id: int, token: int, error: str | None, delay: float) -> Plan[JobState]:
        attempts, max_attempts, cancel_requested = yield from self.lock_held(job_id, token)
        if cancel_requested:
            yield from self.archive(job_id, "cancelled", result=None, error=error)
            return "cancelled"
        if attempts >= max_attempts:
            yield Stmt("to_dead", {"id": job_id, "error": error})
            return "dead"
        return (yield from self.reschedule(job_id, delay, error, give_back=0))

    def reschedule(
        self, job_id: int, delay: float, error: str | None, give_back: int
    ) -> Plan[JobState]:
        params = {"id": job_id, "delay": self.d.span(delay), "error": error, "give_back": give_back}
        yield Stmt("reschedule", params)
        return "scheduled" if delay > 0 else "available"

    def release(self, job_id: int, token: int, delay: float) -> Plan[JobState]:
        _, _, cancel_requested = yield from self.lock_held(job_id, token)
        if cancel_requested:
            yield from self.archive(job_id, "cancelled", result=None, error=None)
            return "cancelled"
        return (yield from self.reschedule(job_id, delay, None, give_back=1))

    def bury(self, job_id: int, token: int, reason: str | None) -> Plan[None]:
        yield from self.lock_held(job_id, token)
        yield Stmt("to_dead", {"id": job_id, "error": reason})

    # -- operator verbs ------------------------------------------------------------------

    def kick(self, queue: str, limit: int) -> Plan[int]:
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
        yield from self.archive(job_id, "discarded", result=None, error=reason)

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

    def get(self, job_id: int) -> Plan[JobInfo]:
        r = yield Stmt("get_live", {"id": job_id})
        if not r.rows:
            r = yield Stmt("get_history", {"id": job_id})
        if not r.rows:
            raise JobNotFound(f"no job with id {job_id}")
        return self.info(r.rows[0])

    def info(self, r: tuple[Any, ...]) -> JobInfo:
        dt = self.d.dt
        state, available_at, now = r[3], dt(r[9]), dt(r[18])
        if state == "available" and available_at and now and available_at > now:
            state = "scheduled"
        return JobInfo(
            id=int(r[0]), queue=r[1], kind=r[2], state=state, payload=decode(r[4]),
            priority=r[5], attempts=r[6], max_attempts=r[7], unique_key=r[8],
            available_at=available_at, lease_until=dt(r[10]), worker_id=r[11],
            created_at=dt(r[12]), started_at=dt(r[13]),  # type: ignore[arg-type]
            finished_at=dt(r[14]), result=decode(r[15]), error=r[16],
            cancel_requested=bool(r[17]),
        )

    def stats(self) -> Plan[dict[str, QueueStats]]:
        counts: dict[str, dict[str, Any]] = {}
        for name in ("live_counts", "history_counts"):
            r = yield Stmt(name)
            for queue, state, n in r.rows:
                counts.setdefault(queue, {})[state] = int(n)
        for (queue,) in (yield Stmt("paused_queues")).rows:
            counts.setdefault(queue, {})["paused"] = True
        return {q: QueueStats(queue=q, **c) for q, c in sorted(counts.items())}

    def list_jobs(
        self, queue: str | None, state: JobState | None, limit: int, after: int
    ) -> Plan[list[JobInfo]]:
        params = {"queue": queue, "state": state, "limit": limit, "after": after}
        rows: list[tuple[Any, ...]] = []
        if state is None or state in LIVE_STATES:
            rows += (yield Stmt("list_live", params)).rows
        if state is None or state in TERMINAL_STATES:
            rows += (yield Stmt("list_history", params)).rows
        rows.sort(key=lambda r: r[0])
        return [self.info(r) for r in rows[:limit]]

    def set_paused(self, queue: str, paused: bool) -> Plan[None]:
        yield Stmt("set_paused", {"queue": queue, "paused": paused})

    def paused(self) -> Plan[list[str]]:
        r = yield Stmt("paused_queues")
        return [name for (name,) in r.rows]

    # -- maintenance ---------------------------------------------------------------------

    def reclaim(self, limit: int) -> Plan[int]:
        r = yield Stmt("expired_leases", {"limit": limit})
        again: list[int] = []
        dead: list[int] = []
        reclaimed = 0
        for job_id, attempts, max_attempts, cancel_requested in r.rows:
            if cancel_requested:
                yield from self.archive(job_id, "cancelled", result=None, error="lease expired")
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
        return reclaimed

    def drop(self) -> Plan[None]:
        """Removes every table of this prefix (benchmarks and tests clean up with it)."""
        if "drop_tables" in self.d.q:
            yield Stmt("drop_tables")
        else:
            for table in ("history", "jobs", "queues", "migrations"):
                yield Stmt(f"drop_{table}")

    def prune(self, older_than: float, batch: int = 5000) -> Plan[int]:
        pruned = 0
        while True:
            r = yield Stmt("prune", {"age": self.d.span(older_than), "limit": batch})
            pruned += r.rowcount
            if r.rowcount < batch:
                return pruned
