"""Dequeue: order, batches, attempts, lease tokens.

SPEC "Semantics / Multiple queues, priority, order": a dequeue names one or more queues;
higher ``priority`` runs first (default 0), then earlier ``available_at``, then lower id —
one global order across the named queues. ``limit=N`` leases up to N jobs in that order.
"At-least-once delivery": every attempt is counted when the job is claimed. "Never
concurrent": every dequeue issues a fresh lease token; a job is held by one lease at a
time, so concurrent dequeuers never get the same job. "Leases": dequeue sets
``lease_until = now + lease``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from tests.conformance._util import assert_between, take, utcnow


def _ids(jobs):
    return [j.id for j in jobs]


def test_higher_priority_is_dequeued_first(q):
    low = q.enqueue("q", priority=-5).id
    mid = q.enqueue("q").id
    high = q.enqueue("q", priority=10).id
    assert [take(q).id for _ in range(3)] == [high, mid, low]


def test_int32_priority_extremes_are_ordered(q):
    lowest = q.enqueue("q", priority=-(2**31)).id
    zero = q.enqueue("q", priority=0).id
    highest = q.enqueue("q", priority=2**31 - 1).id
    assert _ids(q.dequeue("q", limit=3)) == [highest, zero, lowest]


def test_equal_priority_runs_the_earlier_available_at_first(q):
    now = utcnow()
    later = q.enqueue("q", run_at=now - timedelta(seconds=10)).id
    earlier = q.enqueue("q", run_at=now - timedelta(seconds=60)).id
    assert earlier > later  # so only available_at can put it first
    assert [take(q).id for _ in range(2)] == [earlier, later]


def test_equal_priority_and_available_at_runs_the_lower_id_first(q):
    at = utcnow() - timedelta(minutes=1)
    ids = [r.id for r in q.enqueue_many([{"queue": "q", "run_at": at}] * 5)]
    assert [take(q).id for _ in range(5)] == sorted(ids)


def test_priority_outranks_an_older_available_at(q):
    old_low = q.enqueue("q", run_at=utcnow() - timedelta(hours=1)).id
    new_high = q.enqueue("q", priority=1).id
    assert _ids(q.dequeue("q", limit=2)) == [new_high, old_low]


def test_limit_leases_that_many_in_order_and_the_rest_later(q):
    ids = {p: q.enqueue("q", priority=p).id for p in (1, 5, 3, 4, 2)}
    assert _ids(q.dequeue("q", limit=3)) == [ids[5], ids[4], ids[3]]
    assert _ids(q.dequeue("q", limit=10)) == [ids[2], ids[1]]
    assert q.dequeue("q", limit=10) == []


def test_every_job_of_a_batch_is_leased_to_the_caller(q):
    ids = [q.enqueue("q").id for _ in range(3)]
    jobs = q.dequeue("q", worker_id="batcher", lease=30, limit=3)
    assert sorted(_ids(jobs)) == ids
    for job in jobs:
        info = q.get(job.id)
        assert (info.state, info.worker_id, info.attempts) == ("running", "batcher", 1)
        assert info.lease_until == job.lease_until
        assert job.worker_id == "batcher" and job.attempts == 1


def test_dequeue_merges_several_queues_into_one_global_order(q):
    now = utcnow()
    a_old = q.enqueue("a", run_at=now - timedelta(seconds=30)).id
    b_high = q.enqueue("b", priority=5).id
    a_high_older = q.enqueue("a", priority=5, run_at=now - timedelta(seconds=60)).id
    b_old = q.enqueue("b", run_at=now - timedelta(seconds=40)).id
    other = q.enqueue("c", priority=100).id
    jobs = q.dequeue(["a", "b"], limit=10)
    assert _ids(jobs) == [a_high_older, b_high, b_old, a_old]
    assert [j.queue for j in jobs] == ["a", "b", "b", "a"]
    assert q.get(other).state == "available"


def test_limit_applies_to_the_merged_order_not_per_queue(q):
    a = [q.enqueue("a").id for _ in range(3)]
    b = q.enqueue("b", priority=9).id
    assert _ids(q.dequeue(["a", "b"], limit=2)) == [b, a[0]]
    assert _ids(q.dequeue(["b", "a"], limit=5)) == [a[1], a[2]]


def test_dequeue_reads_only_the_named_queues(q):
    q.enqueue("other")
    assert q.dequeue("q") == []
    assert q.dequeue(["q", "third"], limit=5) == []


def test_queue_names_are_compared_exactly(q):
    upper = q.enqueue("Emails").id
    lower = q.enqueue("emails").id
    assert sorted(q.stats()) == ["Emails", "emails"]
    assert _ids(q.dequeue("emails", limit=5)) == [lower]
    assert _ids(q.dequeue("EMAILS", limit=5)) == []
    assert _ids(q.dequeue("Emails", limit=5)) == [upper]


def test_a_queue_named_twice_still_yields_each_job_once(q):
    ids = [q.enqueue("q").id for _ in range(2)]
    assert sorted(_ids(q.dequeue(["q", "q"], limit=5))) == ids


def test_dequeue_of_an_empty_queue_returns_an_empty_list(q):
    assert q.dequeue("q") == []
    assert q.dequeue(["q", "r"], limit=10) == []


def test_dequeue_counts_the_attempt_when_it_claims_the_job(q):
    job_id = q.enqueue("q").id
    first = take(q, expect=job_id)
    assert first.attempts == 1 and q.get(job_id).attempts == 1
    q.nack(first, "again", delay=0)
    second = take(q, expect=job_id)
    assert second.attempts == 2 and q.get(job_id).attempts == 2


def test_every_dequeue_issues_a_fresh_lease_token(q):
    job_id = q.enqueue("q").id
    tokens = []
    for _ in range(3):
        job = take(q, expect=job_id)
        tokens.append(job.lease_token)
        q.nack(job, delay=0)
    assert len(set(tokens)) == 3


def test_dequeue_sets_running_with_lease_until_now_plus_lease(q):
    job_id = q.enqueue("q").id
    before = utcnow()
    job = take(q, worker_id="w7", lease=12.5)
    after = utcnow()
    lease = timedelta(seconds=12.5)
    assert_between(job.lease_until, before + lease, after + lease)
    info = q.get(job_id)
    assert (info.state, info.worker_id, info.lease_until) == ("running", "w7", job.lease_until)
    assert_between(info.started_at, before, after)
    assert job.lease == 12.5


def test_default_lease_is_thirty_seconds(q):
    q.enqueue("q")
    before = utcnow()
    job = take(q)
    after = utcnow()
    assert job.lease == 30
    assert_between(job.lease_until, before + timedelta(seconds=30), after + timedelta(seconds=30))


def test_leased_job_carries_the_enqueued_fields(q):
    r = q.enqueue("q", {"p": [1]}, kind="task", priority=4, unique_key="u", max_attempts=9)
    job = take(q, expect=r.id)
    assert (job.queue, job.kind, job.payload, job.priority) == ("q", "task", {"p": [1]}, 4)
    assert (job.unique_key, job.max_attempts, job.attempts) == ("u", 9, 1)
    assert job.created_at == q.get(r.id).created_at


def test_a_running_job_is_not_dequeued_again(q):
    q.enqueue("q")
    take(q)
    assert q.dequeue("q", limit=10) == []


def test_concurrent_dequeuers_never_get_the_same_job(q):
    workers = 6
    ids = [r.id for r in q.enqueue_many([{"queue": "q", "payload": n} for n in range(40)])]
    barrier = threading.Barrier(workers, timeout=10)

    def drain(n):
        barrier.wait()
        got = []
        while batch := q.dequeue("q", worker_id=f"w{n}", limit=3):
            got += [j.id for j in batch]
        return got

    with ThreadPoolExecutor(workers) as pool:
        per_worker = list(pool.map(drain, range(workers)))
    claimed = [job_id for got in per_worker for job_id in got]
    assert sorted(claimed) == sorted(ids)  # every job once, none twice
