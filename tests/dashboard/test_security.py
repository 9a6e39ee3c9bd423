"""The dashboard's guards: token, login cookie, CSRF, same-origin, read-only, escaping
of every job field, and the database password never shown."""

from __future__ import annotations

import html
import socket
import subprocess
import sys

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import leaseq
from leaseq.dashboard import create_app, redact_url
from tests.dashboard.conftest import HOSTILE, Serve, csrf_of, make_dead
from tests.helpers import wait_for

TOKEN = "t0ken-for-tests-ABC"


def test_token_guards_every_route(q: leaseq.Queue, serve: Serve) -> None:
    job = q.enqueue("guarded", {}).id
    base = serve(token=TOKEN)
    with httpx.Client(base_url=base) as anon:
        for path in ("/api/queues", f"/api/jobs/{job}", "/api/jobs", "/metrics", "/api/csrf"):
            refused = anon.get(path)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["type"] == "Unauthorized"
        for path in ("/", "/dead", f"/jobs/{job}", "/queues/guarded"):
            page = anon.get(path)
            assert page.status_code == 401, path
            assert 'name="token"' in page.text  # the login form
        assert anon.post(f"/api/jobs/{job}/discard").status_code == 401
        assert anon.get("/api/queues", headers={"authorization": "Bearer wrong"}
                        ).status_code == 401
        assert anon.get("/static/dashboard.css").status_code == 200  # no secrets there
    with httpx.Client(base_url=base, headers={"authorization": f"Bearer {TOKEN}"}) as bearer:
        assert bearer.get("/api/queues").status_code == 200
        assert bearer.get("/metrics").status_code == 200
        # The bearer token is proof enough for a POST: no browser sends it by itself.
        assert bearer.post(f"/api/jobs/{job}/discard").status_code == 200
    assert q.get(job).state == "discarded"


def test_login_cookie_then_csrf(q: leaseq.Queue, serve: Serve) -> None:
    job = q.enqueue("cookie", {}).id
    base = serve(token=TOKEN)
    with httpx.Client(base_url=base) as browser:
        wrong = browser.post("/login", data={"token": "nope", "next": "/dead"})
        assert wrong.status_code == 401
        assert browser.cookies.get("leaseq_session") is None

        ok = browser.post("/login", data={"token": TOKEN, "next": "/dead"},
                          follow_redirects=False)
        assert (ok.status_code, ok.headers["location"]) == (303, "/dead")
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert TOKEN not in cookie  # the cookie holds a MAC, never the token

        assert browser.get("/api/queues").status_code == 200
        assert browser.get("/").status_code == 200
        # A cookie alone does not make a POST: a forged cross-site form would carry it.
        refused = browser.post(f"/api/jobs/{job}/cancel")
        assert refused.status_code == 403
        assert q.get(job).state == "available"
        assert browser.post(f"/api/jobs/{job}/cancel", headers=csrf_of(browser)
                            ).status_code == 200
        assert q.get(job).state == "cancelled"

        evil = browser.post("/login", data={"token": TOKEN, "next": "https://evil.example/"},
                            follow_redirects=False)
        assert evil.headers["location"] == "/"

        browser.post("/logout", follow_redirects=False)
        assert browser.get("/api/queues").status_code == 401


def test_cross_site_posts_are_refused(q: leaseq.Queue, http: httpx.Client) -> None:
    job = q.enqueue("xsite", {}).id
    headers = csrf_of(http)
    assert http.post(f"/api/jobs/{job}/discard").status_code == 403
    assert http.post(f"/api/jobs/{job}/discard", headers={"x-csrf-token": "forged"}
                     ).status_code == 403
    forged = http.post(f"/api/jobs/{job}/discard",
                       headers={**headers, "origin": "https://evil.example"})
    assert forged.status_code == 403
    assert http.get(f"/api/jobs/{job}/discard").status_code == 405  # changes are POST only
    assert q.get(job).state == "available"


def test_read_only_refuses_every_action(q: leaseq.Queue, serve: Serve) -> None:
    dead = make_dead(q, "ro")
    base = serve(read_only=True)
    with httpx.Client(base_url=base) as client:
        headers = csrf_of(client)
        for path in (f"/api/jobs/{dead}/retry", f"/api/jobs/{dead}/discard",
                     f"/api/jobs/{dead}/cancel", "/api/queues/ro/pause",
                     "/api/queues/ro/resume", "/api/queues/ro/kick"):
            refused = client.post(path, headers=headers)
            assert refused.status_code == 403, path
            assert refused.json()["error"]["type"] == "ReadOnly"
        assert client.post("/dead/retry", data={"csrf": headers["x-csrf-token"],
                                                "ids": [dead]}).status_code == 403
        for path in ("/", "/queues/ro", f"/jobs/{dead}", "/dead"):
            page = client.get(path).text
            assert 'method="post" action="/api/' not in page, path
            assert "read-only" in page
    assert q.get(dead).state == "dead"
    assert q.paused() == []


