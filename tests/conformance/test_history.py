"""History.

SPEC "Semantics / History (audit)": every terminal transition — completed (ack),
cancelled (cancel), discarded (discard) — writes one history row with payload, result or
error, attempts, worker and created/started/finished times; ``get`` then shows the job in
that state with ``finished_at`` set. A dead job is still live until it is discarded.
"At-least-once delivery, exactly-once recording": each job gets exactly one terminal row.
"""

from __future__ import annotations

from tests.conformance._util import assert_between, make_dead, take, utcnow


def test_ack_moves_the_job_to_history_as_completed_with_its_result(q):
    r = q.enqueue("q", {"to": "a@b.c"}, kind="mail", priority=3, unique_key="u", max_attempts=4)
    created_at = q.get(r.id).created_at
    job = take(q, expect=r.id, worker_id="w9")
    started_at = q.get(r.id).started_at
    before = utcnow()
    assert q.ack(job, result={"ok": True}) is None
    after = utcnow()
    info = q.get(r.id)
    assert (info.state, info.result, info.error) == ("completed", {"ok": True}, None)
    assert (info.queue, info.kind, info.payload, info.priority) == ("q", "mail", {"to": "a@b.c"}, 3)
    assert (info.unique_key, info.attempts, info.max_attempts) == ("u", 1, 4)
    assert info.worker_id == "w9" and info.lease_until is None
    assert (info.created_at, info.started_at) == (created_at, started_at)
    assert_between(info.finished_at, before, after)


def test_completed_job_has_no_error_even_after_failed_attempts(q):
    job_id = q.enqueue("q").id
    q.nack(take(q, expect=job_id), "transient", delay=0)
    q.ack(take(q, expect=job_id), result=1)
    info = q.get(job_id)
    assert (info.state, info.attempts, info.result, info.error) == ("completed", 2, 1, None)


def test_started_at_is_the_first_claim(q):
    job_id = q.enqueue("q").id
    q.nack(take(q, expect=job_id), delay=0)
    first_start = q.get(job_id).started_at
    q.ack(take(q, expect=job_id))
    assert q.get(job_id).started_at == first_start


def test_every_terminal_transition_writes_one_history_row(q):
    completed = q.enqueue("q").id
    q.ack(take(q, expect=completed))
    cancelled = q.enqueue("q").id
    q.cancel(cancelled)
    discarded = make_dead(q)
    q.discard(discarded)
    for job_id, state in ((completed, "completed"), (cancelled, "cancelled"),
                          (discarded, "discarded")):
        info = q.get(job_id)
        assert info.state == state and info.finished_at is not None
    stats = q.stats()["q"]
    assert (stats.completed, stats.cancelled, stats.discarded) == (1, 1, 1)
    assert (stats.available, stats.scheduled, stats.running, stats.dead) == (0, 0, 0, 0)


def test_history_keeps_the_job_fields_of_cancelled_and_discarded_jobs(q):
    a = q.enqueue("q", {"a": 1}, kind="k", priority=2, unique_key="ka", max_attempts=3).id
    b = q.enqueue("q", {"b": 1}, kind="k", priority=2, unique_key="kb", max_attempts=3,
                  delay=60).id
    q.cancel(a)
    q.discard(b, reason="not needed")
    for job_id, payload, key, state in ((a, {"a": 1}, "ka", "cancelled"),
                                        (b, {"b": 1}, "kb", "discarded")):
        info = q.get(job_id)
        assert (info.state, info.payload, info.unique_key) == (state, payload, key)
        assert (info.kind, info.priority, info.max_attempts, info.attempts) == ("k", 2, 3, 0)
    assert q.get(b).error == "not needed"


def test_dead_job_is_live_until_discarded(q):
    job_id = make_dead(q, error="kept")
    info = q.get(job_id)
    assert (info.state, info.error, info.finished_at) == ("dead", "kept", None)
    q.discard(job_id)
    assert q.get(job_id).state == "discarded"
