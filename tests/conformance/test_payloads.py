"""Payload and result round trip.

SPEC "Errors": payloads are JSON-serialisable and size-capped (default 1 MiB,
configurable). What goes in comes back equal, as payload (``get`` and ``dequeue``) and as
result (``ack`` then ``get``): nested JSON, unicode (emoji, right-to-left scripts),
strings holding NUL, integers past 64 bits, floats, and a payload just under the cap.
"""

from __future__ import annotations

import pytest

from tests.conformance._util import take

PAYLOADS = {
    "nested": {"a": [1, 2.5, {"b": None, "c": [True, False]}], "d": {"e": {"f": "g"}},
               "empty_dict": {}, "empty_list": [], "empty_str": ""},
    "unicode": {"emoji": "\U0001f600\U0001f389 \U0001f469\u200d\U0001f469\u200d\U0001f467",
                "arabic": "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644",
                "hebrew": "\u05e9\u05dc\u05d5\u05dd", "bidi_marks": "a\u200fb\u202ec",
                "cjk": "\u6f22\u5b57", "key \U0001f511 \u00fc": "value"},
    "nul": {"s": "a\x00b", "\x00": "\x00\x00", "list": ["\x00"]},
    "control_chars": "\t\n\r\x01\x1f\x7f \\ \" ' ` ; -- /* */ %s ? :name",
    "big_ints": {"pos": 2**70, "neg": -(2**70), "i64": 2**63 - 1, "u64": 2**64,
                 "i64_min": -(2**63)},
}
NOT_OBJECTS = ["just a string", [1, "two", [3, [4]]], 0, -7, False, True, None, ""]


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_payload_comes_back_equal(q, payload):
    job_id = q.enqueue("q", payload).id
    assert q.get(job_id).payload == payload
    job = take(q, expect=job_id)
    assert job.payload == payload
    q.ack(job, result=payload)
    done = q.get(job_id)
    assert done.payload == payload
    assert done.result == payload


def test_payloads_that_are_not_objects_come_back_equal(q):
    ids = [r.id for r in q.enqueue_many([{"queue": "q", "payload": p} for p in NOT_OBJECTS])]
    assert [q.get(i).payload for i in ids] == NOT_OBJECTS
    jobs = q.dequeue("q", limit=len(ids))
    assert [j.payload for j in jobs] == NOT_OBJECTS
    for job, payload in zip(jobs, NOT_OBJECTS, strict=True):
        q.ack(job, result=payload)
    assert [q.get(i).result for i in ids] == NOT_OBJECTS


def test_floats_come_back_as_the_same_floats(q):
    payload = [0.1, 1.5, -2.5e-8, 1e20, 1.0, 5e-324, 1.7976931348623157e308]
    job_id = q.enqueue("q", payload).id
    back = take(q, expect=job_id).payload
    assert back == payload
    assert [type(x) for x in back] == [float] * len(payload)


@pytest.mark.parametrize("char", ["x", "\U0001f600"], ids=["ascii", "four_byte"])
def test_payload_just_under_the_default_cap_comes_back_equal(q, char):
    cap = 1024 * 1024
    room = cap - len(b'{"data":""}') - 16
    payload = {"data": char * (room // len(char.encode()))}
    job_id = q.enqueue("q", payload).id
    assert q.get(job_id).payload == payload
    job = take(q, expect=job_id)
    assert job.payload == payload
    q.ack(job, result=payload)
    assert q.get(job_id).result == payload


def test_payload_of_exactly_the_configured_cap_is_accepted(small_q):
    cap = 1000
    payload = "x" * (cap - 2)  # encoded as JSON: the two quotes make it exactly the cap
    job_id = small_q.enqueue("q", payload).id
    assert small_q.get(job_id).payload == payload


def test_ack_without_a_result_records_none(q):
    job_id = q.enqueue("q", {"x": 1}).id
    q.ack(take(q, expect=job_id))
    assert q.get(job_id).result is None
