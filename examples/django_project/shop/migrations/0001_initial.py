"""The Order table."""

from typing import Any, ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False,
                                        verbose_name="ID")),
                ("email", models.EmailField(max_length=254)),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        ),
    ]
