"""Flow control (issue 13, item 1; seed 000 ``queue_config``): ``concurrency_limit`` and
``rate_per_sec``/``rate_burst`` are stored with a queue's settings and enforced by every
claim, for every client; ``next_due`` tells an idle worker how long it may sleep.

Racing claimers in several processes are tests/test_flow_control_processes.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time

import pytest

import leaseq
from tests.helpers import wait_for


def fill(q: leaseq.Queue, queue: str, n: int, **options: object) -> list[int]:
    return [q.enqueue(queue, {"i": i}, **options).id for i in range(n)]  # type: ignore[arg-type]


def second(q: leaseq.Queue, url: str, prefix: str) -> leaseq.Queue:
    return leaseq.connect(url, table_prefix=prefix, reclaim_interval=None)


# -- settings ----------------------------------------------------------------------------


def test_limits_are_stored_read_back_and_reset(q):
    config = q.configure_queue("api", concurrency_limit=3, rate_per_sec=2.5, rate_burst=4)
    assert (config.concurrency_limit, config.rate_per_sec, config.rate_burst) == (3, 2.5, 4)
    assert config.limited
    assert q.queue_config("api") == config
    cleared = q.configure_queue("api", concurrency_limit=None, rate_per_sec=None)
    assert cleared == dataclasses.replace(config, concurrency_limit=None, rate_per_sec=None)
    assert not cleared.limited  # rate_burst alone limits nothing
    assert not leaseq.QueueConfig("x").limited


@pytest.mark.parametrize("bad", [
    {"concurrency_limit": 0}, {"concurrency_limit": -1}, {"concurrency_limit": 1.5},
    {"concurrency_limit": True}, {"concurrency_limit": "2"},
    {"rate_per_sec": 0}, {"rate_per_sec": -1.0}, {"rate_per_sec": math.nan},
    {"rate_per_sec": math.inf}, {"rate_per_sec": "10"}, {"rate_per_sec": False},
    {"rate_burst": 0}, {"rate_burst": 2.5}, {"rate_burst": 10**7},
])
def test_bad_limits_are_refused_and_store_nothing(q, bad):
    q.configure_queue("api", concurrency_limit=2)
    with pytest.raises(leaseq.InvalidArgument):
        q.configure_queue("api", **bad)
    assert q.queue_config("api") == leaseq.QueueConfig("api", concurrency_limit=2)


# -- concurrency_limit -------------------------------------------------------------------


def test_concurrency_limit_caps_running_jobs_for_every_client(q, url, prefix):
    q.configure_queue("api", concurrency_limit=2)
    fill(q, "api", 6)
    other = second(q, url, prefix)
    try:
        first = q.dequeue("api", limit=10)
        assert len(first) == 2
        assert other.dequeue("api", limit=10) == []  # the limit is the queue's, not a client's
        q.ack(first[0])
        again = other.dequeue("api", limit=10)
        assert len(again) == 1  # one slot came free
        assert q.dequeue("api", limit=10) == []
        q.nack(first[1], "boom", delay=0)  # a failure frees its slot too
        assert len(other.dequeue("api", limit=10)) == 1
    finally:
        other.close()


def test_a_limit_lowered_below_the_running_jobs_holds_claims_until_they_end(q):
    fill(q, "api", 6)
    held = q.dequeue("api", limit=3)
    assert len(held) == 3
    q.configure_queue("api", concurrency_limit=2)
    assert q.dequeue("api", limit=10) == []
    q.ack(held[0])
    assert q.dequeue("api", limit=10) == []  # still 2 running: at the limit
    q.ack(held[1])
    assert len(q.dequeue("api", limit=10)) == 1


def test_only_the_limited_queue_is_held_back_in_a_claim_of_several(q):
    q.configure_queue("slow", concurrency_limit=1)
    fill(q, "slow", 3, priority=5)
    fill(q, "fast", 3)
    jobs = q.dequeue(["slow", "fast"], limit=10)
    assert [j.queue for j in jobs] == ["slow", "fast", "fast", "fast"]  # claim order kept
    assert q.dequeue(["slow", "fast"], limit=10) == []


def test_a_client_that_has_not_heard_of_a_new_limit_never_exceeds_it(q, url, prefix):
    fill(q, "api", 5)
    stale = second(q, url, prefix)
    try:
        stale.queue_configs()
        assert stale.dequeue("other") == []  # reads (and caches) the settings: no limits yet
        q.configure_queue("api", concurrency_limit=1)
        # SQL backends leave the queue alone until the client re-reads settings; backends
        # that check every claim take exactly one. Neither takes two.
        assert len(stale.dequeue("api", limit=5)) <= 1
        assert len(q.dequeue("api", limit=5)) <= 1
        running = q.stats()["api"].running
        assert running <= 1
    finally:
        stale.close()


def test_a_paused_limited_queue_gives_nothing(q):
    q.configure_queue("api", concurrency_limit=5, rate_per_sec=100, rate_burst=5)
    fill(q, "api", 3)
    q.pause("api")
    assert q.dequeue("api", limit=5) == []
    assert q.next_due("api") is None
    q.resume("api")
    assert len(q.dequeue("api", limit=5)) == 3


# -- rate_per_sec ------------------------------------------------------------------------


def test_rate_limit_allows_a_burst_then_one_start_per_token(q):
    q.configure_queue("mail", rate_per_sec=5, rate_burst=3)
    fill(q, "mail", 10)
    assert len(q.dequeue("mail", limit=10)) == 3  # a full bucket: the burst
    assert q.dequeue("mail", limit=10) == []
    wait = q.next_due("mail")
    assert wait is not None and 0 < wait <= 0.2 + 0.01  # one token takes 1/5 s
    began = time.monotonic()
    got = wait_for(lambda: q.dequeue("mail", limit=10), timeout=5)
    assert len(got) == 1
    assert time.monotonic() - began >= 0.1  # not before the token (coarse: never flaky)


def test_rate_burst_defaults_to_one(q):
    q.configure_queue("mail", rate_per_sec=1)
    fill(q, "mail", 3)
    assert len(q.dequeue("mail", limit=3)) == 1
    assert q.dequeue("mail", limit=3) == []


def test_rate_and_concurrency_limits_combine(q):
    q.configure_queue("api", rate_per_sec=1000, rate_burst=10, concurrency_limit=2)
    fill(q, "api", 5)
    jobs = q.dequeue("api", limit=10)
    assert len(jobs) == 2  # concurrency first: only two tokens spent
    q.ack(jobs[0])
    q.ack(jobs[1])
    assert len(q.dequeue("api", limit=10)) == 2


def test_tokens_are_spent_only_for_jobs_started(q):
    q.configure_queue("mail", rate_per_sec=0.01, rate_burst=2)  # no refill within the test
    assert q.dequeue("mail", limit=5) == []  # nothing to start: no token spent
    fill(q, "mail", 1)
    assert len(q.dequeue("mail", limit=5)) == 1
    fill(q, "mail", 3)
    assert len(q.dequeue("mail", limit=5)) == 1  # the bucket's second token
    assert q.dequeue("mail", limit=5) == []


# -- next_due ----------------------------------------------------------------------------


def test_next_due_is_none_for_empty_queues_and_zero_for_due_jobs(q):
    assert q.next_due(["a", "b"]) is None
    fill(q, "a", 1)
    assert q.next_due(["a", "b"]) == 0
    assert q.next_due("b") is None


def test_next_due_is_the_earliest_scheduled_job_across_priorities_and_queues(q):
    q.enqueue("a", {}, delay=50, priority=5)
    q.enqueue("a", {}, delay=40, priority=0)
    q.enqueue("a", {}, delay=20, priority=1)
    q.enqueue("a", {}, delay=30, priority=1)
    q.enqueue("b", {}, delay=25, priority=-3)
    a = q.next_due("a")
    assert a is not None and 19 < a <= 20
    both = q.next_due(["b", "a"])
    assert both is not None and 19 < both <= 20
    b = q.next_due("b")
    assert b is not None and 24 < b <= 25


def test_next_due_leaves_out_running_and_dead_jobs(q):
    fill(q, "a", 2)
    job = q.dequeue("a")[0]
    q.bury(job, reason="no")
    q.dequeue("a")
    assert q.next_due("a") is None


def test_next_due_waits_for_a_token_or_a_slot(q):
    q.configure_queue("r", rate_per_sec=2)
    fill(q, "r", 2)
    assert len(q.dequeue("r", limit=5)) == 1
    wait = q.next_due("r")
    assert wait is not None and 0.3 < wait <= 0.5
    q.configure_queue("c", concurrency_limit=1)
    fill(q, "c", 2)
    held = q.dequeue("c", limit=5)
    assert q.next_due("c") is None  # a slot frees when a job ends: nothing to wait for
    q.ack(held[0])
    assert q.next_due("c") == 0


def test_a_scheduled_job_in_a_rate_limited_queue_waits_for_the_later_of_both(q):
    q.configure_queue("r", rate_per_sec=0.1)  # a token every 10 s
    fill(q, "r", 1)
    assert len(q.dequeue("r")) == 1
    q.enqueue("r", {}, delay=2)
    wait = q.next_due("r")
    assert wait is not None and 9 < wait <= 10


def test_async_client_claims_under_limits_and_reads_next_due(backend, url, prefix, q):
    q.configure_queue("api", concurrency_limit=1)
    fill(q, "api", 2)

    async def main() -> tuple[int, float | None]:
        aq = leaseq.AsyncQueue(url, leaseq.Settings(table_prefix=prefix))
        try:
            jobs = await aq.dequeue("api", limit=5)
            return len(jobs), await aq.next_due("api")
        finally:
            await aq.close()

    taken, due = asyncio.run(main())
    assert (taken, due) == (1, None)
