"""Histories of what clients did and saw, and a checker that classifies them (issue 32,
item 2: Jepsen's total-queue checker, written for leaseq).

**Recording.** Each process appends its operations to a file of its own,
``<folder>/<process>.jsonl`` (``Recorder``): one line when an operation is invoked and
one when it completes, with its outcome: ``ok``, ``failed`` (certainly not applied: a
refusal such as ``LeaseLost``, a validation error, a handler that raised) or ``unknown``
(it may or may not have taken effect: ``OutcomeUnknown`` and every other
``BackendError``). An operation whose process was SIGKILLed keeps its invocation line and
reads back as unknown. Operations: ``enqueue`` (the client-side key is the payload's
``tag``), ``claim`` (a lease observed: the probe logs it when the handler starts),
``run`` (the handler), ``ack``, ``nack``, ``release`` (a holder's writes, made by clients
that hold leases themselves; a ``leaseq worker`` makes its own, which the final state
shows instead). ``load`` merges the files.

**The other half of the evidence** is the database's final state (``final_state``): each
job's key, state, counters (``reserves``, ``timeouts``, ``releases``) and, for a
completed job, the lease token its result names (the probe returns its token, so the
completion says which lease wrote it).

**The checker** (``check``) classifies a run:

- *lost*: an enqueue that returned (or one whose outcome was unknown and that did commit)
  whose job is not finished (completed, dead, cancelled, discarded) at the end: gone, or
  still waiting after the drain. With ``tail_from`` (a failover on asynchronous
  replication) the ones acknowledged from then on are counted apart, as ``lost_tail``:
  the writes the promoted server never received, which that setup gives up.
- *duplicated*: deliveries of a key beyond its first and beyond the re-runs the ended
  leases explain: a lease that ran twice (one token delivered twice), or a new lease with
  no expiry (``timeouts``), hand-back (``releases``) or failed run before it.
- *stale*: a write under a superseded token that took effect: a completion whose result
  names a token lower than one delivered for the job, or a holder's write that returned
  ``ok`` although a claim of a newer token had returned before it was first invoked (a
  repeat after an unknown outcome returns the first call's result, so the first try is
  when it was sent).
- *unexpected*: a job delivered or stored whose key no client tried to enqueue, or tried
  and saw fail for certain.
- *recovered*: an enqueue whose outcome was unknown and that did commit (its key is in
  the final state or was delivered). Not an anomaly: it counts what S6 promises to sort
  out.

The checker can only count what the evidence shows; docs/design.md §63 says what it
cannot see.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import leaseq

Outcome = Literal["ok", "failed", "unknown"]
TERMINAL = frozenset({"completed", "dead", "cancelled", "discarded"})
WRITES = frozenset({"ack", "nack", "release"})
"""A holder's writes, each fenced by its lease token."""
ANOMALIES = ("lost", "duplicated", "stale", "unexpected")


def outcome_of(exc: BaseException) -> Outcome:
    """What an exception says about its operation: a ``BackendError`` (the connection
    dropped, a reply was lost, a write was not replicated) leaves it unknown; any other
    leaseq error was a refusal before anything changed; anything else is unknown."""
    if isinstance(exc, leaseq.BackendError):
        return "unknown"
    if isinstance(exc, leaseq.LeaseqError):
        return "failed"
    return "unknown"


# -- recording ---------------------------------------------------------------------------


@dataclass
class Call:
    """An operation in progress; what the caller learns (the job's id, its token, a
    value) is set on it before it completes."""

    recorder: Recorder
    seq: int
    key: str | None = None
    job: int | None = None
    token: int | None = None
    value: Any = None

    def complete(self, outcome: Outcome) -> None:
        self.recorder.write({"p": self.recorder.process, "n": self.seq, "type": outcome,
                             "t": time.time(), "key": self.key, "job": self.job,
                             "token": self.token, "value": self.value})


