"""leaseq.testing: inline mode, assert_enqueued/refute_enqueued and drain, on memory://."""

from __future__ import annotations

import secrets

import pytest

import leaseq
from leaseq import testing


@pytest.fixture
def app() -> leaseq.App:
    return leaseq.App(f"memory://{secrets.token_hex(4)}",
                      backoff=leaseq.Backoff(base=0, cap=0, jitter=0))


def test_inline_runs_the_task_at_once_and_propagates_errors(app: leaseq.App) -> None:
    sent: list[str] = []

    @app.task
    def send(to: str) -> None:
        if to == "bad":
            raise ValueError("bad address")
        sent.append(to)

    @app.task
    async def send_async(to: str) -> None:
        sent.append(to.upper())

    with testing.inline(app):
        send.enqueue(to="ada")
        send_async.enqueue(to="bob")
        with pytest.raises(ValueError, match="bad address"):
            send.enqueue(to="bad")
    assert sent == ["ada", "BOB"]
    assert not app.eager
    send.enqueue(to="later")  # outside the block: queued, not run
    assert sent == ["ada", "BOB"]


def test_inline_still_refuses_calls_the_signature_refuses(app: leaseq.App) -> None:
    @app.task
    def send(to: str) -> None: ...

    with testing.inline(app), pytest.raises(leaseq.InvalidArgument, match="missing"):
        send.enqueue()


def test_assert_enqueued_matches_task_args_and_queue(app: leaseq.App) -> None:
    @app.task(queue="emails")
    def send(to: str, subject: str = "hi") -> None: ...

    send.enqueue(to="ada")
    send.options(delay=600).enqueue(to="bob", subject="later")
    assert len(testing.assert_enqueued(send)) == 2
    assert testing.assert_enqueued(send, args={"to": "bob"}, count=1)[0].state == "scheduled"
    testing.assert_enqueued(send, queue="emails", count=2)
    testing.refute_enqueued(send, args={"to": "carol"})
    with pytest.raises(AssertionError, match="expected at least one waiting"):
        testing.assert_enqueued(send, args={"to": "carol"})
    with pytest.raises(AssertionError):
        testing.refute_enqueued(send, args={"to": "ada"})


def test_drain_runs_due_jobs_and_reraises_the_first_failure(app: leaseq.App) -> None:
    done: list[int] = []

    @app.task(queue="w")
    def work(n: int) -> int:
        if n == 3:
            raise RuntimeError("three is bad")
        done.append(n)
        return n

    work.enqueue_many([{"n": n} for n in range(5)])
    with pytest.raises(RuntimeError, match="three is bad"):
        testing.drain(app)
    assert done == [0, 1, 2]
    result = testing.drain(app, raise_errors=False)
    assert done == [0, 1, 2, 4]
    assert result.completed == 1 and result.failed >= 1


def test_drain_records_outcomes_like_a_worker(app: leaseq.App) -> None:
    @app.task(queue="w", max_attempts=1)
    def doomed() -> None:
        raise leaseq.Bury("needs a human")

    @app.task(queue="w")
    def fine() -> str:
        ctx = leaseq.current_job()
        assert ctx is not None and ctx.job.kind == fine.name
        return "ok"

    d, f = doomed.enqueue().id, fine.enqueue().id
    testing.drain(app, raise_errors=False)
    assert app.queue.get(d).state == "dead"
    assert app.queue.get(d).error == "needs a human"
    assert app.queue.get(f).result == "ok"


def test_tasks_take_keyword_arguments_checked_at_enqueue(app: leaseq.App) -> None:
    @app.task
    def send(to: str, *, subject: str) -> None: ...

    with pytest.raises(leaseq.InvalidArgument, match="unexpected keyword"):
        send.enqueue(to="a", subject="b", cc="c")
    with pytest.raises(leaseq.PayloadNotSerializable):
        send.enqueue(to={1, 2}, subject="x")
    assert app.queue.stats() == {}
    assert send.enqueue("a", subject="b").created  # positional arguments bind by name
    assert app.queue.jobs()[0].payload == {"to": "a", "subject": "b"}


def test_options_override_per_call_and_unique_key_can_be_computed(app: leaseq.App) -> None:
    @app.task(queue="orders", unique_key=lambda order: f"order-{order}")
    def ship(order: int) -> None: ...

    first = ship.enqueue(order=42)
    assert ship.enqueue(order=42) == leaseq.EnqueueResult(first.id, False)
    other = ship.options(queue="rush", priority=9, delay=60).enqueue(order=7)
    info = app.queue.get(other.id)
    assert (info.queue, info.priority, info.state, info.unique_key) == (
        "rush", 9, "scheduled", "order-7")


def test_enqueue_async_and_enqueue_many(app: leaseq.App) -> None:
    import asyncio

    @app.task
    def t(n: int) -> None: ...

    results = t.enqueue_many([{"n": 1}, {"n": 2}])
    assert [r.created for r in results] == [True, True]

    async def main() -> leaseq.EnqueueResult:
        return await t.enqueue_async(n=3)

    assert asyncio.run(main()).created
    assert sorted(j.payload["n"] for j in app.queue.jobs()) == [1, 2, 3]


def test_registering_two_tasks_under_one_name_is_refused(app: leaseq.App) -> None:
    @app.task(name="x")
    def a() -> None: ...

    with pytest.raises(leaseq.ConfigurationError, match="already registered"):
        @app.task(name="x")
        def b() -> None: ...
