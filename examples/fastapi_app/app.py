"""A FastAPI shop that places an order and queues its confirmation email atomically.

- The lifespan opens one ``leaseq.AsyncQueue`` and one SQLAlchemy ``AsyncEngine`` on the
  same database, creates the tables, and closes both on shutdown.
- ``POST /orders`` inserts the order, enqueues the ``send_confirmation`` job with
  ``conn=session`` and charges the card, all in the request's one transaction: a declined
  card (402) rolls the order and the job back together; a 201 means both committed.
- The leaseq dashboard is mounted at ``/leaseq``.

Run it (see README.md next to this file)::

    pip install 'leaseq[dashboard,sqlalchemy]' fastapi uvicorn aiosqlite
    DATABASE_URL=sqlite:///shop.db uvicorn --factory app:create_app
    DATABASE_URL=sqlite:///shop.db leaseq worker tasks:tasks

Settings come from the environment: ``DATABASE_URL`` (a leaseq URL: ``sqlite:///shop.db``,
``postgresql://user@host/db``, ``mysql://user:pw@host/db``), ``LEASEQ_TABLE_PREFIX``
(default ``leaseq_``), ``ORDERS_TABLE`` (default ``orders``) and ``DASHBOARD_TOKEN``
(unset: the dashboard is open, so keep it behind your own authentication).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field
from sqlalchemy import Column, Integer, MetaData, String, Table, insert
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

import leaseq
from leaseq.dashboard import create_app as create_dashboard

DECLINED_CARD = "4000000000000002"
"""The card number the stand-in payment provider declines."""


class OrderIn(BaseModel):
    """The body of ``POST /orders``."""

    item: str = Field(min_length=1, max_length=100)
    quantity: int = Field(gt=0, le=1000)
    card: str = Field(pattern=r"^[0-9]{12,19}$")


class PaymentDeclined(Exception):
    """The card was refused."""


def sqlalchemy_url(url: str) -> str:
    """The SQLAlchemy asyncio URL for a leaseq URL: the drivers leaseq's async backends
    join (psycopg 3, aiomysql, and aiosqlite for SQLite)."""
    scheme, rest = url.split("://", 1)
    drivers = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg",
               "postgres": "postgresql+psycopg", "mysql": "mysql+aiomysql"}
    if scheme not in drivers:
        raise ValueError(f"DATABASE_URL must be a SQLite, PostgreSQL or MySQL URL, got {url!r}")
    return f"{drivers[scheme]}://{rest}"


async def charge(card: str, amount: int) -> None:
    """A stand-in for a payment provider's API call."""
    if card == DECLINED_CARD:
        raise PaymentDeclined(f"card ending {card[-4:]} declined for {amount} units")


def create_app(
    database_url: str | None = None,
    table_prefix: str | None = None,
    orders_table: str | None = None,
    dashboard_token: str | None = None,
) -> FastAPI:
    """The shop; each argument defaults to its environment variable (module docstring)."""
    url = database_url or os.environ.get("DATABASE_URL", "sqlite:///shop.db")
    prefix = table_prefix or os.environ.get("LEASEQ_TABLE_PREFIX", "leaseq_")
    token = dashboard_token or os.environ.get("DASHBOARD_TOKEN") or None
    metadata = MetaData()
    orders = Table(
        orders_table or os.environ.get("ORDERS_TABLE", "orders"), metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("item", String(100), nullable=False),
        Column("quantity", Integer, nullable=False),
    )
    # The dashboard is an ASGI app of its own: mounted below, its lifespan run by ours.
    board = create_dashboard(url, token=token, table_prefix=prefix)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        queue = leaseq.connect_async(url, table_prefix=prefix)
        engine = create_async_engine(sqlalchemy_url(url))
        try:
            await queue.migrate()  # idempotent; or run `leaseq migrate` when you deploy
            async with engine.begin() as conn:
                await conn.run_sync(metadata.create_all)
            app.state.queue = queue
            app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
            async with board.router.lifespan_context(board):
                yield
        finally:
            await engine.dispose()
            await queue.close()

    app = FastAPI(title="leaseq shop", lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def place_order(order: OrderIn, request: Request) -> dict[str, Any]:
        """Record the order, queue its confirmation, charge the card: all or nothing."""
        queue: leaseq.AsyncQueue = request.app.state.queue
        # One transaction for the whole request: committed when the block ends, rolled
        # back by any exception raised inside it (the HTTPException below included).
        async with request.app.state.sessions.begin() as session:
            result = await session.execute(
                insert(orders).values(item=order.item, quantity=order.quantity))
            order_id = result.inserted_primary_key[0]
            job = await queue.enqueue("emails", {"order_id": order_id},
                                      kind="send_confirmation", conn=session)
            try:
                await charge(order.card, order.quantity)
            except PaymentDeclined as exc:
                raise HTTPException(status_code=402, detail=str(exc)) from exc
        return {"order_id": order_id, "job_id": job.id}

    app.mount("/leaseq", board)
    return app
