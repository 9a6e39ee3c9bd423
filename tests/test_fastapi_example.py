"""``examples/fastapi_app``: the lifespan opens the AsyncQueue, ``POST /orders`` writes the
order and its job in one transaction, and the dashboard is mounted at ``/leaseq``.

Runs on each SQL backend against the test database, on fresh tables: the app reads its
database URL and table names from the environment, as it would when deployed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

import leaseq
import leaseq.testing
from leaseq.dashboard import running
from tests.conftest import require
from tests.helpers import SQL_BACKENDS
from tests.test_sqlalchemy import sqlalchemy_url

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fastapi_app"
GOOD_CARD = "4242424242424242"


@pytest.fixture(params=SQL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's ``backend``: the example joins SQL transactions."""
    name: str = request.param
    require(name)
    return name


def load(name: str) -> ModuleType:
    """A module of the example, imported fresh (it reads the environment)."""
    spec = importlib.util.spec_from_file_location(f"fastapi_example_{name}", EXAMPLE / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def shop(
    url: str, prefix: str, q: leaseq.Queue, monkeypatch: pytest.MonkeyPatch
) -> Iterator[httpx.Client]:
    """The example app on the test database, served by uvicorn (lifespan on) in a
    thread, and an HTTP client of it. (Not Starlette's TestClient: newer Starlette
    releases warn when it runs on httpx.)"""
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("LEASEQ_TABLE_PREFIX", prefix)
    monkeypatch.setenv("ORDERS_TABLE", f"{prefix}orders")
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    with running(load("app.py").create_app()) as base, \
            httpx.Client(base_url=base, timeout=30) as client:
        yield client


@pytest.fixture
def db(url: str, prefix: str, shop: httpx.Client) -> Iterator[Engine]:
    """The test's own view of the database; drops the orders table at the end (after the
    app stopped: ``shop`` is torn down first)."""
    engine = create_engine(sqlalchemy_url(url, is_async=False))
    try:
        yield engine
    finally:
        with engine.begin() as c:
            c.execute(text(f"DROP TABLE IF EXISTS {prefix}orders"))
        engine.dispose()


def orders(db: Engine, prefix: str) -> list[tuple[int, str, int]]:
    with db.connect() as c:
        rows = c.execute(text(f"SELECT id, item, quantity FROM {prefix}orders ORDER BY id"))
        return [(int(a), b, int(n)) for a, b, n in rows]


def test_order_and_its_job_commit_together(
    shop: httpx.Client, db: Engine, q: leaseq.Queue, prefix: str
) -> None:
    r = shop.post("/orders", json={"item": "teapot", "quantity": 2, "card": GOOD_CARD})
    assert r.status_code == 201, r.text
    order_id, job_id = r.json()["order_id"], r.json()["job_id"]
    assert orders(db, prefix) == [(order_id, "teapot", 2)]
    info = q.get(job_id)
    assert (info.queue, info.kind, info.state, info.payload) == (
        "emails", "send_confirmation", "available", {"order_id": order_id})

    # The worker side (tasks.py) runs the job it finds there.
    tasks = load("tasks.py").tasks
    try:
        assert leaseq.testing.drain(tasks).completed == 1
    finally:
        tasks.close()
    assert q.get(job_id).result == {"order_id": order_id}


def test_failed_request_leaves_neither_order_nor_job(
    shop: httpx.Client, db: Engine, q: leaseq.Queue, prefix: str
) -> None:
    declined = shop.post("/orders", json={"item": "teapot", "quantity": 1,
                                          "card": "4000000000000002"})
    assert declined.status_code == 402, declined.text  # raised after the insert and enqueue
    invalid = shop.post("/orders", json={"item": "teapot", "quantity": 0, "card": GOOD_CARD})
    assert invalid.status_code == 422
    assert orders(db, prefix) == []
    assert q.jobs("emails") == []

    ok = shop.post("/orders", json={"item": "kettle", "quantity": 1, "card": GOOD_CARD})
    assert ok.status_code == 201
    assert [j.payload for j in q.jobs("emails")] == [{"order_id": ok.json()["order_id"]}]


def test_dashboard_is_mounted(shop: httpx.Client, db: Engine) -> None:
    assert shop.post("/orders", json={"item": "cup", "quantity": 3,
                                      "card": GOOD_CARD}).status_code == 201
    page = shop.get("/leaseq/")
    assert page.status_code == 200
    assert "emails" in page.text
    api = shop.get("/leaseq/api/queues")
    assert api.status_code == 200
    assert "emails" in api.text
