"""Settings of the example project: one app (shop) whose orders enqueue a receipt.

The database comes from the environment so the same project runs on SQLite (the default,
db.sqlite3 beside manage.py), PostgreSQL or MySQL/MariaDB (EXAMPLE_DB=mysql, on PyMySQL):

    EXAMPLE_DB=postgresql EXAMPLE_DB_NAME=shop EXAMPLE_DB_HOST=127.0.0.1 \\
        EXAMPLE_DB_USER=postgres ./manage.py migrate
"""

import os
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("EXAMPLE_SECRET_KEY", "example-only-not-secret")
DEBUG = True
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = [
    "leaseq.contrib.django",  # manage.py migrate creates leaseq's tables; leaseq_worker
    "shop",
]

DB = os.environ.get("EXAMPLE_DB", "sqlite")
if DB in ("postgresql", "mysql"):
    if DB == "mysql":
        # PyMySQL stands in for mysqlclient: leaseq joins Django's transactions through it.
        import pymysql

        pymysql.install_as_MySQLdb()
    DATABASES = {
        "default": {
            "ENGINE": f"django.db.backends.{DB}",
            "NAME": os.environ.get("EXAMPLE_DB_NAME", "shop"),
            "USER": os.environ.get("EXAMPLE_DB_USER", "postgres" if DB == "postgresql" else "root"),
            "PASSWORD": os.environ.get("EXAMPLE_DB_PASSWORD", ""),
            "HOST": os.environ.get("EXAMPLE_DB_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EXAMPLE_DB_PORT", ""),
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("EXAMPLE_DB_NAME", str(BASE_DIR / "db.sqlite3")),
            # Django 5.1+: atomic blocks take SQLite's write lock when they begin, so an
            # enqueue inside one never upgrades a read transaction (which SQLite refuses
            # at once, without waiting, when a worker committed in between).
            "OPTIONS": {"transaction_mode": "IMMEDIATE"} if django.VERSION >= (5, 1) else {},
        }
    }

# leaseq's tables live in the default database, and enqueues inside its
# transaction.atomic() join Django's transaction.
LEASEQ = {
    "DATABASE": "default",
    "SETTINGS": {"table_prefix": os.environ.get("EXAMPLE_LEASEQ_PREFIX", "leaseq_")},
}
