"""Serving the dashboard from inside a Python process (tests, benchmarks, notebooks)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from leaseq.errors import ConfigurationError


@contextlib.contextmanager
def running(app: Any, host: str = "127.0.0.1", port: int = 0, timeout: float = 10.0
            ) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields its base URL
    (``http://127.0.0.1:PORT``; port 0 picks a free one) and stops it on exit."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="leaseq-dashboard", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ConfigurationError(f"the dashboard did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()
    try:
        yield f"http://{host}:{bound[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout)
