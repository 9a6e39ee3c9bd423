"""Which database: leaseq's one rule for the URL (docs/design.md §54).

Strongest first:

1. ``--url`` on the command line: an explicit override, for this run;
2. the URL the code names: ``App(url)``, ``leaseq.connect(url)``, Django's ``LEASEQ``
   setting;
3. the ``LEASEQ_URL`` environment variable, which fills in only where the code names none;
4. ``sqlite:///leaseq.db`` in the current directory.

``resolve_url`` is the only place in the library that reads the environment for it:
``App()`` calls it when constructed, every CLI command calls it for its ``--url``. A
worker therefore runs on the database its App's code names even with ``LEASEQ_URL``
exported for some other app in the same shell, and ``App()`` without a URL runs where the
environment says, in the producer and the worker alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULT_URL = "sqlite:///leaseq.db"
"""The database when nothing names one: a SQLite file in the current directory."""
URL_ENV = "LEASEQ_URL"
"""The environment variable that names the database when the code names none."""


def resolve_url(
    given: str | None = None,
    *,
    override: str | None = None,
    default: str = DEFAULT_URL,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The database URL by leaseq's one rule: ``override`` (the CLI's ``--url``), else
    ``given`` (the URL the code names), else ``LEASEQ_URL``, else ``default``. An empty
    string counts as not given.

    Args:
        given: The URL the code names, e.g. ``App(url)``'s; None when it names none.
        override: The command line's ``--url``; None when not passed.
        default: The URL when nothing names one (a command may have its own, as
            ``leaseq demo`` does).
        environ: The environment to read; None reads ``os.environ``.
    """
    if override:
        return override
    if given:
        return given
    env = os.environ if environ is None else environ
    return env.get(URL_ENV) or default
