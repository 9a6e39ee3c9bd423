"""Typed payloads: arguments and results of richer types than JSON's are stored as plain
JSON and rebuilt from the task's annotations, through ``drain``, inline mode and a worker
on real backends; what cannot be stored is refused at enqueue with nothing written."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum, IntEnum
from pathlib import Path, PurePosixPath
from typing import Any, Optional
from uuid import UUID

import pytest

import leaseq
from leaseq import testing
from tests.conftest import require
from tests.helpers import wait_for
from tests.test_worker import running, state

try:
    import pydantic
except ImportError:  # pydantic is optional: its tests skip without it
    pydantic = None  # type: ignore[assignment]


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Level(IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Address:
    street: str
    city: str
    moved_in: Optional[date] = None  # noqa: UP045 - the typing.Optional spelling is tested


@dataclass
class Order:
    id: UUID
    total: Decimal
    placed_at: datetime
    ship_to: Address
    color: Color
    level: Level
    previous: list[Address] = field(default_factory=list)
    prices: dict[str, Decimal] = field(default_factory=dict)
    size: tuple[int, int] = (0, 0)
    note: str | None = None
    receipt: Path | None = None


BERLIN = timezone(timedelta(hours=2))
ORDER = Order(
    id=UUID("12345678-1234-5678-1234-567812345678"),
    total=Decimal("19.99"),
    placed_at=datetime(2024, 5, 1, 12, 30, 15, 250, tzinfo=BERLIN),
    ship_to=Address("Main St 1", "Berlin", date(2020, 1, 31)),
    color=Color.BLUE,
    level=Level.HIGH,
    previous=[Address("Old Rd 2", "Bonn")],
    prices={"tea": Decimal("2.50"), "cake": Decimal("3")},
    size=(30, 20),
    receipt=Path("/srv/receipts/1.pdf"),
)
ORDER_JSON = {
    "id": "12345678-1234-5678-1234-567812345678",
    "total": "19.99",
    "placed_at": "2024-05-01T12:30:15.000250+02:00",
    "ship_to": {"street": "Main St 1", "city": "Berlin", "moved_in": "2020-01-31"},
    "color": "blue",
    "level": 2,
    "previous": [{"street": "Old Rd 2", "city": "Bonn", "moved_in": None}],
    "prices": {"tea": "2.50", "cake": "3"},
    "size": [30, 20],
    "note": None,
    "receipt": "/srv/receipts/1.pdf",
}


if pydantic is not None:
    class Customer(pydantic.BaseModel):
        id: UUID
        since: datetime
        tags: list[Color] = pydantic.Field(default_factory=list)


@dataclass(frozen=True)
class Receipt:
    order: UUID
    at: datetime
    colors: list[Color]


def register_typed(app: leaseq.App, seen: list[dict[str, Any]], is_async: bool = False
                   ) -> leaseq.Task[..., Receipt]:
    """A task taking every supported type, nested and optional; it records what it got."""

    def handle(order: Order, day: date, when: datetime, ids: list[UUID],
               by_color: dict[str, list[Color]], pair: tuple[Decimal, Path],
               maybe: Optional[datetime] = None, either: int | datetime = 0,  # noqa: UP045
               path: PurePosixPath | None = None) -> Receipt:
        seen.append(dict(order=order, day=day, when=when, ids=ids, by_color=by_color,
                         pair=pair, maybe=maybe, either=either, path=path))
        return Receipt(order.id, when, [order.color, Color.RED])

    if not is_async:
        return app.task(name="typed")(handle)

    async def handle_async(order: Order, day: date, when: datetime, ids: list[UUID],
                           by_color: dict[str, list[Color]], pair: tuple[Decimal, Path],
                           maybe: Optional[datetime] = None, either: int | datetime = 0,  # noqa: UP045
                           path: PurePosixPath | None = None) -> Receipt:
        await asyncio.sleep(0)
        return handle(order, day, when, ids, by_color, pair, maybe, either, path)

    return app.task(name="typed")(handle_async)


ARGS: dict[str, Any] = dict(
    order=ORDER,
    day=date(2024, 2, 29),
    when=datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc),
    ids=[UUID(int=1), UUID(int=2)],
    by_color={"warm": [Color.RED], "cold": [Color.BLUE, Color.BLUE]},
    pair=(Decimal("0.1"), Path("relative/file.txt")),
    maybe=None,
    either=datetime(2030, 1, 1, 0, 0),
    path=PurePosixPath("/etc/hosts"),
)


def assert_rebuilt(got: dict[str, Any]) -> None:
    assert got == ARGS
    assert got["when"].utcoffset() == timedelta(0)
    assert got["order"].placed_at.utcoffset() == timedelta(hours=2)  # the offset kept
    assert type(got["order"].level) is Level and type(got["pair"]) is tuple
    assert type(got["order"].ship_to) is Address and type(got["pair"][1]) is type(Path())


@pytest.fixture
def memory_app() -> leaseq.App:
    return leaseq.App(f"memory://{secrets.token_hex(4)}",
                      backoff=leaseq.Backoff(base=0, cap=0, jitter=0))


def test_every_type_round_trips_through_drain(memory_app: leaseq.App) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(memory_app, seen)
    job = typed.enqueue(**ARGS).id
    stored = memory_app.queue.get(job).payload
    assert stored["order"] == ORDER_JSON  # plain JSON in the database
    assert stored["either"] == "2030-01-01T00:00:00" and stored["maybe"] is None
    assert stored["pair"] == ["0.1", "relative/file.txt"]
    assert testing.drain(memory_app) == testing.DrainResult(1, 0)
    [got] = seen
    assert_rebuilt(got)
    result = memory_app.queue.get(job).result
    assert result == {"order": str(ORDER.id), "at": "2024-05-01T10:00:00+00:00",
                      "colors": ["blue", "red"]}
    assert typed.decode_result(result) == Receipt(ORDER.id, ARGS["when"], [Color.BLUE, Color.RED])


def test_enqueue_many_options_and_async_enqueue_convert_too(memory_app: leaseq.App) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(memory_app, seen)
    typed.enqueue_many([ARGS, {**ARGS, "maybe": ARGS["when"], "either": 7}])
    typed.options(priority=5, unique_key=lambda order, **_: str(order.id)).enqueue(**ARGS)
    asyncio.run(typed.enqueue_async(**ARGS))
    testing.drain(memory_app)
    assert len(seen) == 4
    for got in seen:
        assert got["order"] == ORDER and type(got["when"]) is datetime
    assert {got["either"] for got in seen} == {7, ARGS["either"]}
    assert sum(got["maybe"] == ARGS["when"] for got in seen) == 1


def test_inline_mode_runs_the_task_with_rebuilt_arguments(memory_app: leaseq.App) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(memory_app, seen)
    with testing.inline(memory_app):
        typed.enqueue(**ARGS)
    assert_rebuilt(seen[0])


@pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")
def test_pydantic_models_round_trip(memory_app: leaseq.App) -> None:
    seen: list[Any] = []

    @memory_app.task
    def welcome(customer: Customer, orders: list[Order]) -> Customer:
        seen.append((customer, orders))
        return customer

    task = welcome
    customer = Customer(id=UUID(int=9), since=datetime(2024, 1, 1, tzinfo=timezone.utc),
                        tags=[Color.RED])
    job = task.enqueue(customer=customer, orders=[ORDER]).id
    assert memory_app.queue.get(job).payload["customer"] == {
        "id": str(UUID(int=9)), "since": "2024-01-01T00:00:00Z", "tags": ["red"]}
    testing.drain(memory_app)
    assert seen == [(customer, [ORDER])]
    assert task.decode_result(memory_app.queue.get(job).result) == customer


@pytest.mark.parametrize("bad", [object(), {"a": {1, object()}}, Address("x", object())])  # type: ignore[arg-type]
def test_what_cannot_be_stored_is_refused_at_enqueue_with_nothing_written(
    memory_app: leaseq.App, bad: Any
) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(memory_app, seen)
    message = r"payload is not JSON-serialisable \(argument 'order': .*cannot be stored\)"
    with pytest.raises(leaseq.PayloadNotSerializable, match=message):
        typed.enqueue(**{**ARGS, "order": bad})
    with pytest.raises(leaseq.PayloadNotSerializable):
        typed.enqueue_many([ARGS, {**ARGS, "order": bad}])  # the good one is not written
    with pytest.raises(leaseq.PayloadNotSerializable):
        typed.options(delay=60).enqueue(**{**ARGS, "order": bad})
    with pytest.raises(leaseq.PayloadNotSerializable):
        asyncio.run(typed.enqueue_async(**{**ARGS, "order": bad}))
    with testing.inline(memory_app), pytest.raises(leaseq.PayloadNotSerializable):
        typed.enqueue(**{**ARGS, "order": bad})
    assert memory_app.queue.jobs() == [] and seen == []


def test_a_payload_that_does_not_fit_its_annotation_fails_the_attempt(
    memory_app: leaseq.App,
) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(memory_app, seen)
    bad = {**typed.conversion.dump_arguments(ARGS), "when": "next tuesday"}  # type: ignore[union-attr]
    job = memory_app.queue.enqueue("default", bad, kind="typed", max_attempts=1).id
    assert testing.drain(memory_app, raise_errors=False) == testing.DrainResult(0, 1)
    dead = memory_app.queue.get(job)
    assert dead.state == "dead" and seen == []
    assert "task 'typed': argument 'when' does not fit its annotation datetime" in (dead.error
                                                                                   or "")
    assert "next tuesday" in (dead.error or "")


def test_a_result_that_cannot_be_stored_fails_the_attempt(memory_app: leaseq.App) -> None:
    @memory_app.task(max_attempts=1)
    def odd() -> Receipt:
        return Receipt(UUID(int=1), datetime.now(), [object()])  # type: ignore[list-item]

    job = odd.enqueue().id
    with pytest.raises(leaseq.PayloadNotSerializable, match="result is not JSON-serialisable"):
        testing.drain(memory_app)
    assert memory_app.queue.get(job).state == "dead"


def test_plain_tasks_are_untouched(memory_app: leaseq.App) -> None:
    @memory_app.task
    def plain(name: str, count: int, tags: list[str], extra: dict[str, Any], x=None) -> dict:  # type: ignore[no-untyped-def]
        return {"name": name}

    assert plain.conversion is None  # nothing to convert: plain jobs skip it all
    assert plain.decode_result({"a": 1}) == {"a": 1}
    payload = {"name": "a", "count": 1, "tags": ["x"], "extra": {"k": [1, None]}, "x": 2.5}
    job = plain.enqueue(**payload).id
    assert memory_app.queue.get(job).payload == payload
    # No annotation asks for a datetime: one is refused as before, not silently converted.
    with pytest.raises(leaseq.PayloadNotSerializable, match="not JSON-serialisable"):
        plain.enqueue(name="a", count=1, tags=[], extra={}, x=datetime.now())


def test_annotations_are_resolved_once_per_task(memory_app: leaseq.App) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(memory_app, seen)
    conversion = typed.conversion
    typed.enqueue(**ARGS)
    testing.drain(memory_app)
    assert typed.conversion is conversion is not None


def test_kwargs_and_unresolvable_annotations(memory_app: leaseq.App) -> None:
    seen: list[Any] = []

    @memory_app.task
    def stamps(label: NotImported, **when: datetime) -> None:  # type: ignore[name-defined]  # noqa: F821
        seen.append((label, when))

    stamps.enqueue(label="x", a=datetime(2024, 1, 1), b=datetime(2025, 1, 1))
    testing.drain(memory_app)
    assert seen == [("x", {"a": datetime(2024, 1, 1), "b": datetime(2025, 1, 1)})]


# -- in a worker, on real backends ------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    require(name)
    return name


@pytest.fixture
def app(q: leaseq.Queue, url: str, prefix: str) -> Iterator[leaseq.App]:
    application = leaseq.App(url, table_prefix=prefix, lease=5)
    yield application
    application.close()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_worker_rebuilds_arguments_and_stores_results_as_json(
    app: leaseq.App, is_async: bool
) -> None:
    seen: list[dict[str, Any]] = []
    typed = register_typed(app, seen, is_async)
    job = typed.enqueue(**ARGS).id
    with running(app):
        done = wait_for(lambda: state(app, job, "completed", "dead"))
    assert done.state == "completed", done.error
    assert_rebuilt(seen[0])
    assert done.result["at"] == "2024-05-01T10:00:00+00:00"
    receipt = typed.decode_result(done.result)
    assert receipt == Receipt(ORDER.id, ARGS["when"], [Color.BLUE, Color.RED])
    assert receipt.at.tzinfo is not None
