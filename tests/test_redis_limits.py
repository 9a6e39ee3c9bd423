"""What only the Redis backend has to prove about flow control (issue 13); the shared
semantics are in tests/conformance/test_flow_control.py.

Covered: the Lua arithmetic (``_common.lua``) gives exactly what ``_core.limits`` gives;
the three settings are stored as exact text and ``None`` clears them; the bucket lives in
the settings hash as ``rate_tokens`` / ``rate_at``, written only by claims that spend and
invisible to ``queue_configs``; the bucket refills by the server's clock; each queue of a
multi-queue claim gets its own allowance; ``next_due`` by case (sync and async); and, with
racing processes, a limit is never exceeded (exact counts, and running intervals by the
server's own clock).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import traceback
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import leaseq
from leaseq._core import limits
from tests.conftest import require
from tests.helpers import REDIS_URL

redis = pytest.importorskip("redis")

from leaseq.backends.redis.keys import Keys  # noqa: E402  (needs redis-py)
from leaseq.backends.redis.lua import SCRIPTS  # noqa: E402
from tests import test_redis_backend as redis_backend_tests  # noqa: E402

# The fixtures of tests/test_redis_backend.py, shared by assignment (an import of the names
# would read, to ruff, as each test's argument redefining it).
prefix = redis_backend_tests.prefix
rq = redis_backend_tests.rq
server = redis_backend_tests.server

CTX = multiprocessing.get_context("spawn")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def backend(q: leaseq.Queue) -> Any:
    return q._backend  # the raw contract: next_due and the new settings


def configure(q: leaseq.Queue, queue: str, **changes: int | float | None) -> None:
    backend(q).configure_queue(queue, changes)


def settings_hash(server: Any, prefix: str, queue: str) -> dict[str, str]:
    return server.hgetall(Keys(prefix).settings(queue))  # type: ignore[no-any-return]


def server_us(server: Any) -> int:
    seconds, micros = server.time()
    return int(seconds) * 1_000_000 + int(micros)


# -- the Lua arithmetic against _core.limits ---------------------------------------------------

# _common.lua followed by a dispatcher: ARGV[1] names the function, the rest are its
# arguments ("" for nil); the reply is the result as exact decimal text, or nil.
HARNESS = SCRIPTS["claim"].text.split("-- claim: available -> running")[0] + """
local function arg(i)
  if ARGV[i] == '' then return nil end
  return tonumber(ARGV[i])
