"""What only the Redis backend has to prove about issue 11's operations (the shared
semantics are in tests/conformance/test_seed_*.py).

Covered: the new keys (settings, finished records, the buried index, the configured
registry) follow the schema and a queue without settings gets none of them; settings and
leases read back exactly; ``max_jobs`` is checked whatever the client believes; touch-limit
refusals per item of ``renew_many``; ``unique_for`` inside a batch and after a prune;
``peek`` where the sorted sets alone would get the order wrong; ``oldest_available_age``
across priorities and unpromoted jobs; jobs and dead jobs written by an older leaseq.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import leaseq
from tests.helpers import REDIS_URL

redis = pytest.importorskip("redis")

from leaseq.backends.base import NewJob  # noqa: E402
from leaseq.backends.redis.keys import QUEUE_PARTS, Keys  # noqa: E402
from tests import test_redis_backend as redis_backend_tests  # noqa: E402

# The fixtures of tests/test_redis_backend.py, shared by assignment (an import of the names
# would read, to ruff, as each test's argument redefining it).
prefix = redis_backend_tests.prefix
rq = redis_backend_tests.rq
server = redis_backend_tests.server


def keys_of(server: Any, prefix: str) -> set[str]:
    return set(server.scan_iter(match=Keys(prefix).pattern(), count=1000))


def queue_key(prefix: str, queue: str, part: str) -> str:
    return Keys(prefix).queue(queue)[QUEUE_PARTS.index(part)]


def backend(q: leaseq.Queue) -> Any:
    return q._backend  # the raw contract, to see what the client would translate


# -- the key schema --------------------------------------------------------------------------


def test_new_keys_are_the_documented_ones(rq: leaseq.Queue, server: Any, prefix: str) -> None:
    rq.configure_queue("q", max_jobs=10)
    rq.enqueue("q", unique_key="k")
    rq.ack(rq.dequeue("q", worker_id="w")[0])  # a finished keyed job: its record
    rq.enqueue("q", max_attempts=1)
    rq.nack(rq.dequeue("q", worker_id="w")[0], "boom")  # dead: filed in buried
    parts = "|".join(re.escape(p) + ("[0-9]+" if p == "job:" else "") for p in QUEUE_PARTS)
    schema = re.compile(rf"\{{{prefix}\}}:(ids|index|queues|configured|epoch)"
                        rf"|\{{{prefix}:q\}}:({parts})")
    found = keys_of(server, prefix)
    assert all(schema.fullmatch(key) for key in found), found
    for part in ("settings", "finished", "buried"):
        assert queue_key(prefix, "q", part) in found
    assert f"{{{prefix}}}:configured" in found


def test_a_queue_without_settings_gets_no_settings_keys(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    job_id = rq.enqueue("plain").id
    [job] = rq.dequeue("plain", worker_id="w")
    rq.heartbeat(job)
    rq.ack(job)
    assert rq.get(job_id).state == "completed"
    found = keys_of(server, prefix)
    assert queue_key(prefix, "plain", "settings") not in found
    assert f"{{{prefix}}}:configured" not in found
    assert rq.queue_configs() == {}


# -- settings and leases ---------------------------------------------------------------------


def test_settings_and_leases_read_back_exactly(rq: leaseq.Queue, server: Any,
                                              prefix: str) -> None:
    config = rq.configure_queue("x", default_lease=0.1, max_touch_duration=1e-3 + 7,
                                jitter=0.3, max_touches=3)
    assert (config.default_lease, config.max_touch_duration, config.jitter) == (
        0.1, 1e-3 + 7, 0.3)
    assert config.max_touches == 3 and isinstance(config.max_touches, int)
    assert server.hget(queue_key(prefix, "x", "settings"), "max_touches") == "3"
    odd = 1 / 3
    own = rq.enqueue("x", lease=odd).id
    plain = rq.enqueue("x").id
    jobs = {j.id: j for j in rq.dequeue("x", worker_id="w", limit=2, lease=None)}
    assert jobs[own].lease == odd and rq.get(own).lease == odd
    assert jobs[plain].lease == 0.1 and rq.get(plain).lease is None


def test_none_deletes_a_setting_but_keeps_the_row(rq: leaseq.Queue, server: Any,
                                                 prefix: str) -> None:
    rq.configure_queue("x", max_jobs=5, max_lease=9)
    assert rq.configure_queue("x", max_jobs=None) == leaseq.QueueConfig("x", max_lease=9.0)
    assert not server.hexists(queue_key(prefix, "x", "settings"), "max_jobs")
    rq.configure_queue("x", max_lease=None)
    assert rq.queue_configs() == {"x": leaseq.QueueConfig("x")}
    assert "x" in rq.stats()


def test_max_jobs_is_checked_whatever_the_client_believes(rq: leaseq.Queue,
                                                          prefix: str) -> None:
    with leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None) as other:
        other.configure_queue("cap", max_jobs=1)
    rq.enqueue("cap")
    # capped=() says "no queue is capped": Redis checks every queue anyway.
    with pytest.raises(leaseq.QueueFull, match=r"'cap'.*max_jobs=1"):
        backend(rq).enqueue([NewJob("cap", "null")], None, ())
    assert rq.stats()["cap"].available == 1


def test_renew_many_refuses_per_item_by_each_queues_limits(rq: leaseq.Queue) -> None:
    rq.configure_queue("t", max_touches=0)
    rq.enqueue("t")
    rq.enqueue("free")
    [limited] = rq.dequeue("t", worker_id="w")
    [free] = rq.dequeue("free", worker_id="w")
    before = rq.get(limited.id).lease_until
    out = backend(rq).renew_many([(limited.id, limited.lease_token, 60.0),
                                  (free.id, free.lease_token, 60.0),
                                  (free.id, free.lease_token + 1, 60.0)])
    assert isinstance(out[0], leaseq.TouchLimitExceeded) and "max_touches" in str(out[0])
    until, cancelled = out[1]
    assert cancelled is False and until > free.lease_until
    assert out[2] is None
    assert rq.get(limited.id).lease_until == before


# -- unique_for ------------------------------------------------------------------------------


def test_unique_for_inside_one_batch(rq: leaseq.Queue) -> None:
    done = rq.enqueue("u", unique_key="old").id
    rq.ack(rq.dequeue("u", worker_id="w")[0])
    out = rq.enqueue_many([
        {"queue": "u", "unique_key": "new", "unique_for": 60},
        {"queue": "u", "unique_key": "old", "unique_for": 60},
        {"queue": "u", "unique_key": "new", "unique_for": 60},
        {"queue": "u", "unique_key": "old"},
    ])
    assert [r.created for r in out] == [True, False, False, True]
    assert out[1].id == done and out[2].id == out[0].id
    assert out[3].id not in (done, out[0].id)


def test_unique_for_forgets_a_pruned_twin(rq: leaseq.Queue, server: Any, prefix: str) -> None:
    first = rq.enqueue("u", unique_key="k").id
    rq.ack(rq.dequeue("u", worker_id="w")[0])
    finished = queue_key(prefix, "u", "finished")
    assert server.hget(finished, "k") == str(first)
    time.sleep(0.01)
    assert rq.prune(older_than=0) == 1
    assert not server.hexists(finished, "k")
    again = rq.enqueue("u", unique_key="k", unique_for=60)
    assert again.created and again.id != first


def test_a_stale_finished_record_is_no_twin(rq: leaseq.Queue, server: Any,
                                           prefix: str) -> None:
    # A record whose job is gone (pruned by hand, or by a crash between the two) is
    # checked against the job hash itself.
    rq.enqueue("u", unique_key="k")
    rq.ack(rq.dequeue("u", worker_id="w")[0])
    server.hset(queue_key(prefix, "u", "finished"), "k", "999999")
    assert rq.enqueue("u", unique_key="k", unique_for=60).created


# -- peek and stats --------------------------------------------------------------------------


def test_peek_scheduled_orders_equal_times_by_id(rq: leaseq.Queue) -> None:
    when = datetime.now(timezone.utc) + timedelta(hours=1)
    ids = [r.id for r in rq.enqueue_many([{"queue": "p", "run_at": when}] * 12)]
    assert [j.id for j in rq.peek("p", "scheduled", limit=20)] == ids
    # Members of one score sort as text ("10" < "2"): a limit inside the tie still
    # returns the lowest ids.
    assert [j.id for j in rq.peek("p", "scheduled", limit=3)] == ids[:3]


def test_peek_sees_due_jobs_not_yet_promoted_and_moves_nothing(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    plain = rq.enqueue("p").id
    urgent = rq.enqueue("p", priority=5, delay=0.1).id
    time.sleep(0.2)
    assert [j.id for j in rq.peek("p")] == [urgent, plain]
    assert server.zscore(queue_key(prefix, "p", "delayed"), str(urgent)) is not None
    assert [j.id for j in rq.dequeue("p", worker_id="w", limit=2)] == [urgent, plain]


def test_oldest_available_age_spans_priorities_and_unpromoted_jobs(rq: leaseq.Queue) -> None:
    rq.enqueue("o", delay=0.2)  # due in 0.2 s, then waits in the delayed set
    time.sleep(0.6)
    rq.enqueue("o", priority=9)
    rq.enqueue("o", priority=-3)
    age = rq.stats()["o"].oldest_available_age
    assert age is not None and 0.3 <= age < 5
    [top] = rq.dequeue("o", worker_id="w")  # promotes the old job into ready
    assert top.priority == 9
    age = rq.stats()["o"].oldest_available_age
    assert age is not None and 0.3 <= age < 5
    rq.enqueue("later", delay=60)
    assert rq.stats()["later"].oldest_available_age is None


def test_server_version_is_redis_version(rq: leaseq.Queue, server: Any) -> None:
    assert backend(rq).server_version() == server.info("server")["redis_version"]


# -- data written by an older leaseq ---------------------------------------------------------


def test_jobs_from_before_the_counters_read_with_defaults(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    rq.configure_queue("old", max_touch_duration=60, min_touch_interval=30)
    job_id = rq.enqueue("old").id
    [job] = rq.dequeue("old", worker_id="w")
    key = Keys(prefix).job("old", job_id)
    server.hdel(key, "reserves", "leased_at", "touched_at", "touches", "updated_at")
    info = rq.get(job_id)
    assert (info.reserves, info.updated_at, info.failed_at) == (0, info.created_at, None)
    # No leased_at nor touched_at: as in SQL (comparisons with NULL), neither time limit
    # applies, so the lease is extended despite min_touch_interval.
    assert rq.heartbeat(job, extend=90) > job.lease_until
    assert server.hget(key, "touches") == "1"


def test_migrate_files_dead_jobs_of_an_older_leaseq_for_retention(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    ids = []
    for _ in range(3):
        ids.append(rq.enqueue("r", max_attempts=1).id)
        rq.nack(rq.dequeue("r", worker_id="w")[0], "boom")
    buried = queue_key(prefix, "r", "buried")
    server.delete(buried)  # as an older leaseq left them
    server.hdel(Keys(prefix).job("r", ids[0]), "updated_at")  # created_at then counts
    rq.configure_queue("r", dead_retention=0.05)
    time.sleep(0.1)
    assert rq.reclaim() == 0  # not filed: retention cannot see them
    rq.migrate()
    assert server.zcard(buried) == 3
    assert rq.reclaim() == 3
    assert [rq.get(i).state for i in ids] == ["discarded"] * 3
    assert server.zcard(buried) == 0


def test_migrate_refiles_dead_jobs_of_an_older_leaseq_in_kick_order(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    ids = []
    for priority in (0, 4, 0, 4, 1):
        ids.append(rq.enqueue("o", max_attempts=1, priority=priority).id)
        rq.nack(rq.dequeue("o", worker_id="w")[0], "boom")
    dead = queue_key(prefix, "o", "dead")
    server.delete(dead)
    server.zadd(dead, {str(i): i for i in ids})  # as a leaseq before issue 24 filed them
    assert [j.id for j in rq.peek("o", "dead", limit=10)] == ids  # by id alone
    rq.discard(ids[0])  # a removal finds an old entry too
    assert server.zcard(dead) == 4
    rq.migrate()
    order = [ids[1], ids[3], ids[4], ids[2]]
    assert [j.id for j in rq.peek("o", "dead", limit=10)] == order
    assert server.zrange(dead, 0, -1) == [f"{i:020d}" for i in order]
    assert rq.kick("o", limit=2) == 2
    assert [j.id for j in rq.peek("o", "available", limit=10)] == order[:2]
    rq.migrate()  # nothing left to refile
    assert server.zcard(dead) == 2


def test_reclaim_discards_in_rounds_up_to_its_limit(rq: leaseq.Queue) -> None:
    rq.configure_queue("r", dead_retention=0.05)
    for _ in range(3):
        rq.enqueue("r", max_attempts=1)
    for job in rq.dequeue("r", worker_id="w", limit=3):
        rq.nack(job, "boom")
    time.sleep(0.1)
    assert rq.reclaim(limit=2) == 2
    assert rq.reclaim(limit=2) == 1
    assert rq.stats()["r"].discarded == 3
