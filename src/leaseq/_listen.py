"""Push wake-ups, as the clients and the worker run them: each backend brings its own
listeners (``Capabilities.listener`` and ``done_listener``: PostgreSQL LISTEN/NOTIFY,
Redis pub/sub, SQLite's commit counter; none on MySQL/MariaDB and memory), and this
module runs one in a thread of its own for the synchronous client.

Each client says which URL its listeners use (``Capabilities.push_url``): the client's
own, a PostgreSQL ``listen_url``, or none behind a transaction pooler
(``pgbouncer=true``) without one, where every wait polls.

Every listener is a hint, not a correctness mechanism: while it is down the worker's
polling covers the gap, and it reconnects with backoff, waking the worker once on each
reconnect to catch up on anything sent meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("leaseq.worker")

class InThread:
    """A listener on an event loop of its own, in a daemon thread: push wake-ups for the
    synchronous client's blocking ``dequeue``. ``stop()`` cancels it and waits for its
    connection to close."""

    def __init__(self, run: Coroutine[Any, Any, None], name: str = "leaseq-listen") -> None:
        self._loop = asyncio.new_event_loop()
        self._task = self._loop.create_task(run)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._task)
        except (asyncio.CancelledError, Exception) as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.debug("push wake-up listener ended: %s", exc)
        finally:
            self._loop.close()

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop already ended on its own
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=5)
