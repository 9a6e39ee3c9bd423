"""leaseq in a Django project (docs/django.md).

    INSTALLED_APPS = [..., "leaseq.contrib.django"]
    LEASEQ = {"DATABASE": "default"}            # or {"URL": "postgresql://..."}

    # myapp/tasks.py
    from leaseq.contrib.django import app

    @app.task(queue="emails")
    def send_welcome(user_id: int) -> None: ...

    # a view
    with transaction.atomic():
        user = User.objects.create(...)
        send_welcome.enqueue(user_id=user.pk)   # commits or rolls back with the user

``manage.py migrate`` creates leaseq's tables; ``manage.py leaseq_worker`` runs the tasks
of every installed app's ``tasks.py`` and takes ``leaseq worker``'s options.

``app`` is looked up lazily (PEP 562): importing this package needs no configured Django,
and the first ``app`` sets Django up when nothing has yet (a worker process, a script).
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from leaseq.contrib.django.conf import get_app, setup

        project_app = get_app()
        setup()
        return project_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
