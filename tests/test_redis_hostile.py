"""Hostile input on Redis: caller data is stored as data, never as key names or patterns.

SPEC "Errors" and issue 5: unique keys, kinds, payloads, errors and worker ids holding glob
characters (``*?[]``), braces (Redis Cluster hash tags), colons (the key separator),
quotes, backslashes, Lua pattern characters, NUL bytes (payloads and errors) and very long
strings go into hash fields and values. So each one round-trips unchanged, two distinct
unique keys never meet (``*`` matches nothing but ``*``; ``{x}`` is no hash tag), and the
only key names under the prefix are the schema's own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import REDIS_URL, drop_tables, new_prefix

HOSTILE = {
    "star": "*",
    "question": "?",
    "class": "[a-z]",
    "negated_class": "[^x]",
    "backslash_star": "\\*",
    "braces": "{x}",
    "open_brace": "{",
    "close_brace": "}",
    "reversed_braces": "}{",
    "empty_tag": "{}",
    "colon": ":",
    "key_like": "a:b:c",
    "whole_key": "{leaseq_:q}:ready",
    "job_key": "job:1",
    "quotes": "\"'`",
    "lua_pattern": "%d+%s*%%",
    "optional_marker": "+",
    "looks_like_reply": "missing",
    "newline": "line\nbreak\r\n",
    "control": "\x01\x02\x7f",
    "spaces": "  ",
    "unicode": "\u00e9\U0001f600\u202e",
    "long": "\U0001f511" * 255,  # 255 four-byte characters: the longest unique key
}
KEY_PATTERN_PARTS = (
    "job:[0-9]+|jobs|ready|delayed|running|dead|completed|cancelled|discarded|unique|paused"
    "|settings|finished|buried"
)


@pytest.fixture
def rq() -> Iterator[leaseq.Queue]:
    require("redis")
    prefix = new_prefix()
    queue = leaseq.connect(REDIS_URL, table_prefix=prefix, reclaim_interval=None)
    queue.prefix = prefix  # type: ignore[attr-defined]
    try:
        yield queue
    finally:
        queue.close()
        drop_tables("redis", prefix)


def redis_keys(prefix: str) -> list[str]:
    import redis

    from leaseq.backends.redis.keys import Keys

    with redis.Redis.from_url(REDIS_URL, decode_responses=True) as client:
        return sorted(client.scan_iter(match=Keys(prefix).pattern(), count=1000))


def assert_only_schema_keys(prefix: str, queues: set[str]) -> None:
    """Every key under the prefix is one the schema names (scripts/_common.lua)."""
    schema = re.compile(
        rf"\{{{prefix}\}}:(ids|epoch|index|queues|configured)"
        rf"|\{{{prefix}:(?P<queue>[A-Za-z0-9_.-]+)\}}:({KEY_PATTERN_PARTS})"
    )
    for key in redis_keys(prefix):
        match = schema.fullmatch(key)
        assert match, f"unexpected key {key!r}"
        assert match["queue"] is None or match["queue"] in queues, key


def test_hostile_unique_keys_are_distinct_jobs_and_round_trip(rq: leaseq.Queue) -> None:
    ids = {name: rq.enqueue("q", {"name": name}, unique_key=key)
           for name, key in HOSTILE.items()}
    assert all(r.created for r in ids.values())
    assert len({r.id for r in ids.values()}) == len(HOSTILE)
    for name, key in HOSTILE.items():
        info = rq.get(ids[name].id)
        assert (info.unique_key, info.payload) == (key, {"name": name})
        again = rq.enqueue("q", {"dup": True}, unique_key=key)
        assert (again.id, again.created) == (ids[name].id, False), name
    assert rq.stats()["q"].available == len(HOSTILE)
    assert_only_schema_keys(rq.prefix, {"q"})  # type: ignore[attr-defined]


@pytest.mark.parametrize("key", ["*", "{x}", "?", "[a-z]", "x"])
def test_a_glob_or_brace_key_meets_only_itself(rq: leaseq.Queue, key: str) -> None:
    others = ["x", "xy", "a", "{y}", "{x}x", "x}", "{x", "*x", "**", "[", "\\x"]
    taken = {k: rq.enqueue("q", unique_key=k).id for k in others if k != key}
    mine = rq.enqueue("q", unique_key=key)
    assert mine.created and mine.id not in taken.values()
    # Finishing the job frees only its own key.
    [job] = [j for j in rq.dequeue("q", limit=100) if j.id == mine.id]
    rq.ack(job)
    assert rq.enqueue("q", unique_key=key).created
    assert all(not rq.enqueue("q", unique_key=k).created for k in taken)


def test_hostile_kinds_payloads_errors_and_worker_ids_round_trip(rq: leaseq.Queue) -> None:
    for name, text in HOSTILE.items():
        kind = text[:200]
        payload = {text: [text, "\x00", f"{text}\x00{text}"], "n": name}
        job_id = rq.enqueue("q", payload, kind=kind).id
        [job] = rq.dequeue("q", worker_id=text[:200])
        assert (job.id, job.kind, job.payload, job.worker_id) == (job_id, kind, payload,
                                                                 text[:200])
        assert rq.nack(job, f"{text}\x00!", delay=0) == "available"
        assert rq.get(job_id).error == f"{text}\\x00!"  # NUL in errors is escaped (SPEC)
        [job] = rq.dequeue("q")
        rq.ack(job, result={"echo": payload})
        info = rq.get(job_id)
        assert (info.state, info.result, info.kind) == ("completed", {"echo": payload}, kind)
    assert_only_schema_keys(rq.prefix, {"q"})  # type: ignore[attr-defined]


def test_empty_and_marker_strings_are_not_null(rq: leaseq.Queue) -> None:
    # Optional script arguments travel as "" (null) or "+value": "" and "+" stay themselves.
    job_id = rq.enqueue("q", "", kind="+").id
    [job] = rq.dequeue("q")
    assert (job.payload, job.kind) == ("", "+")
    rq.nack(job, "", delay=0)
    assert rq.get(job_id).error == ""
    [job] = rq.dequeue("q")
    rq.bury(job, reason="+")
    assert rq.get(job_id).error == "+"


def test_very_long_strings_round_trip(rq: leaseq.Queue) -> None:
    huge = "\x00{*}?[:]" * 60_000  # 780 kB as JSON (NUL is \u0000), hostile throughout
    job_id = rq.enqueue("q", {"blob": huge}, unique_key="{*}" * 85).id
    [job] = rq.dequeue("q")
    assert job.payload == {"blob": huge}
    error = "e" * 70_000  # cut to 64 KiB by the client, as on every backend
    rq.nack(job, error, delay=0)
    assert rq.get(job_id).error == error[:65520] + "...[truncated]"
    [job] = rq.dequeue("q")
    rq.ack(job, result=huge)
    assert rq.get(job_id).result == huge


def test_queue_names_with_every_allowed_character_stay_apart(rq: leaseq.Queue) -> None:
    names = ["a", "a.", "a-", "a_", "A", ".", "-", "_", "a.b", "a-b", "x" * 200]
    ids = {name: rq.enqueue(name, {"q": name}, unique_key="same").id for name in names}
    assert len(set(ids.values())) == len(names)
    for name in names:
        [job] = rq.dequeue(name)
        assert (job.id, job.queue, job.payload) == (ids[name], name, {"q": name})
    assert sorted(rq.stats()) == sorted(names)
    assert_only_schema_keys(rq.prefix, set(names))  # type: ignore[attr-defined]


def test_lone_surrogates_are_refused_before_reaching_redis(rq: leaseq.Queue) -> None:
    # Not valid UTF-8, so no SQL backend could store them: every backend refuses them alike.
    for kwargs in ({"unique_key": "\ud800key"}, {"kind": "\udfffkind"}):
        with pytest.raises(leaseq.InvalidArgument):
            rq.enqueue("q", **kwargs)  # type: ignore[arg-type]
    assert rq.stats() == {}


def test_prune_and_drop_touch_only_their_own_prefix(rq: leaseq.Queue) -> None:
    other_prefix = rq.prefix + "x"  # type: ignore[attr-defined]
    with leaseq.connect(REDIS_URL, table_prefix=other_prefix, reclaim_interval=None) as other:
        try:
            kept = other.enqueue("q", unique_key="*").id
            [job] = other.dequeue("q")
            other.ack(job)
            rq.enqueue("q", unique_key="*")
            [job] = rq.dequeue("q")
            rq.ack(job)
            time.sleep(0.01)  # so every finished_at is strictly in the past
            assert rq.prune(older_than=0) == 1
            assert other.get(kept).state == "completed"
            drop_tables("redis", rq.prefix)  # type: ignore[attr-defined]
            assert redis_keys(rq.prefix) == []  # type: ignore[attr-defined]
            assert other.get(kept).state == "completed"
        finally:
            drop_tables("redis", other_prefix)