end
local result
if ARGV[1] == 'tokens_now' then result = tokens_now(arg(2), arg(3), arg(4), arg(5))
elseif ARGV[1] == 'allowance' then result = allowance(arg(2), arg(3), arg(4), arg(5), arg(6))
elseif ARGV[1] == 'next_start' then result = next_start(arg(2), arg(3), arg(4), arg(5), arg(6))
end
if result == nil then return nil end
return decimal(result)
"""


@pytest.fixture(scope="module")
def lua() -> Iterator[Any]:
    """Calls one flow-control function of _common.lua on the server."""
    require("redis")
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    sha = client.script_load(HARNESS)

    def call(name: str, *args: float | None) -> float | None:
        texts = ["" if a is None else repr(a) for a in args]
        reply = client.evalsha(sha, 0, name, *texts)
        return None if reply is None else float(reply)

    try:
        yield call
    finally:
        client.close()


rates = st.floats(0.001, 1e6)
maybe_tokens = st.none() | st.floats(-1.0, 1e6)
maybe_burst = st.none() | st.integers(1, 1_000_000)
maybe_cap = st.none() | st.integers(1, 100)


def test_the_lua_arithmetic_matches_the_python_on_chosen_cases(lua: Any) -> None:
    cases: list[tuple[str, tuple[float | None, ...]]] = [
        ("tokens_now", (10.0, None, None, None)),   # never used: full, size 1
        ("tokens_now", (10.0, 5, None, 3.0)),
        ("tokens_now", (10.0, 5, 0.0, 0.25)),       # 2.5 tokens
        ("tokens_now", (10.0, 5, 0.0, -1.0)),       # a clock step back refills nothing
        ("tokens_now", (0.1, 3, 0.7, 3.0)),         # 0.7 + 0.3: a hair below 1
        ("allowance", (10, None, 0, None, None)),
        ("allowance", (10, 2, 1, None, None)),
        ("allowance", (10, 2, 5, None, None)),      # over the limit: 0, not negative
        ("allowance", (10, None, 0, 1.0, 0.9999999999)),  # a hair below one token
        ("allowance", (10, 4, 1, 1.0, 2.5)),
        ("next_start", (None, 0, None, None, None)),
        ("next_start", (0.0, 0, None, None, None)),
        ("next_start", (-3.0, 2, 2, None, None)),   # held by concurrency: nothing tells
        ("next_start", (-3.0, 0, None, 4.0, 0.5)),
        ("next_start", (2.0, 0, None, 0.1, 0.0)),   # the token comes later than the job
        ("next_start", (2.0, 9, 1, 10.0, 0.0)),
    ]
    for name, args in cases:
        expected = getattr(limits, name)(*args)
        assert lua(name, *args) == expected, (name, args)


@settings(max_examples=300, deadline=None)
@given(rate=rates, burst=maybe_burst, tokens=maybe_tokens,
       elapsed=st.none() | st.floats(-10.0, 1e5))
def test_tokens_now_in_lua_is_the_python_one(
    lua: Any, rate: float, burst: int | None, tokens: float | None, elapsed: float | None
) -> None:
    assert lua("tokens_now", rate, burst, tokens, elapsed) == limits.tokens_now(
        rate, burst, tokens, elapsed)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 10_000), cap=maybe_cap, running=st.integers(0, 200),
       rate=st.none() | rates, tokens=maybe_tokens)
def test_allowance_in_lua_is_the_python_one(
    lua: Any, limit: int, cap: int | None, running: int, rate: float | None,
    tokens: float | None,
) -> None:
    assert lua("allowance", limit, cap, running, rate, tokens) == limits.allowance(
        limit, cap, running, rate, tokens)


@settings(max_examples=300, deadline=None)
@given(earliest=st.none() | st.floats(-1e4, 1e6), running=st.integers(0, 200), cap=maybe_cap,
       rate=st.none() | rates, tokens=maybe_tokens)
def test_next_start_in_lua_is_the_python_one(
    lua: Any, earliest: float | None, running: int, cap: int | None, rate: float | None,
    tokens: float | None,
) -> None:
    assert lua("next_start", earliest, running, cap, rate, tokens) == limits.next_start(
        earliest, running, cap, rate, tokens)


# -- settings and the bucket's fields ----------------------------------------------------------


def test_the_settings_are_stored_as_exact_text_and_none_clears_them(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    configure(rq, "q", concurrency_limit=2, rate_per_sec=0.1, rate_burst=3)
    assert settings_hash(server, prefix, "q") == {
        "concurrency_limit": "2", "rate_per_sec": "0.1", "rate_burst": "3"}
    config = rq.queue_configs()["q"]
    assert (config.concurrency_limit, config.rate_per_sec, config.rate_burst) == (2, 0.1, 3)
    assert isinstance(config.concurrency_limit, int) and isinstance(config.rate_burst, int)
    configure(rq, "q", concurrency_limit=None, rate_per_sec=None, rate_burst=None)
    assert settings_hash(server, prefix, "q") == {}
    assert rq.queue_configs()["q"] == leaseq.QueueConfig("q")


def test_the_bucket_is_written_by_claims_that_spend_and_hidden_from_configs(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    configure(rq, "r", rate_per_sec=0.001, rate_burst=3)
    configure(rq, "plain", max_attempts=5)
    before = rq.queue_configs()
    assert rq.dequeue("r", worker_id="w") == []  # no jobs: nothing spent, nothing written
    assert "rate_at" not in settings_hash(server, prefix, "r")
    rq.enqueue_many([{"queue": "r"}] * 5 + [{"queue": "plain"}] * 2)
    start = server_us(server)
    assert len(rq.dequeue("r", worker_id="w", limit=10)) == 3  # the full bucket
    stored = settings_hash(server, prefix, "r")
    assert float(stored["rate_tokens"]) == 0.0
    assert start <= int(stored["rate_at"]) <= server_us(server)
    assert rq.dequeue("r", worker_id="w", limit=10) == []  # empty: no write either
    assert settings_hash(server, prefix, "r") == stored
    assert len(rq.dequeue("plain", worker_id="w", limit=10)) == 2
    assert set(settings_hash(server, prefix, "plain")) == {"max_attempts"}
    assert rq.queue_configs() == before


def test_the_bucket_refills_by_the_servers_clock(
    rq: leaseq.Queue, server: Any, prefix: str
) -> None:
    configure(rq, "r", rate_per_sec=1.0, rate_burst=5)
    rq.enqueue_many([{"queue": "r"}] * 5)
    # Emptied 2 s ago by the server's clock: 2 tokens (and a few µs) now, 3 would be wrong.
    server.hset(Keys(prefix).settings("r"),
                mapping={"rate_tokens": "0", "rate_at": str(server_us(server) - 2_000_000)})
    assert len(rq.dequeue("r", worker_id="w", limit=10)) == 2
    left = float(settings_hash(server, prefix, "r")["rate_tokens"])
    assert 0.0 <= left < 0.5
    wait = backend(rq).next_due(["r"])
    assert 0.5 < wait <= 1.0 - left


def test_each_queue_of_a_claim_gets_its_own_allowance(rq: leaseq.Queue) -> None:
    configure(rq, "one", concurrency_limit=1)
    configure(rq, "two", rate_per_sec=0.001, rate_burst=2)
    rq.enqueue_many([{"queue": name, "priority": 9 if name == "one" else 0}
                     for name in ("one", "two", "free") for _ in range(4)])
    jobs = rq.dequeue(["one", "two", "free"], worker_id="w", limit=6)
    assert [j.queue for j in jobs] == ["one", "two", "two", "free", "free", "free"]
    rq.ack(jobs[0])
    assert [j.queue for j in rq.dequeue(["one", "two"], worker_id="w", limit=6)] == ["one"]


# -- next_due ----------------------------------------------------------------------------------


def test_next_due_by_case(rq: leaseq.Queue, server: Any, prefix: str) -> None:
    b = backend(rq)
    assert b.next_due([]) is None
    assert b.next_due(["empty"]) is None
    rq.enqueue("later", delay=30)
    assert 29 < b.next_due(["later"]) <= 30
    rq.enqueue("now")
    assert b.next_due(["later", "now"]) == 0.0
    rq.pause("now")
    assert 29 < b.next_due(["later", "now"]) <= 30
    rq.resume("now")
    configure(rq, "now", concurrency_limit=1)
    [job] = rq.dequeue("now", worker_id="w")
    rq.enqueue("now")
    assert b.next_due(["now"]) is None  # a slot frees when a job ends
    assert 29 < b.next_due(["now", "later"]) <= 30
    rq.ack(job)
    assert b.next_due(["now"]) == 0.0
    # A job due now behind an empty bucket of 0.01 tokens/s waits 100 s for its token;
    # one due in 30 s behind a bucket holding 0.9 waits for the job (its token comes in 10).
    configure(rq, "now", rate_per_sec=0.01)
    configure(rq, "later", rate_per_sec=0.01)
    for queue, tokens in (("now", "0"), ("later", "0.9")):
        server.hset(Keys(prefix).settings(queue),
                    mapping={"rate_tokens": tokens, "rate_at": str(server_us(server))})
    assert 99 < b.next_due(["now"]) <= 100
    assert 29 < b.next_due(["later", "now"]) <= 30
    # Holding 0.5, its token comes in 50 s, after the job is due: it waits for both.
    server.hset(Keys(prefix).settings("later"),
                mapping={"rate_tokens": "0.5", "rate_at": str(server_us(server))})
    assert 49 < b.next_due(["later"]) <= 50


def test_next_due_async(prefix: str) -> None:
    async def body() -> tuple[Any, Any]:
        async with leaseq.connect_async(REDIS_URL, table_prefix=prefix) as aq:
            await aq.enqueue("q", delay=10)
            return await aq._backend.next_due(["q"]), await aq._backend.next_due(["none"])

    wait, nothing = asyncio.run(body())
    assert 9 < wait <= 10 and nothing is None


# -- racing processes --------------------------------------------------------------------------


def claimer(prefix: str, queue: str, rounds: int, ack: bool, barrier: Any, results: Any) -> None:
    """A child process: claims from ``queue`` ``rounds`` times (acking at once with
    ``ack``), or with ``rounds`` 0 until the queue has no job left to claim; reports how
    many jobs it got."""
    try:
        q = leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None)
        got = done = 0
        barrier.wait(30)
        while done < rounds or not rounds:
            done += 1
            jobs = q.dequeue(queue, worker_id="racer", limit=4)
            got += len(jobs)
            if ack and jobs:
                q.ack_many(jobs)
            if not rounds and not jobs and not q.stats()[queue].available:
                break
        q.close()
        results.put(("ok", got))
    except BaseException:
        results.put(("error", traceback.format_exc()))
        raise


def race(prefix: str, queue: str, rounds: int, ack: bool, processes: int = 4) -> list[int]:
    barrier = CTX.Barrier(processes)
    results = CTX.Queue()
    procs = [CTX.Process(target=claimer, args=(prefix, queue, rounds, ack, barrier, results))
             for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        replies = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
    errors = [r[1] for r in replies if r[0] == "error"]
    assert not errors, errors[0]
    return [r[1] for r in replies]


def test_racing_claimers_take_exactly_the_concurrency_limit(rq: leaseq.Queue, prefix: str
                                                           ) -> None:
    configure(rq, "c", concurrency_limit=3)
    rq.enqueue_many([{"queue": "c"}] * 40)
    assert sum(race(prefix, "c", rounds=50, ack=False)) == 3
    assert rq.stats()["c"].running == 3


def test_racing_claimers_take_exactly_the_burst(rq: leaseq.Queue, prefix: str) -> None:
    # 0.001 tokens/s refills nothing while they race: the burst is all there is.
    configure(rq, "r", rate_per_sec=0.001, rate_burst=5)
    rq.enqueue_many([{"queue": "r"}] * 40)
    assert sum(race(prefix, "r", rounds=50, ack=True)) == 5


def test_racing_claimers_never_run_more_than_the_limit_at_once(
    rq: leaseq.Queue, prefix: str
) -> None:
    configure(rq, "c", concurrency_limit=2)
    n = 300
    rq.enqueue_many([{"queue": "c"}] * n)
    assert sum(race(prefix, "c", rounds=0, ack=True)) == n
    # Each job ran from its claim to its ack, both stamped by the server's clock, and the
    # scripts run one at a time: at an equal stamp the ack came first (it freed the slot).
    events: list[tuple[int, int]] = []
    after = 0
    while page := rq.jobs("c", state="completed", limit=1000, after=after):
        for job in page:
            assert job.started_at and job.finished_at
            events += [(_us(job.started_at), 1), (_us(job.finished_at), -1)]
        after = page[-1].id
    running = peak = 0
    for _, step in sorted(events):
        running += step
        peak = max(peak, running)
    assert peak == 2


def _us(when: datetime) -> int:
    return (when - EPOCH) // timedelta(microseconds=1)
