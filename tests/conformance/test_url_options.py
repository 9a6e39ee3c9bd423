"""Query parameters in a backend's URL: the documented ones connect, any other is refused
with ``ConfigurationError`` naming it and the accepted ones, before anything connects."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import pytest

import leaseq
from tests.helpers import POSTGRES_URL, drop_tables, new_prefix

# Every option leaseq documents for the backend, and the driver options users pass.
DOCUMENTED = {
    "memory": "",
    "sqlite": "",
    "postgres": ("sslmode=prefer&application_name=leaseq-test&connect_timeout=5"
                 "&keepalives=1&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
                 "&tcp_user_timeout=10000&target_session_attrs=any"
                 "&options=-c%20statement_timeout%3D60s"),
    "postgres_pgbouncer": "application_name=leaseq-test&keepalives_idle=5&connect_timeout=5",
    "mysql": ("read_timeout=30&write_timeout=30&charset=utf8mb4&idle_transaction_timeout=10"
              "&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
              "&tcp_user_timeout=10000"),
    "redis": ("client_name=leaseq-test&socket_timeout=15&health_check_interval=30"
              "&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
              "&tcp_user_timeout=10000&wait_replicas=0"),
    "redis_cluster": "client_name=leaseq-test&socket_timeout=15&keepalives_idle=5",
}


def with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}" if query else url


def test_an_unknown_query_parameter_is_refused_naming_it(backend: str, url: str) -> None:
    bad = with_query(url, "bogus_option=1")
    for connect in (leaseq.connect, leaseq.connect_async):
        with pytest.raises(leaseq.ConfigurationError, match="'bogus_option'") as caught:
            connect(bad, table_prefix=new_prefix())
        text = str(caught.value)
        assert "accepted:" in text
        for name in DOCUMENTED[backend].replace("=", "&").split("&")[::2]:
            if name:
                assert name in text, (name, text)


def test_two_unknown_parameters_are_both_named(backend: str, url: str) -> None:
    with pytest.raises(leaseq.ConfigurationError, match="'first_x', 'second_y'"):
        leaseq.connect(with_query(url, "first_x=1&second_y=2"), table_prefix=new_prefix())


def test_the_documented_parameters_connect(backend: str, url: str) -> None:
    prefix = new_prefix()
    good = with_query(url, DOCUMENTED[backend])
    with leaseq.connect(good, table_prefix=prefix, reclaim_interval=None) as q:
        q.migrate()
        job_id = q.enqueue("q", {"n": 1}).id
        assert q.get(job_id).state == "available"

    async def run() -> None:
        async with leaseq.connect_async(good, table_prefix=prefix) as aq:
            assert (await aq.get(job_id)).state == "available"

    try:
        asyncio.run(run())
    finally:
        drop_tables(backend, prefix)


def test_an_unknown_parameter_in_listen_url_is_refused(backend: str, url: str) -> None:
    if backend not in ("postgres", "postgres_pgbouncer"):
        pytest.skip("listen_url is a PostgreSQL option")
    listen = quote(with_query(POSTGRES_URL, "bogus_option=1"), safe="")
    with pytest.raises(leaseq.ConfigurationError, match="'bogus_option'"):
        leaseq.connect(with_query(url, f"listen_url={listen}"), table_prefix=new_prefix())
