"""leaseq's tables, created by ``manage.py migrate`` through leaseq's own migrations."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def create_tables(apps: Any, schema_editor: Any) -> None:
    """``Queue.migrate`` on the database being migrated, when it is leaseq's."""
    from leaseq.contrib.django.conf import migrate_database

    migrate_database(schema_editor.connection)


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    """Runs leaseq's own idempotent migrations; unapplying keeps the tables and jobs."""

    # leaseq's migrate runs its own transactions on its own connection and is safe when
    # processes race; a Django transaction around it would hold a second connection to
    # the same database open for nothing (and on SQLite could make the two wait on
    # each other's lock).
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.RunPython(create_tables, migrations.RunPython.noop),
    ]
