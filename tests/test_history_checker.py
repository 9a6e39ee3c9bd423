"""The history checker (tests/chaos/history.py) on handcrafted histories: each anomaly is
found where it is, and nothing is found in histories that only look alike (re-runs after
an expired lease, a write racing a claim, an unknown enqueue that never committed).
Pure: no database, no process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import leaseq
from tests.chaos.history import Final, Op, Outcome, Recorder, check, load, outcome_of


def enqueue(key: str, at: float, outcome: Outcome = "ok", job: int | None = None) -> Op:
    return Op("producer", int(at * 100), "enqueue", outcome, at, at + 0.01, key=key, job=job)


def claim(key: str, job: int, token: int, at: float, process: str = "w1") -> Op:
    return Op(process, int(at * 100), "claim", "ok", at, at, key=key, job=job, token=token)


def run(key: str, job: int, token: int, at: float, outcome: Outcome = "ok") -> Op:
    return Op("w1", int(at * 100) + 1, "run", outcome, at, at + 0.05, key=key, job=job,
              token=token)


def write(name: str, key: str, job: int, token: int, at: float, end: float,
          outcome: Outcome = "ok") -> Op:
    return Op("w1", int(at * 100) + 2, name, outcome, at, end, key=key, job=job, token=token)


def done(key: str, job: int, token: int, reserves: int = 1, timeouts: int = 0,
         releases: int = 0) -> Final:
    return Final(job, key, "completed", token, reserves, timeouts, releases)


def once(key: str, job: int, at: float) -> list[Op]:
    """A key enqueued, delivered once, run: the history of a job that went well."""
    return [enqueue(key, at, job=job), claim(key, job, 1, at + 1), run(key, job, 1, at + 1)]


def test_a_clean_history_has_no_anomalies() -> None:
    ops = [*once("a", 1, 0.0), *once("b", 2, 0.5)]
    found = check(ops, [done("a", 1, 1), done("b", 2, 1)])
    assert found.clean() and found.counts() == dict.fromkeys(
        ("lost", "duplicated", "stale", "unexpected", "recovered", "lost_tail"), 0)
    assert (found.enqueued, found.deliveries, found.reruns) == (2, 2, 0)


def test_lost_an_acknowledged_enqueue_never_finished() -> None:
    ops = [*once("a", 1, 0.0), enqueue("gone", 0.2, job=2), enqueue("waiting", 0.3, job=3),
           enqueue("ran", 0.4, job=4), claim("ran", 4, 1, 1.0)]
    final = [done("a", 1, 1), Final(3, "waiting", "available"), Final(4, "ran", "running", None)]
    found = check(ops, final)
    assert found.lost == ["gone", "ran", "waiting"]
    assert found.never_delivered == 2
    assert found.counts()["duplicated"] == found.counts()["stale"] == 0


def test_a_dead_job_is_finished_not_lost() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), run("a", 1, 1, 1.0, "failed")]
    assert check(ops, [Final(1, "a", "dead", None, 1)]).clean()


def test_lost_in_the_unreplicated_tail_is_counted_apart() -> None:
    ops = [enqueue("before", 1.0, job=1), enqueue("after", 5.0, job=2)]
    found = check(ops, [], tail_from=4.0)
    assert (found.lost, found.lost_tail) == (["before"], ["after"])
    assert found.clean() is False  # what is lost before the tail still counts


def test_duplicated_one_lease_delivered_twice() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0, "w1"), claim("a", 1, 1, 1.5, "w2")]
    found = check(ops, [done("a", 1, 1)])
    assert found.duplicated == ["a"]


def test_duplicated_a_new_lease_without_an_ended_one() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), run("a", 1, 1, 1.0),
           claim("a", 1, 2, 2.0), run("a", 1, 2, 2.0)]
    # The database counts no expiry and no hand-back, and the first run did not fail.
    assert check(ops, [done("a", 1, 2, reserves=2)]).duplicated == ["a"]


def test_reruns_after_an_expiry_a_hand_back_or_a_failure_are_explained() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), claim("a", 1, 2, 3.0),
           claim("a", 1, 3, 4.0), run("a", 1, 3, 4.0, "failed"), claim("a", 1, 4, 5.0)]
    found = check(ops, [done("a", 1, 4, reserves=4, timeouts=1, releases=1)])
    assert found.clean() and found.reruns == 3
    # One ended lease fewer, and one re-run is left unexplained.
    found = check(ops, [done("a", 1, 4, reserves=4, timeouts=1)])
    assert (found.duplicated, found.reruns) == (["a"], 2)


def test_duplicated_two_jobs_from_one_enqueue() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), claim("a", 2, 1, 1.1)]
    found = check(ops, [done("a", 1, 1), done("a", 2, 1)])
    assert found.duplicated == ["a"]


def test_stale_a_completion_under_a_superseded_token() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), claim("a", 1, 2, 3.0)]
    # Lease 1 expired (timeouts=1) and lease 2 was handed out, yet lease 1's ack wrote
    # the completion: its result names token 1.
    found = check(ops, [done("a", 1, 1, reserves=2, timeouts=1)])
    assert found.stale == [(1, 1)] and found.duplicated == []


def test_stale_a_write_that_returned_ok_after_a_newer_claim() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), claim("a", 1, 2, 3.0),
           write("ack", "a", 1, 1, 3.5, 3.6)]
    assert check(ops, [done("a", 1, 2, reserves=2, timeouts=1)]).stale == [(1, 1)]


def test_a_write_overlapping_the_newer_claim_is_not_called_stale() -> None:
    """A release that was still in flight when the next claim returned may have taken
    effect first: linearizable either way, so no anomaly."""
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0),
           write("release", "a", 1, 1, 2.9, 3.2), claim("a", 1, 2, 3.0)]
    assert check(ops, [done("a", 1, 2, reserves=2, releases=1)]).clean()


def test_a_repeat_of_a_write_sent_before_the_newer_claim_is_not_stale() -> None:
    """A release whose reply was lost, repeated once a later lease had started: the
    repeat returns the first call's result, which took effect before that claim."""
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0),
           write("release", "a", 1, 1, 2.0, 2.1, outcome="unknown"), claim("a", 1, 2, 3.0),
           write("release", "a", 1, 1, 4.0, 4.1)]
    assert check(ops, [done("a", 1, 2, reserves=2, releases=1)]).clean()
    # Without its first try, the same repeat would be a write after the newer claim.
    assert check([ops[0], ops[1], ops[3], ops[4]],
                 [done("a", 1, 2, reserves=2, releases=1)]).stale == [(1, 1)]


