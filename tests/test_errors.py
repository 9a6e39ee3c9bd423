"""A dead, misaddressed or unmigrated database gets its own clear leaseq error."""

from __future__ import annotations

from pathlib import Path

import pytest

import leaseq
from tests.conftest import require
from tests.helpers import MYSQL_URL, POSTGRES_URL, new_prefix


def test_unknown_scheme_is_a_configuration_error() -> None:
    with pytest.raises(leaseq.ConfigurationError, match="unsupported URL scheme"):
        leaseq.connect("oracle://x/y")
    with pytest.raises(leaseq.ConfigurationError, match="not a leaseq URL"):
        leaseq.connect("jobs.db")


def test_sqlite_in_memory_url_points_to_memory_backend() -> None:
    with pytest.raises(leaseq.ConfigurationError, match="memory://"):
        leaseq.connect("sqlite:///:memory:")


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(leaseq.ConfigurationError, match="lease must be"):
        leaseq.connect("memory://", lease=-5)
    with pytest.raises(leaseq.ConfigurationError, match="table_prefix"):
        leaseq.connect("memory://", table_prefix="x; DROP TABLE y")


def test_unwritable_sqlite_path_is_unavailable(tmp_path: Path) -> None:
    q = leaseq.connect(f"sqlite:///{tmp_path}/missing/dir/jobs.db")
    with pytest.raises(leaseq.BackendUnavailable):
        q.migrate()


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_unmigrated_database_says_run_migrate(backend: str, tmp_path: Path) -> None:
    require(backend)
    url = {"sqlite": f"sqlite:///{tmp_path}/j.db", "postgres": POSTGRES_URL,
           "mysql": MYSQL_URL}[backend]
    with leaseq.connect(url, table_prefix=new_prefix()) as q:
        with pytest.raises(leaseq.SchemaMissing, match="leaseq migrate"):
            q.enqueue("emails", {})
        with pytest.raises(leaseq.SchemaMissing):
            q.dequeue("emails")


@pytest.mark.parametrize(
    "url",
    ["postgresql://postgres@127.0.0.1:1/test", "mysql://root@127.0.0.1:1/test"],
)
def test_unreachable_server_is_backend_unavailable(url: str) -> None:
    with pytest.raises(leaseq.BackendUnavailable) as info:
        leaseq.connect(url, connect_timeout=2)
    assert not isinstance(info.value, leaseq.AuthenticationFailed)


def test_postgres_messages_name_every_host_and_no_secret() -> None:
    url = ("postgresql://postgres:s3cret-pw@127.0.0.1:1,127.0.0.1:2/test"
           "?target_session_attrs=read-write&sslpassword=s3cret-key")
    with pytest.raises(leaseq.BackendUnavailable) as info:
        leaseq.connect(url, connect_timeout=2)
    text = str(info.value)
    assert "PostgreSQL at 127.0.0.1:1,127.0.0.1:2/test " in text, text
    assert "s3cret" not in text, text


def test_wrong_mysql_password_is_authentication_failed() -> None:
    require("mysql")
    with pytest.raises(leaseq.AuthenticationFailed, match="credentials"):
        leaseq.connect("mysql://root:wrong-password@127.0.0.1:3306/test")


def test_unknown_postgres_role_is_authentication_failed() -> None:
    require("postgres")
    with pytest.raises(leaseq.AuthenticationFailed):
        leaseq.connect("postgresql://no_such_role_leaseq@127.0.0.1:5432/test")


@pytest.mark.parametrize(
    ("backend", "url"),
    [("postgres", "postgresql://postgres@127.0.0.1:5432/no_such_db_leaseq"),
     ("mysql", "mysql://root@127.0.0.1:3306/no_such_db_leaseq")],
)
def test_unknown_database_is_a_configuration_error(backend: str, url: str) -> None:
    require(backend)
    with pytest.raises(leaseq.ConfigurationError):
        leaseq.connect(url)


def test_missing_driver_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if leaseq[postgres] were absent
    monkeypatch.delitem(sys.modules, "leaseq.backends.postgres.driver", raising=False)
    with pytest.raises(leaseq.ConfigurationError, match=r"leaseq\[postgres\]"):
        leaseq.connect(POSTGRES_URL)


def test_outcome_unknown_is_backend_unavailable_and_names_its_operation() -> None:
    import pickle

    error = leaseq.OutcomeUnknown("reply lost", operation="nack")
    assert isinstance(error, leaseq.BackendUnavailable)
    assert isinstance(error, leaseq.BackendError)
    copy = pickle.loads(pickle.dumps(error))  # crosses process pools as it is
    assert (type(copy), str(copy), copy.operation) == (leaseq.OutcomeUnknown, "reply lost",
                                                        "nack")


def test_one_retry_policy_for_every_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """backends/_retry.py decides for the SQL and Redis runners, sync and async alike."""
    from leaseq.backends import _retry

    conflicts = _retry.Tries()
    pauses = [conflicts.after(conflict=True) for _ in range(_retry.RETRIES)]
    assert all(p is not None and not p.reconnect for p in pauses[:-1])
    assert pauses[-1] is None  # RETRIES tries in all
    # A dropped connection: repeated only when safe, or when nothing was applied.
    assert _retry.Tries().after(dropped=True) is None
    assert _retry.Tries().after(dropped=True, idempotent=True) == _retry.Pause(0.05, True)
    assert _retry.Tries().after(unapplied=True) == _retry.Pause(0.05, True)
    dropped = _retry.Tries()
    seen = [dropped.after(dropped=True, idempotent=True) for _ in range(_retry.RECONNECTS + 1)]
    assert [p.seconds for p in seen if p] == [0.05 * 2**n for n in range(_retry.RECONNECTS)]
    assert seen[-1] is None
    late = _retry.Tries(began=0.0)  # a call older than the window: no new try
    assert late.after(dropped=True, idempotent=True) is None
    from leaseq.backends._sql import runner
    from leaseq.backends.redis import driver

    # No runner keeps a copy of the numbers: one place decides.
    for module in (runner, driver):
        assert not hasattr(module, "RECONNECT_WINDOW") and not hasattr(module, "RETRIES")
