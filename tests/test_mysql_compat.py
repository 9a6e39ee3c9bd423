"""Where MySQL 8 and MariaDB differ (docs/design.md §60), the parts that can be checked on
MariaDB: a MySQL-only error answered as MySQL sends it, and behaviour that must not depend
on a setting that differs from server to server (the session time zone)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pymysql
import pytest

import leaseq
from leaseq.backends.mysql.driver import MysqlDialect
from tests.conftest import require
from tests.helpers import MYSQL_URL, held_transaction, oldest_bound


@pytest.fixture
def backend() -> str:
    require("mysql")
    return "mysql"


def connect(time_zone: str) -> pymysql.connections.Connection:
    parts = urlsplit(MYSQL_URL)
    return pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                           user=parts.username, password=parts.password or "",
                           database=parts.path.lstrip("/"),
                           init_command=f"SET time_zone = '{time_zone}'")


def test_a_connection_closed_for_idling_is_replaced_and_the_write_runs_once(
    q: leaseq.Queue, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MySQL 8.0.24+ writes error 4031 to a session it closes after wait_timeout, and the
    next statement on that pooled connection reads it. Nothing was applied, so even a
    plain enqueue (not safe to repeat after a lost reply) runs again on a new connection,
    once. MariaDB closes silently, so the error is injected here as MySQL sends it."""
    runner = q._backend.runner  # type: ignore[attr-defined]
    real = runner.execute
    seen: list[object] = []

    def idle_closed_once(conn: object, stmt: object) -> object:
        if not seen:
            seen.append(conn)
            raise pymysql.err.OperationalError(
                4031, "The client was disconnected by the server because of inactivity.")
        return real(conn, stmt)

    monkeypatch.setattr(runner, "execute", idle_closed_once)
    job = q.enqueue("idle", {"n": 1})
    assert seen and q.get(job.id).state == "available"
    assert q.stats()["idle"].available == 1


def test_oldest_transaction_age_ignores_the_session_time_zone(q: leaseq.Queue,
                                                              prefix: str) -> None:
    """InnoDB writes trx_started in the system time zone; a session whose time_zone is
    another read the gauge off by the offset (18,000 s at +05:00)."""
    sql = MysqlDialect(prefix).q["oldest_transaction_age"]
    with held_transaction("mysql", f"{prefix}jobs"):
        for zone in ("+05:00", "-07:00"):
            conn = connect(zone)
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    (age,) = cur.fetchone()
            finally:
                conn.close()
            assert 0.0 <= float(age) <= oldest_bound(), (zone, age)


def test_the_mysql_extra_can_answer_caching_sha2_full_authentication() -> None:
    """MySQL 8's default authentication, caching_sha2_password, asks a client on plain TCP
    whose password is not cached server-side (after every restart) to encrypt it with the
    server's RSA key: PyMySQL and aiomysql need ``cryptography`` for that, which the
    ``mysql`` extra now installs (PyMySQL[rsa]). MariaDB has no such plugin to test with."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from pymysql import _auth

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    assert len(_auth.sha2_rsa_encrypt(b"secret", b"s" * 20, pem)) == 256