class Recorder:
    """Appends one process's operations to ``<folder>/<process>.jsonl``. Each line is
    one ``write`` of an ``O_APPEND`` file, so lines of threads (and of a process killed
    between two lines) never interleave."""

    def __init__(self, folder: Path, process: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{process}.jsonl"
        self.process = process
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def write(self, line: dict[str, Any]) -> None:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def invoke(self, name: str, *, key: str | None = None, job: int | None = None,
               token: int | None = None, value: Any = None) -> Call:
        with self._lock:
            seq = next(self._seq)
        self.write({"p": self.process, "n": seq, "type": "invoke", "op": name,
                    "t": time.time(), "key": key, "job": job, "token": token,
                    "value": value})
        return Call(self, seq, key, job, token, value)

    @contextlib.contextmanager
    def op(self, name: str, *, key: str | None = None, job: int | None = None,
           token: int | None = None,
           classify: Callable[[BaseException], Outcome] = outcome_of) -> Iterator[Call]:
        """Records ``name`` around the block: ``ok`` when it ends normally, else the
        exception's outcome (``classify``), which is raised on."""
        call = self.invoke(name, key=key, job=job, token=token)
        try:
            yield call
        except BaseException as exc:
            call.value = f"{type(exc).__name__}: {exc}"[:200]
            call.complete(classify(exc))
            raise
        call.complete("ok")

    def observed(self, name: str, *, key: str | None, job: int | None,
                 token: int | None = None, value: Any = None) -> None:
        """An operation seen only once it had completed (a claim, seen by the handler it
        started): invocation and completion at the same instant, the invocation's line
        complete in itself (``claims`` reads only those)."""
        self.invoke(name, key=key, job=job, token=token, value=value).complete("ok")


_process_recorders: dict[tuple[int, str], Recorder] = {}
_process_lock = threading.Lock()


def process_recorder(role: str, env: str = "LEASEQ_CHAOS_HISTORY") -> Recorder:
    """The recorder of this process (``<role>-<pid>``) in the folder ``$env`` names: for
    the probes that worker processes run, in threads of their own (one recorder, so one
    sequence of operation numbers, per process)."""
    key = (os.getpid(), role)
    with _process_lock:
        if key not in _process_recorders:
            _process_recorders[key] = Recorder(Path(os.environ[env]),
                                               f"{role}-{os.getpid()}")
        return _process_recorders[key]


# -- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One operation as recorded: ``complete`` is None when its process died first."""

    process: str
    seq: int
    name: str
    outcome: Outcome
    invoke: float
    complete: float | None = None
    key: str | None = None
    job: int | None = None
    token: int | None = None
    value: Any = None


def load(folder: Path) -> list[Op]:
    """Every operation recorded in ``folder``, in invocation order."""
    invoked: dict[tuple[str, int], dict[str, Any]] = {}
    done: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
        for text in path.read_text().splitlines():
            if not text:
                continue
            line = json.loads(text)
            found = invoked if line["type"] == "invoke" else done
            ident = (line["p"], line["n"])
            if ident in found:
                raise ValueError(f"{path}: operation {ident} recorded twice")
            found[ident] = line
    ops = []
    for ident, start in invoked.items():
        end = done.get(ident, {})

        def pick(name: str, end: dict[str, Any] = end, start: dict[str, Any] = start) -> Any:
            return end.get(name) if end.get(name) is not None else start.get(name)
        ops.append(Op(process=ident[0], seq=ident[1], name=start["op"],
                      outcome=end.get("type", "unknown"), invoke=start["t"],
                      complete=end.get("t"), key=pick("key"), job=pick("job"),
                      token=pick("token"), value=pick("value")))
    return sorted(ops, key=lambda op: (op.invoke, op.process, op.seq))


def claims(folder: Path) -> list[dict[str, Any]]:
    """The invocation lines of the claims the probes observed in ``folder`` (key, job,
    token, t, value), decoding no other line: cheap enough for a loop that polls how far
    a run got."""
    marker = '"op":"claim"'
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        # A line a worker is writing right now may be read in part: only whole lines.
        whole = path.read_text().rpartition("\n")[0]
        found += [json.loads(text) for text in whole.splitlines() if marker in text]
    return found


@dataclass(frozen=True)
class Final:
    """One job as the database holds it at the end of a run."""

    id: int
    key: str | None
    state: str
    token: int | None = None  # the lease token a completed job's result names
    reserves: int = 0
    timeouts: int = 0
    releases: int = 0

    @classmethod
    def of(cls, info: leaseq.JobInfo) -> Final:
        payload = info.payload if isinstance(info.payload, dict) else {}
        result = info.result if isinstance(info.result, dict) else {}
        token = result.get("token")
        return cls(info.id, payload.get("tag"), str(info.state),
                   token if isinstance(token, int) else None,
                   info.reserves, info.timeouts, info.releases)


def final_state(q: leaseq.Queue, queue: str) -> list[Final]:
    """Every job of ``queue``, live and finished, read page by page."""
    jobs: list[Final] = []
    after = 0
    while page := q.jobs(queue, after=after, limit=500):
        jobs += [Final.of(info) for info in page]
        after = page[-1].id
    return jobs


# -- checking ----------------------------------------------------------------------------


@dataclass
class Findings:
    """What ``check`` found. The anomalies are lists of keys (``stale``: of ``(job,
    token)``); the rest are counts that say what the run did."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)  # a key once per extra delivery
    stale: list[tuple[int, int]] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    lost_tail: list[str] = field(default_factory=list)
    never_delivered: int = 0  # lost keys no claim ever saw
    enqueued: int = 0  # enqueues that returned
    unknown: int = 0  # enqueues whose outcome was unknown (recovered or not)
    deliveries: int = 0
    reruns: int = 0  # deliveries after a lease that ended: explained
    refused: int = 0  # holder writes refused (LeaseLost): fencing at work
    unseen: list[int] = field(default_factory=list)
    """Completed jobs whose result names a lease no recorded claim saw: the history is
    incomplete, and the checker cannot vouch for the run."""

    def clean(self) -> bool:
        return not any(getattr(self, name) for name in (*ANOMALIES, "unseen"))

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in
                (*ANOMALIES, "recovered", "lost_tail")}

    def line(self) -> str:
        c = self.counts()
        tail = f" (+{c['lost_tail']} in the unreplicated tail)" if self.lost_tail else ""
        return (f"history: lost {c['lost']}{tail}, duplicated {c['duplicated']}, stale "
                f"{c['stale']}, unexpected {c['unexpected']}, recovered {c['recovered']} of "
                f"{self.unknown} unknown; {self.enqueued} enqueues returned, "
                f"{self.deliveries} deliveries, {self.reruns} re-runs after an ended lease, "
                f"{self.refused} stale writes refused"
                + (f"; {len(self.unseen)} completions by unrecorded leases" if self.unseen
                   else ""))

    def detail(self, limit: int = 10) -> str:
        return " ".join(f"{name}={getattr(self, name)[:limit]}"
                        for name in (*ANOMALIES, "unseen") if getattr(self, name))

    def as_dict(self) -> dict[str, Any]:
        """Lists as counts: a report carries figures, not keys."""
        return {name: len(value) if isinstance(value, list) else value
                for name, value in asdict(self).items()}


def check(ops: Iterable[Op], final: Iterable[Final], *,
          tail_from: float | None = None) -> Findings:
    """Classifies a run from its history ``ops`` and the database's ``final`` state.

    Args:
        ops: Every operation recorded (``load``).
        final: Every job of the run's queue at the end (``final_state``), after a drain.
        tail_from: When set (time.time()), lost enqueues acknowledged at or after it are
            counted as ``lost_tail`` instead of ``lost``: what a failover on
            asynchronous replication may drop.
    """
    ops = list(ops)
    found = Findings()
    enqueues: dict[str, list[Op]] = defaultdict(list)
    claims: dict[str, list[Op]] = defaultdict(list)
    failed_runs: Counter[str] = Counter()
    stored: dict[str, list[Final]] = defaultdict(list)
    for op in ops:
        if op.name == "enqueue" and op.key is not None:
            enqueues[op.key].append(op)
        elif op.name == "claim" and op.outcome == "ok":
            claims[op.key if op.key is not None else f"job {op.job}"].append(op)
        elif _ends_a_lease(op) and op.key is not None:
            failed_runs[op.key] += 1
        elif op.name in WRITES and op.outcome == "failed":
            found.refused += 1
    for job in final:
        stored[job.key if job.key is not None else f"job {job.id}"].append(job)
    found.deliveries = sum(len(c) for c in claims.values())

    seen = set(stored) | set(claims)
    for key in sorted(seen):
        tries = enqueues.get(key, [])
        if not tries or all(op.outcome == "failed" for op in tries):
            found.unexpected.append(key)
    for key, tries in sorted(enqueues.items()):
        if any(op.outcome == "ok" for op in tries):
            found.enqueued += 1
        elif any(op.outcome == "unknown" for op in tries):
            found.unknown += 1
            if key in seen:
                found.recovered.append(key)
    _lost(found, enqueues, claims, stored, tail_from)
    _duplicated(found, enqueues, claims, failed_runs, stored)
    _stale(found, ops, claims, stored)
    return found


def _ends_a_lease(op: Op) -> bool:
    """A failed run (its worker nacks it) or a client's nack that may have been applied:
    the next lease of the job is a re-run, not a duplicate."""
    return ((op.name == "run" and op.outcome == "failed")
            or (op.name == "nack" and op.outcome != "failed"))


def _lost(found: Findings, enqueues: dict[str, list[Op]], claims: dict[str, list[Op]],
          stored: dict[str, list[Final]], tail_from: float | None) -> None:
    owed = [key for key, tries in enqueues.items()
            if any(op.outcome == "ok" for op in tries) or key in found.recovered]
    for key in sorted(owed):
        if any(job.state in TERMINAL for job in stored.get(key, [])):
            continue
        acked = [op.complete or op.invoke for op in enqueues[key] if op.outcome == "ok"]
        when = min(acked) if acked else min(op.invoke for op in enqueues[key])
        if tail_from is not None and when >= tail_from:
            found.lost_tail.append(key)
        else:
            found.lost.append(key)
        found.never_delivered += key not in claims


def _duplicated(found: Findings, enqueues: dict[str, list[Op]], claims: dict[str, list[Op]],
                failed_runs: Counter[str], stored: dict[str, list[Final]]) -> None:
    for key, delivered in sorted(claims.items()):
        leases = Counter((op.job, op.token) for op in delivered)
        twice = sum(n - 1 for n in leases.values())  # one lease delivered again
        jobs = {job for job, _ in leases}
        # One job per enqueue that may have committed; a key's extra job is a duplicate.
        tries = sum(op.outcome != "failed" for op in enqueues.get(key, []))
        extra_jobs = max(0, len(jobs) - max(tries, 1))
        ended = failed_runs[key] + sum(j.timeouts + j.releases for j in stored.get(key, []))
        reruns = len(leases) - len(jobs)
        unexplained = max(0, reruns - ended)
        found.reruns += reruns - unexplained
        found.duplicated += [key] * (twice + extra_jobs + unexplained)


def _stale(found: Findings, ops: list[Op], claims: dict[str, list[Op]],
           stored: dict[str, list[Final]]) -> None:
    stale: set[tuple[int, int]] = set()
    by_job: dict[int, list[Op]] = defaultdict(list)
    for delivered in claims.values():
        for op in delivered:
            if op.job is not None and op.token is not None:
                by_job[op.job].append(op)
    for jobs in stored.values():
        for job in jobs:
            if job.state != "completed" or job.token is None:
                continue
            tokens = [op.token for op in by_job.get(job.id, []) if op.token is not None]
            if job.token not in tokens:
                found.unseen.append(job.id)
            if tokens and max(tokens) > job.token:
                stale.add((job.id, job.token))  # completed under a superseded lease
    # A holder's write repeated after an unknown outcome is one write (a repeat returns
    # the first call's result, design §62): it took effect no earlier than its first try.
    first_try: dict[tuple[str, int, int], float] = {}
    for op in ops:
        if op.name in WRITES and op.job is not None and op.token is not None:
            ident = (op.name, op.job, op.token)
            first_try[ident] = min(first_try.get(ident, op.invoke), op.invoke)
    for op in ops:
        if op.name not in WRITES or op.outcome != "ok" or op.job is None or op.token is None:
            continue
        sent = first_try[op.name, op.job, op.token]
        # Newer leases certainly handed out before this write was first sent.
        if any(c.token is not None and c.token > op.token and c.complete is not None
               and c.complete < sent for c in by_job.get(op.job, [])):
            stale.add((op.job, op.token))
    found.stale = sorted(stale)


# -- reporting ---------------------------------------------------------------------------


def publish(findings: Findings, *, scenario: str, backend: str, seed: int | None = None,
            note: str = "", **figures: Any) -> None:
    """Appends one run's findings as a JSON line to ``$LEASEQ_HISTORY_REPORT`` when set:
    what scripts/reliability-table collects into docs/reliability.md."""
    path = os.environ.get("LEASEQ_HISTORY_REPORT")
    if not path:
        return
    line = {"scenario": scenario, "backend": backend, "seed": seed, "note": note,
            "at": time.time(), **figures, **findings.as_dict()}
    with open(path, "a") as out:
        out.write(json.dumps(line) + "\n")
