"""leaseq's web dashboard: every queue at a glance, jobs by state, one job in full, dead
letters, and the operator's actions (retry, discard, cancel, kick, pause, resume), with a
JSON API that serves the same data.

Run it with ``leaseq dashboard --url URL`` or mount it in your own ASGI app::

    from starlette.applications import Starlette
    from starlette.routing import Mount
    from leaseq.dashboard import create_app

    app = Starlette(routes=[Mount("/leaseq", app=create_app("postgresql://.../app"))])

It reads and acts through ``AsyncQueue`` only, so it works on every backend. Needs the
``dashboard`` extra (``pip install 'leaseq[dashboard]'``). See docs/dashboard.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leaseq.dashboard.serve import running

if TYPE_CHECKING:
    from leaseq.dashboard.app import create_app, redact_url

__all__ = ["create_app", "redact_url", "running"]


def __getattr__(name: str) -> Any:
    # app.py needs starlette (the dashboard extra); loaded on first use so that every
    # `leaseq` command, which reads security.py's limits at start, runs without it.
    if name in ("create_app", "redact_url"):
        from leaseq.dashboard import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
