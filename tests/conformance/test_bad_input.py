"""Bad input.

SPEC "Errors": bad input gets a clear exception from one hierarchy rooted at
``leaseq.LeaseqError`` — never a raw driver error or a half-written job. Queue names are
1-200 of ``[A-Za-z0-9_.-]`` (``InvalidQueueName``); payloads are JSON-serialisable
(``PayloadNotSerializable``) and size-capped (``PayloadTooLarge``); out-of-range
arguments raise ``InvalidArgument``; unknown ids raise ``JobNotFound``. Every rejected
call writes nothing (``stats()`` stays empty; a held job is unchanged), and one bad item
in ``enqueue_many`` writes none of the items. Validation errors are also ``ValueError``.

Each test runs a table of bad inputs and lists every case that misbehaved
(``_util.refusals``), so the suite stays fast on servers where each test pays for its
own tables.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import leaseq
from tests.conformance._util import refusals, take, utcnow

BAD_QUEUE_NAMES = {
    "empty": "", "space": "a b", "201_chars": "x" * 201, "non_ascii": "\u00e9", "none": None,
    "slash": "a/b", "newline": "a\n", "semicolon": "q;", "int": 5, "bytes": b"q",
}
NOT_JSON = {
    "bytes": b"raw", "bytes_inside": {"a": [b"raw"]}, "set": {1, 2}, "object": object(),
    "nan": float("nan"), "inf": float("inf"), "minus_inf_inside": [1, float("-inf")],
    "datetime": datetime(2024, 1, 1), "tuple_key": {(1, 2): "v"},
    # json.dumps would silently turn these keys into strings: the job would not come back
    # as it went in.
    "int_key": {1: "a"}, "bool_key_inside": [{"ok": {True: 1}}], "none_key": {None: 0},
}
BAD_ENQUEUE_ARGS = {
    "negative_delay": {"delay": -1},
    "negative_timedelta": {"delay": timedelta(seconds=-1)},
    "nan_delay": {"delay": float("nan")},
    "inf_delay": {"delay": float("inf")},
    "bool_delay": {"delay": True},
    "text_delay": {"delay": "5"},
    "priority_above_int32": {"priority": 2**31},
    "priority_below_int32": {"priority": -(2**31) - 1},
    "float_priority": {"priority": 1.5},
    "bool_priority": {"priority": True},
    "zero_max_attempts": {"max_attempts": 0},
    "negative_max_attempts": {"max_attempts": -1},
    "naive_run_at": {"run_at": datetime.now()},
    "text_run_at": {"run_at": "2030-01-01T00:00:00Z"},
    "delay_and_run_at": {"delay": 5, "run_at": utcnow() + timedelta(hours=1)},
    "empty_unique_key": {"unique_key": ""},
    "long_unique_key": {"unique_key": "k" * 256},
    "nul_unique_key": {"unique_key": "a\x00b"},
    "int_unique_key": {"unique_key": 5},
    "empty_kind": {"kind": ""},
    "long_kind": {"kind": "k" * 201},
}
BAD_JOB_IDS = {"zero": 0, "negative": -1, "text": "1", "float": 1.0, "bool": True,
               "none": None, "past_int64": 2**63}
OPERATOR_VERBS = ("get", "retry", "discard", "cancel")
HOLDER_VERBS = ("ack", "nack", "heartbeat", "release", "bury")


# -- the error tree --------------------------------------------------------------------


def test_validation_errors_are_leaseq_errors_and_value_errors():
    for error in (leaseq.InvalidQueueName, leaseq.InvalidArgument,
                  leaseq.PayloadNotSerializable, leaseq.PayloadTooLarge):
        assert issubclass(error, leaseq.ValidationError), error
        assert issubclass(error, leaseq.LeaseqError) and issubclass(error, ValueError), error


def test_every_other_error_is_a_leaseq_error():
    for error in (leaseq.LeaseLost, leaseq.JobNotFound, leaseq.JobCancelled,
                  leaseq.JobStateError, leaseq.BackendError, leaseq.BackendUnavailable,
                  leaseq.AuthenticationFailed, leaseq.SchemaMissing,
                  leaseq.ConfigurationError):
        assert issubclass(error, leaseq.LeaseqError), error
    assert issubclass(leaseq.JobNotFound, LookupError)


# -- queue names -----------------------------------------------------------------------


def test_enqueue_refuses_invalid_queue_names_and_writes_nothing(q):
    cases = {}
    for case, name in BAD_QUEUE_NAMES.items():
        cases[f"enqueue {case}"] = lambda name=name: q.enqueue(name, {"x": 1})
        cases[f"enqueue_many {case}"] = lambda name=name: q.enqueue_many(
            [{"queue": "ok"}, {"queue": name}])
    assert refusals(cases, leaseq.InvalidQueueName, unchanged=q.stats) == {}
    assert q.stats() == {}


def test_dequeue_and_kick_refuse_invalid_queue_names(q):
    job_id = q.enqueue("ok").id
    cases = {"dequeue empty list": lambda: q.dequeue([])}
    for case, name in BAD_QUEUE_NAMES.items():
        cases[f"dequeue {case}"] = lambda name=name: q.dequeue(name)
        cases[f"dequeue list with {case}"] = lambda name=name: q.dequeue(["ok", name])
        cases[f"kick {case}"] = lambda name=name: q.kick(name)
    assert refusals(cases, leaseq.InvalidQueueName, unchanged=lambda: q.get(job_id)) == {}


def test_queue_names_within_the_rules_are_accepted(q):
    for name in ("x" * 200, "a", "Az09_.-"):
        job_id = q.enqueue(name).id
        assert take(q, name, expect=job_id).queue == name


# -- payloads --------------------------------------------------------------------------


def test_payloads_that_are_not_json_are_refused_and_nothing_is_written(q):
    cases = {case: lambda p=p: q.enqueue("q", p) for case, p in NOT_JSON.items()}
    assert refusals(cases, leaseq.PayloadNotSerializable, unchanged=q.stats) == {}
    assert q.stats() == {}


def test_payload_over_the_cap_is_refused(small_q):
    cases = {
        "ascii": lambda: small_q.enqueue("q", "x" * 999),  # 1001 bytes as JSON, cap 1000
        "utf8 bytes count": lambda: small_q.enqueue("q", "\u00e9" * 500),  # 1002 bytes
        "enqueue_many": lambda: small_q.enqueue_many([{"queue": "q"},
                                                      {"queue": "q", "payload": "x" * 999}]),
    }
    assert refusals(cases, leaseq.PayloadTooLarge, unchanged=small_q.stats) == {}
    assert small_q.stats() == {}


def test_results_that_are_not_json_are_refused_and_the_job_stays_held(q):
    job = take(q, expect=q.enqueue("q").id)
    cases = {case: lambda p=p: q.ack(job, result=p) for case, p in NOT_JSON.items()}
    assert refusals(cases, leaseq.PayloadNotSerializable, unchanged=lambda: q.get(job.id)) == {}
    q.ack(job, result="fine")
    assert q.get(job.id).result == "fine"


def test_result_over_the_cap_is_refused_and_the_job_stays_held(small_q):
    job = take(small_q, expect=small_q.enqueue("q").id)
    before = small_q.get(job.id)
    with pytest.raises(leaseq.PayloadTooLarge):
        small_q.ack(job, result="x" * 999)
    assert small_q.get(job.id) == before


# -- other enqueue arguments -----------------------------------------------------------


def test_enqueue_refuses_out_of_range_arguments_and_writes_nothing(q):
    cases = {case: lambda kw=kw: q.enqueue("q", {"x": 1}, **kw)
             for case, kw in BAD_ENQUEUE_ARGS.items()}
    assert refusals(cases, leaseq.InvalidArgument, unchanged=q.stats) == {}
    assert q.stats() == {}


def test_one_bad_item_in_enqueue_many_writes_nothing(q):
    bad_items = {
        "bad queue": ({"queue": "a b"}, leaseq.InvalidQueueName),
        "bytes payload": ({"queue": "q", "payload": b"x"}, leaseq.PayloadNotSerializable),
        "big priority": ({"queue": "q", "priority": 2**31}, leaseq.InvalidArgument),
        "negative delay": ({"queue": "q", "delay": -1}, leaseq.InvalidArgument),
        "naive run_at": ({"queue": "q", "run_at": datetime.now()}, leaseq.InvalidArgument),
        "no queue": ({"payload": 1}, leaseq.InvalidArgument),
        "unknown key": ({"queue": "q", "bogus": 1}, leaseq.InvalidArgument),
        "not a mapping": ("q", leaseq.InvalidArgument),
    }
    problems = {}
    for case, (bad, error) in bad_items.items():
        items = [{"queue": "q", "payload": 1}, {"queue": "q", "unique_key": "k"}, bad,
                 {"queue": "q", "payload": 3}]
        problems.update(refusals({case: lambda items=items: q.enqueue_many(items)}, error,
                                 unchanged=q.stats))
    assert problems == {}
    assert q.stats() == {}
    assert q.enqueue("q", unique_key="k").created  # the good keyed item was not written


# -- dequeue and holder arguments ------------------------------------------------------


def test_dequeue_refuses_bad_arguments_and_claims_nothing(q):
    job_id = q.enqueue("q").id
    bad = {"negative lease": {"lease": -1}, "zero lease": {"lease": 0},
           "nan lease": {"lease": float("nan")}, "text lease": {"lease": "30"},
           "zero limit": {"limit": 0}, "negative limit": {"limit": -1},
           "float limit": {"limit": 1.5}, "empty worker": {"worker_id": ""},
           "long worker": {"worker_id": "w" * 201}}
    cases = {case: lambda kw=kw: q.dequeue("q", **kw) for case, kw in bad.items()}
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: q.get(job_id)) == {}
    assert q.get(job_id).state == "available"


def test_holder_calls_refuse_bad_arguments_and_change_nothing(q):
    job = take(q, expect=q.enqueue("q").id)
    cases = {
        "nack negative delay": lambda: q.nack(job, "x", delay=-1),
        "nack nan delay": lambda: q.nack(job, "x", delay=float("nan")),
        "nack negative timedelta": lambda: q.nack(job, "x", delay=timedelta(seconds=-1)),
        "heartbeat negative": lambda: q.heartbeat(job, extend=-1),
        "heartbeat zero": lambda: q.heartbeat(job, extend=0),
        "release negative delay": lambda: q.release(job, delay=-1),
        "release negative timedelta": lambda: q.release(job, delay=timedelta(seconds=-5)),
    }
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: q.get(job.id)) == {}
    q.ack(job)


def test_holder_calls_refuse_something_that_is_not_a_job(q):
    job = take(q, expect=q.enqueue("q").id)
    stand_ins = {"id": job.id, "dict": {"id": job.id, "lease_token": job.lease_token},
                 "none": None}
    cases = {f"{verb} {kind}": lambda verb=verb, s=s: getattr(q, verb)(s)
             for verb in HOLDER_VERBS for kind, s in stand_ins.items()}
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: q.get(job.id)) == {}
    q.ack(job)


# -- job ids and operator arguments ----------------------------------------------------


def test_job_ids_that_are_not_positive_int64s_are_refused(q):
    job_id = q.enqueue("q").id
    cases = {f"{verb} {case}": lambda verb=verb, i=i: getattr(q, verb)(i)
             for verb in OPERATOR_VERBS for case, i in BAD_JOB_IDS.items()}
    assert refusals(cases, leaseq.InvalidArgument, unchanged=lambda: q.get(job_id)) == {}


def test_unknown_job_ids_raise_job_not_found(q):
    job_id = q.enqueue("q").id
    cases = {verb: lambda verb=verb: getattr(q, verb)(job_id + 10**6)
             for verb in OPERATOR_VERBS}
    assert refusals(cases, leaseq.JobNotFound, unchanged=lambda: q.get(job_id)) == {}


def test_maintenance_calls_refuse_bad_arguments(q):
    cases = {
        "kick zero limit": lambda: q.kick("q", limit=0),
        "reclaim zero limit": lambda: q.reclaim(limit=0),
        "prune negative age": lambda: q.prune(older_than=-1),
        "prune negative timedelta": lambda: q.prune(older_than=timedelta(days=-1)),
        "prune text age": lambda: q.prune(older_than="1d"),
    }
    assert refusals(cases, leaseq.InvalidArgument) == {}


def test_backoff_refuses_bad_parameters():
    cases = {"negative base": lambda: leaseq.Backoff(base=-1),
             "cap below base": lambda: leaseq.Backoff(base=2, cap=1),
             "jitter of one": lambda: leaseq.Backoff(jitter=1),
             "negative jitter": lambda: leaseq.Backoff(jitter=-0.1)}
    assert refusals(cases, leaseq.InvalidArgument) == {}


def test_lone_surrogates_are_refused_in_names_and_keys(q):
    for kwargs in ({"unique_key": "a\ud800"}, {"kind": "\udfff"}):
        with pytest.raises(leaseq.InvalidArgument):
            q.enqueue("q", {}, **kwargs)
    with pytest.raises(leaseq.PayloadNotSerializable):
        q.enqueue("q", {"s": "\ud800"})
    job_id = q.enqueue("q", {}).id
    job = q.dequeue("q")[0]
    assert q.nack(job, "bad \ud800 text", delay=0) == "available"  # stored escaped
    assert "\\ud800" in (q.get(job_id).error or "")
    assert q.stats()["q"].available == 1
