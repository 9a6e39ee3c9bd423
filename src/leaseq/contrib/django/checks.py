"""``manage.py check`` (and every ``runserver``/``migrate`` start) reports a
``settings.LEASEQ`` leaseq cannot use, before the first enqueue would."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error
from django.db import connections

from leaseq import ConfigurationError
from leaseq.contrib.django.conf import database_url, read_config


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """``leaseq.E001``: ``settings.LEASEQ`` is malformed, or its database is one leaseq
    cannot reach (a backend it does not run on, an in-memory SQLite database, ...)."""
    try:
        config = read_config()
        if config.url is None:
            wrapper = connections[config.alias]
            database_url(wrapper.vendor, wrapper.settings_dict, config.alias)
    except ConfigurationError as exc:
        return [Error(str(exc), hint="See docs/django.md.", id="leaseq.E001")]
    return []