def test_a_refused_stale_write_is_fencing_not_an_anomaly() -> None:
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0), claim("a", 1, 2, 3.0),
           write("ack", "a", 1, 1, 3.5, 3.6, outcome="failed")]
    found = check(ops, [done("a", 1, 2, reserves=2, timeouts=1)])
    assert found.clean() and found.refused == 1


def test_unexpected_a_delivery_nobody_enqueued() -> None:
    ops = [*once("a", 1, 0.0), claim("stranger", 7, 1, 2.0)]
    found = check(ops, [done("a", 1, 1), done("stranger", 7, 1), Final(8, None, "available")])
    assert found.unexpected == ["job 8", "stranger"]


def test_unexpected_an_enqueue_that_failed_for_certain_yet_took_effect() -> None:
    ops = [enqueue("a", 0.0, outcome="failed"), claim("a", 1, 1, 1.0)]
    found = check(ops, [done("a", 1, 1)])
    assert found.unexpected == ["a"] and found.recovered == []


def test_recovered_an_unknown_enqueue_that_committed() -> None:
    ops = [enqueue("in-db", 0.0, outcome="unknown"), enqueue("ran", 0.1, outcome="unknown"),
           claim("ran", 2, 1, 1.0), enqueue("never", 0.2, outcome="unknown")]
    found = check(ops, [Final(1, "in-db", "available"), done("ran", 2, 1)])
    assert found.recovered == ["in-db", "ran"] and found.unknown == 3
    # A recovered job the queue owes like any other: one left waiting is lost.
    assert found.lost == ["in-db"] and found.unexpected == []


def test_a_completion_by_a_lease_no_claim_recorded_fails_the_run() -> None:
    """The history must hold every delivery: without one, the checker cannot vouch."""
    ops = [enqueue("a", 0.0, job=1), claim("a", 1, 1, 1.0)]
    found = check(ops, [done("a", 1, 2, reserves=2, timeouts=1)])
    assert found.unseen == [1] and not found.clean()
    assert found.as_dict()["unseen"] == 1


def test_outcomes_of_exceptions() -> None:
    assert outcome_of(leaseq.OutcomeUnknown("x")) == "unknown"
    assert outcome_of(leaseq.BackendUnavailable("x")) == "unknown"
    assert outcome_of(leaseq.NotReplicated("x", 0, 1)) == "unknown"
    assert outcome_of(leaseq.LeaseLost("x")) == "failed"
    assert outcome_of(leaseq.InvalidArgument("x")) == "failed"
    assert outcome_of(RuntimeError("x")) == "unknown"


def test_recorded_files_merge_and_an_interrupted_op_is_unknown(tmp_path: Path) -> None:
    producer, worker = Recorder(tmp_path, "producer"), Recorder(tmp_path, "worker-1")
    with producer.op("enqueue", key="a") as call:
        call.job = 1
    with pytest.raises(leaseq.OutcomeUnknown), producer.op("enqueue", key="b"):
        raise leaseq.OutcomeUnknown("reply lost")
    with pytest.raises(leaseq.LeaseLost), worker.op("ack", key="a", job=1, token=1):
        raise leaseq.LeaseLost("stale")
    worker.observed("claim", key="a", job=1, token=2, value={"pid": 1})
    worker.invoke("run", key="a", job=1, token=2)  # the process died here
    ops = {(op.name, op.key, op.token): op for op in load(tmp_path)}
    assert ops["enqueue", "a", None].outcome == "ok" and ops["enqueue", "a", None].job == 1
    assert ops["enqueue", "b", None].outcome == "unknown"
    assert ops["ack", "a", 1].outcome == "failed"
    assert ops["claim", "a", 2].value == {"pid": 1}
    interrupted = ops["run", "a", 2]
    assert (interrupted.outcome, interrupted.complete) == ("unknown", None)
    path = tmp_path / "worker-1.jsonl"
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["invoke", "failed", "invoke", "ok", "invoke"]
    # Two recorders of one process name would number operations twice: refused.
    Recorder(tmp_path, "worker-1").invoke("run", key="b")
    with pytest.raises(ValueError, match="recorded twice"):
        load(tmp_path)
