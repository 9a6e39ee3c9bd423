"""The Django app: ``"leaseq.contrib.django"`` in ``INSTALLED_APPS``, label ``leaseq``."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import autodiscover_modules


class LeaseqConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    """Finds the tasks: every installed app's ``tasks`` module is imported once Django's
    apps are ready, in every process (the web's and each worker's alike), so
    ``@app.task`` functions are registered wherever a job may be enqueued or run."""

    name = "leaseq.contrib.django"
    label = "leaseq"
    verbose_name = "leaseq"

    def ready(self) -> None:
        """Register the settings check; import each installed app's ``tasks.py``."""
        from leaseq.contrib.django.checks import check_settings

        checks.register(check_settings)
        autodiscover_modules("tasks")