def test_every_job_field_is_escaped(q: leaseq.Queue, http: httpx.Client) -> None:
    huge = "<b>" + "x" * ((1 << 20) - 1024) + "</b>"  # just under the 1 MiB payload cap
    job = q.enqueue("hostile", {HOSTILE: HOSTILE, "big": huge}, kind="k",
                    unique_key=HOSTILE).id
    dead = make_dead(q, "hostile-dead", payload=[HOSTILE], error=HOSTILE)
    pages = [http.get(path).text for path in (
        f"/jobs/{job}", f"/jobs/{dead}", "/queues/hostile", "/queues/hostile-dead", "/dead",
        "/queues/hostile?unique_key=" + HOSTILE, "/",
    )]
    for page in pages:
        assert "<script>window.__pwned" not in page
        assert "<img src=x" not in page
        assert "<b>xxx" not in page
    assert html.escape(HOSTILE, quote=True) in pages[0] or "&lt;script&gt;" in pages[0]
    assert "x" * ((1 << 20) - 1024) in pages[0]  # the whole payload is on the job's page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in pages[1]  # the error too


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_password_is_never_rendered(q: leaseq.Queue, prefix: str, serve: Serve,
                                    capfd: pytest.CaptureFixture[str]) -> None:
    # Trust auth accepts any password, so a URL with one still connects.
    url = "postgresql://postgres:Sup3r-Secret-PW@127.0.0.1:5432/test"
    job = q.enqueue("pw", {}).id
    base = serve(app=create_app(url, table_prefix=prefix))
    with httpx.Client(base_url=base) as client:
        bodies = [client.get(path).text for path in (
            "/", "/dead", "/queues/pw", f"/jobs/{job}", "/jobs/424242", "/api/queues",
            "/queues/bad name", "/metrics",
        )]
    assert all("Sup3r-Secret-PW" not in body for body in bodies)
    assert "postgresql://***@127.0.0.1:5432/test" in bodies[0]
    out, err = capfd.readouterr()
    assert "Sup3r-Secret-PW" not in out + err


def test_redact_url() -> None:
    assert redact_url("postgresql://u:p@h:5/db") == "postgresql://***@h:5/db"
    assert redact_url("redis://:pw@[::1]:6379/0") == "redis://***@[::1]:6379/0"
    assert redact_url("mysql://root@127.0.0.1/test") == "mysql://***@127.0.0.1/test"
    assert redact_url("mysql://127.0.0.1/test") == "mysql://127.0.0.1/test"
    assert redact_url("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"
    assert redact_url("sqlite:///tmp/a@b/x.db") == "sqlite:///tmp/a@b/x.db"
    assert (redact_url("redis+sentinel://:pw@h1:26379,h2:26379/leaseq/2?sentinel_password=s&x=1")
            == "redis+sentinel://***@h1:26379,h2:26379/leaseq/2?sentinel_password=***&x=1")
    assert redact_url("redis+cluster://u:pw@h1:7001,h2:7002") == "redis+cluster://***@h1:7001,h2:7002"


def test_mounted_under_a_path(q: leaseq.Queue, url: str, prefix: str, serve: Serve) -> None:
    job = q.enqueue("mounted", {}).id
    inner = create_app(url, table_prefix=prefix)
    # As docs/dashboard.md says: hand the dashboard's lifespan to the outer app, so its
    # database client closes when the app stops.
    outer = Starlette(routes=[Mount("/ops/leaseq", app=inner)],
                      lifespan=inner.router.lifespan_context)
    base = serve(app=outer)
    with httpx.Client(base_url=base) as client:
        page = client.get("/ops/leaseq/")
        assert page.status_code == 200
        assert 'href="/ops/leaseq/static/dashboard.css"' in page.text
        assert 'href="/ops/leaseq/queues/mounted"' in page.text
        assert client.get("/ops/leaseq/static/dashboard.js").status_code == 200
        assert client.get(f"/ops/leaseq/api/jobs/{job}").json()["job"]["id"] == job
        response = client.post(f"/ops/leaseq/api/jobs/{job}/discard",
                               data={"csrf": client.get("/ops/leaseq/api/csrf").json()["csrf"],
                                     "next": "/ops/leaseq/queues/mounted"},
                               follow_redirects=False)
        assert response.headers["location"] == "/ops/leaseq/queues/mounted"
    assert q.get(job).state == "discarded"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cli_refuses_a_public_bind_without_token(url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "leaseq.cli", "dashboard", "--url", url, "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "token is needed" in result.stderr


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_cli_serves_under_a_base_path_with_a_token(q: leaseq.Queue, prefix: str) -> None:
    with socket.socket() as probe:  # a free port for the child to bind
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = "postgresql://postgres:Cli-Secret-PW@127.0.0.1:5432/test"
    job = q.enqueue("cli", {}).id
    child = subprocess.Popen(
        [sys.executable, "-m", "leaseq.cli", "dashboard", "--url", url, "--table-prefix",
         prefix, "--port", str(port), "--base-path", "/ops/leaseq/", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "LEASEQ_DASHBOARD_TOKEN": TOKEN},
    )
    try:
        base = f"http://127.0.0.1:{port}/ops/leaseq"
        auth = {"authorization": f"Bearer {TOKEN}"}

        def answers() -> httpx.Response | None:
            try:
                return httpx.get(f"{base}/api/jobs/{job}", headers=auth)
            except httpx.TransportError:
                return None

        assert wait_for(answers, timeout=30, message="the dashboard to answer").json()[
            "job"]["id"] == job
        assert httpx.get(f"{base}/api/jobs/{job}").status_code == 401
        page = httpx.get(f"{base}/", headers=auth).text
        assert 'href="/ops/leaseq/static/dashboard.css"' in page
    finally:
        child.terminate()
        out, err = child.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}/ops/leaseq/" in out
    assert "postgresql://***@127.0.0.1" in out
    assert "Cli-Secret-PW" not in out + err
