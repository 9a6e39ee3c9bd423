"""PostgreSQL LISTEN/NOTIFY wake-ups for the worker.

Enqueues send ``pg_notify('<prefix>jobs', queue)`` in the enqueueing transaction (queue
names only, never payloads; delivered on commit, dropped on rollback). The listener is a
hint, not a correctness mechanism: while it is down the worker's polling covers the
gap, and it reconnects with backoff, waking the worker once on each reconnect to catch up
on anything sent meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

log = logging.getLogger("leaseq.worker")


async def listen(
    url: str,
    prefix: str,
    queues: Sequence[str],
    wake: Callable[[], None],
    stopping: Callable[[], bool],
) -> None:
    import psycopg
    from psycopg import sql

    wanted = set(queues)
    pause = 0.5
    while not stopping():
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            async with conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"{prefix}jobs")))
                pause = 0.5
                wake()
                async for note in conn.notifies():
                    if note.payload in wanted:
                        wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("LISTEN connection lost (%s); polling until it is back", exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
