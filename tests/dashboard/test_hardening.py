"""Issue 29's web surface, hardened: the Host check against DNS rebinding, secrets never
shown, poison values that still render, throttled logins, sessions that expire and end,
per-session CSRF tokens, bounded login bodies and a metrics-only token."""

from __future__ import annotations

import json
import logging
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

import leaseq
from leaseq._core.redact import redact_url, scrub, secrets_of, where
from leaseq.dashboard import create_app
from leaseq.dashboard.security import Auth, host_name
from tests.dashboard.conftest import Serve
from tests.helpers import plant, wait_for

TOKEN = "a-token-long-enough-for-tests"
FOREIGN = "rebind.attacker.example"


# -- 1. Host checks ------------------------------------------------------------------------


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_open_dashboard_refuses_a_foreign_host(q: leaseq.Queue, serve: Serve) -> None:
    q.enqueue("rebind", {"secret": "payload"})
    base = serve()
    port = port_of(base)
    with httpx.Client(base_url=base) as client:
        # What a browser sends once an attacker's name resolves to 127.0.0.1.
        foreign = {"host": f"{FOREIGN}:{port}", "origin": f"http://{FOREIGN}:{port}"}
        for path in ("/api/csrf", "/api/jobs", "/", "/static/dashboard.js", "/nowhere"):
            refused = client.get(path, headers=foreign)
            assert refused.status_code == 400, path
            assert refused.json()["error"]["type"] == "BadHost"
            assert "payload" not in refused.text
        assert client.post("/api/queues/rebind/pause", headers=foreign).status_code == 400
        assert q.stats()["rebind"].paused is False
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}",
                     "127.0.0.1", f"[::1]:{port}"):
            assert client.get("/api/queues", headers={"host": host}).status_code == 200, host
        for host in ("", "127.0.0.1:x", "evil@127.0.0.1", "127.0.0.1.evil.example"):
            assert client.get("/api/queues", headers={"host": host}).status_code == 400, host


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_allowed_hosts_and_tokens_decide_the_host_check(url: str, prefix: str, q: leaseq.Queue,
                                                        serve: Serve) -> None:
    named = serve(app=create_app(url, table_prefix=prefix,
                                 allowed_hosts=["dash.example.com", "*.corp.example"]))
    with httpx.Client(base_url=named) as client:
        for host in ("dash.example.com", "DASH.example.com:443", "a.corp.example",
                     "127.0.0.1"):
            assert client.get("/api/queues", headers={"host": host}).status_code == 200, host
        for host in ("corp.example", "other.example.com", FOREIGN):
            assert client.get("/api/queues", headers={"host": host}).status_code == 400, host
    # A token set and no list: the app cannot know where it is mounted, and the token
    # already keeps a rebinding page out.
    tokened = serve(token=TOKEN)
    with httpx.Client(base_url=tokened, headers={"host": FOREIGN}) as client:
        assert client.get("/api/queues").status_code == 401
        assert client.get("/api/queues", headers={
            "authorization": f"Bearer {TOKEN}"}).status_code == 200
    with pytest.raises(leaseq.InvalidArgument):
        create_app(url, allowed_hosts="dash.example.com")  # type: ignore[arg-type]
    with pytest.raises(leaseq.InvalidArgument):
        create_app(url, allowed_hosts=["dash.example.com:8787"])


def test_host_names_are_read_without_ports() -> None:
    assert host_name("Example.COM:8787") == "example.com"
    assert host_name("[::1]:8787") == "::1"
    assert host_name("[::1]") == "::1"
    for bad in ("", "[::1", "[::1]x", "a:b", "a/b", "u@h", ":80"):
        assert host_name(bad) is None, bad


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def cli_dashboard(*args: str, env: dict[str, str] | None = None
                  ) -> Iterator[tuple[list[str], str, list[str]]]:
    """``leaseq dashboard ARGS`` on a free port; yields a list that holds the rest of its
    output once it stopped, its base URL and the lines it printed so far (the banner,
    read until the server answers)."""
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "leaseq.cli", "dashboard", "--port", str(port),
         "--log-level", "warning", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        def answers() -> bool:
            try:
                httpx.get(base + "/login", timeout=2)
                return True
            except httpx.TransportError:
                assert child.poll() is None, child.communicate()
                return False

        wait_for(answers, timeout=30, message="the dashboard to answer")
        lines: list[str] = []
        assert child.stdout is not None
        # The banner, and the login link when the CLI made the token.
        for _ in range(1 if "--token" in args else 2):
            lines.append(child.stdout.readline())
        rest: list[str] = []
        yield rest, base, lines
    finally:
        child.terminate()
        rest.extend(child.communicate(timeout=30))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_cli_makes_a_token_for_the_run_and_prints_a_login_link(
        q: leaseq.Queue, url: str, prefix: str) -> None:
    job = q.enqueue("cli", {}).id
    with cli_dashboard("--url", url, "--table-prefix", prefix) as (_, base, lines):
        (link,) = [line for line in lines if "/login?token=" in line]
        token = re.search(r"token=([A-Za-z0-9_\-]+)", link)[1]  # type: ignore[index]
        assert len(token) >= 16
        with httpx.Client(base_url=base) as browser:
            assert browser.get(f"/api/jobs/{job}").status_code == 401
            assert browser.get("/api/jobs", headers={"host": FOREIGN}).status_code == 400
            entered = browser.get(f"/login?token={token}", follow_redirects=False)
            assert entered.status_code == 303
            assert "token" not in entered.headers["location"]  # out of the address bar
            assert browser.get(f"/api/jobs/{job}").status_code == 200
        assert httpx.get(f"{base}/api/jobs/{job}", headers={
            "authorization": f"Bearer {token}"}).status_code == 200


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("args", "says"), [
    (["--host", "0.0.0.0", "--token", TOKEN], "--allowed-host"),
    (["--host", "0.0.0.0", "--token", "short", "--allowed-host", "x.example"],
     "at least 16 characters"),
    (["--host", "0.0.0.0", "--token", TOKEN, "--allowed-host", "x.example",
      "--metrics-token", "short"], "--metrics-token must be at least 16"),
    (["--host", "0.0.0.0", "--token", TOKEN, "--allowed-host", "x.example",
      "--public-metrics"], "loopback only"),
])
def test_the_cli_refuses_unsafe_binds(url: str, args: list[str], says: str) -> None:
    result = subprocess.run([sys.executable, "-m", "leaseq.cli", "dashboard", "--url", url,
                             *args], capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert says in result.stderr


# -- 2. Secrets never shown ---------------------------------------------------------------

PASSWORDS = ["pa#secretpw", "pa/secretpw", "pa?secretpw", "pa@secretpw", "pa%secretpw",
             "pä§secretpw", "pa:secretpw", "pa%23secretpw"]
SCHEMES = ["postgresql://user:{pw}@127.0.0.1:5432/db",
           "postgresql://user:{pw}@h1:5432,h2:5433/db?target_session_attrs=read-write",
           "mysql://root:{pw}@127.0.0.1:3306/test?charset=utf8mb4",
           "redis://:{pw}@127.0.0.1:6379/0", "rediss://user:{pw}@[::1]:6380/1",
           "redis+sentinel://:{pw}@h1:26379,h2:26379/leaseq/0?sentinel_password={pw}",
           "redis+cluster://u:{pw}@h1:7001,h2:7002"]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("password", PASSWORDS)
def test_no_password_survives_redaction(scheme: str, password: str) -> None:
    url = scheme.format(pw=password)
    for shown in (redact_url(url), where(url)):
        assert "secretpw" not in shown, shown
        assert "***" in shown or shown == where(url)
    assert password not in scrub(f"driver said: {url} and {password}", url)
    if any(ch in password for ch in "#/?@:"):  # a driver may quote a misread piece
        assert "secretpw" not in scrub(f"driver said: {url} and secretpw", url)


def test_secret_query_options_are_masked() -> None:
    url = ("postgresql://app@db/x?sslpassword=p1&application_name=me&api_token=t2&sslkey=k"
           "&listen_url=postgresql%3A%2F%2Fapp%3Alistenpw%40db%2Fx")
    shown = redact_url(url)
    for secret in ("p1", "t2", "listenpw"):
        assert secret not in shown
    assert "application_name=me" in shown
    assert redact_url("host=db password=secretpw dbname=x") == "host=db password=*** dbname=x"
    assert "postgresql://app:listenpw@db/x" in secrets_of(url)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_password_with_a_hash_appears_nowhere(q: leaseq.Queue, prefix: str) -> None:
    # Trust auth accepts any password: this URL connects, as the probe's did.
    url = "postgresql://postgres:pa#secretpw@127.0.0.1:5432/test"
    q.enqueue("pw", {})
    with cli_dashboard("--url", url, "--table-prefix", prefix) as (rest, base, lines):
        with httpx.Client(base_url=base) as anon:
            login = anon.get("/login")
            bodies = [login.text, anon.get("/").text, anon.get("/api/queues").text]
        link = next(line for line in lines if "/login?token=" in line)
        token = link.rsplit("token=", 1)[1].strip()
        with httpx.Client(base_url=base, headers={"authorization": f"Bearer {token}"}) as c:
            page = c.get("/")
            bodies += [page.text, c.get("/metrics").text, c.get("/queues/pw").text]
        assert page.status_code == 200
    text = "".join(lines) + "".join(rest) + "".join(bodies)
    assert "secretpw" not in text
    assert "postgresql://***@127.0.0.1:5432/test" in "".join(lines)
    # Before login: no database detail and no CSRF token at all.
    for detail in ("127.0.0.1:5432", "/test", "postgres", 'data-csrf="', "csrf"):
        if detail == 'data-csrf="':
            assert 'data-csrf=""' in login.text
        elif detail != "csrf":
            assert detail not in login.text, detail


# -- 3. Poison values render --------------------------------------------------------------


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_deeply_nested_stored_payload_renders_without_a_500(
        q: leaseq.Queue, url: str, prefix: str, serve: Serve,
        caplog: pytest.LogCaptureFixture) -> None:
    job = q.enqueue("poison", {"ok": 1}).id
    # Stored by SQL (or an older version): past what the dashboard's old walk survived,
    # within what json.loads reads.
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        db.execute(f"UPDATE {prefix}jobs SET payload = ? WHERE id = ?",
                   (json.dumps(deep(900)), job))
    base = serve()
    with httpx.Client(base_url=base) as client, caplog.at_level(logging.ERROR):
        for path in (f"/jobs/{job}", f"/api/jobs/{job}", "/api/jobs?queue=poison",
                     "/api/jobs", "/queues/poison"):
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text[:200])
        assert "bottom" in client.get(f"/jobs/{job}").text  # shown compact, not lost
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "redis"], indirect=True)
def test_an_undecodable_stored_value_renders_as_such(
        q: leaseq.Queue, backend: str, url: str, prefix: str, serve: Serve) -> None:
    job = q.enqueue("undecodable", {"ok": 1}).id
    plant(backend, url, prefix, job, "payload", "{not json <b>", queue="undecodable")
    with httpx.Client(base_url=serve()) as client:
        page = client.get(f"/jobs/{job}")
        assert page.status_code == 200, page.text[:300]
        assert "cannot be decoded" in page.text and "{not json &lt;b&gt;" in page.text
        assert client.get("/queues/undecodable").status_code == 200
        api = client.get(f"/api/jobs/{job}")
        assert api.status_code == 200
        assert api.json()["job"]["payload"]["preview"] == "{not json <b>"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_unexpected_error_is_one_log_line_and_a_500_without_a_traceback(
        q: leaseq.Queue, url: str, prefix: str, serve: Serve,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(url, table_prefix=prefix)
    source = app.state.leaseq

    async def broken() -> None:
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(source, "stats", broken)
    base = serve(app=app)
    with httpx.Client(base_url=base) as client, caplog.at_level(logging.ERROR):
        api = client.get("/api/queues")
        page = client.get("/", headers={"accept": "text/html"})
    assert api.status_code == 500 and api.json()["error"]["type"] == "InternalError"
    assert page.status_code == 500 and "<h1>InternalError</h1>" in page.text
    for body in (api.text, page.text):
        assert "Traceback" not in body and "a bug" not in body
    errors = [r for r in caplog.records if r.name == "leaseq.dashboard"]
    assert len(errors) == 2
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in errors)
    assert "RuntimeError: a bug with a second line" in errors[0].getMessage()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_unknown_routes_and_methods_answer_json(serve: Serve) -> None:
    with httpx.Client(base_url=serve()) as client:
        missing = client.get("/api/nothing")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFound"
        wrong = client.delete("/api/queues")
        assert wrong.status_code == 405
        assert wrong.json()["error"]["type"] == "MethodNotAllowed"


# -- 4. Logins and sessions ---------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_wrong_logins_and_bearers_are_throttled(serve: Serve,
                                                caplog: pytest.LogCaptureFixture) -> None:
    base = serve(token=TOKEN)
    with httpx.Client(base_url=base) as client, caplog.at_level(logging.WARNING):
        answers = [client.post("/login", data={"token": f"guess-{n}"}).status_code
                   for n in range(7)]
        assert answers == [401] * 5 + [429] * 2
        refused = client.post("/login", data={"token": TOKEN})
        assert refused.status_code == 429  # the right token too, until the window ends
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        bearer = client.get("/api/queues", headers={"authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 429
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and "wrong token" in r.getMessage()]
    assert len(warnings) == 5


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_wrong_bearers_count_as_failures(serve: Serve) -> None:
    base = serve(token=TOKEN)
    with httpx.Client(base_url=base) as client:
        answers = [client.get("/api/queues", headers={"authorization": "Bearer nope"}
                              ).status_code for _ in range(6)]
        assert answers == [401] * 5 + [429]
        # A page without any credential is not a failure, and still shows the login form.
        assert client.get("/").status_code == 401


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sessions_expire_end_at_logout_and_carry_their_own_csrf(
        q: leaseq.Queue, serve: Serve) -> None:
    job = q.enqueue("session", {}).id
    base = serve(token=TOKEN, session_max_age=3600)
    with httpx.Client(base_url=base) as first, httpx.Client(base_url=base) as second:
        for browser in (first, second):
            login = browser.post("/login", data={"token": TOKEN}, follow_redirects=False)
            cookie = login.headers["set-cookie"]
            assert "Max-Age=3600" in cookie and "HttpOnly" in cookie
            assert "SameSite=strict" in cookie and "Secure" not in cookie
            assert TOKEN not in cookie
        assert first.cookies["leaseq_session"] != second.cookies["leaseq_session"]
        csrf_first = first.get("/api/csrf").json()["csrf"]
        csrf_second = second.get("/api/csrf").json()["csrf"]
        assert csrf_first != csrf_second
        # One session's CSRF token does not act for another.
        assert second.post(f"/api/jobs/{job}/cancel", headers={"x-csrf-token": csrf_first}
                           ).status_code == 403
        assert first.get("/").status_code == 200
        stolen = first.cookies["leaseq_session"]
        assert first.post("/logout", follow_redirects=False).status_code == 303
        # Logout ends the session itself, not just the browser's copy of the cookie.
        replay = httpx.get(f"{base}/api/queues", cookies={"leaseq_session": stolen})
        assert replay.status_code == 401
        assert second.get("/api/queues").status_code == 200


def test_a_session_past_its_expiry_is_refused() -> None:
    auth = Auth(TOKEN, session_max_age=60)
    session, cookie = auth.new_session()
    sid, expires, _ = cookie.split(".")
    past = str(int(time.time()) - 1)
    forged = f"{sid}.{past}.{auth._mac('session', sid, past)}"
    tampered = f"{sid}.{int(expires) + 3600}.{cookie.rsplit('.', 1)[1]}"

    class Fake:
        def __init__(self, value: str) -> None:
            self.cookies = {"leaseq_session": value}

    assert auth.session(Fake(cookie)) == session  # type: ignore[arg-type]
    assert auth.session(Fake(forged)) is None  # type: ignore[arg-type]
    assert auth.session(Fake(tampered)) is None  # type: ignore[arg-type]
    # A new token (a restart with another --token) ends every session.
    assert Auth("another-token-long-enough").session(Fake(cookie)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_secure_cookies_when_told_the_app_sits_behind_tls(serve: Serve) -> None:
    base = serve(token=TOKEN, secure_cookies=True)
    login = httpx.post(f"{base}/login", data={"token": TOKEN}, follow_redirects=False)
    assert "Secure" in login.headers["set-cookie"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_login_body_is_small_and_urlencoded(serve: Serve) -> None:
    base = serve(token=TOKEN)
    with httpx.Client(base_url=base) as client:
        big = client.post("/login", data={"token": "x" * 5000})
        assert big.status_code == 413
        multipart = client.post("/login", files={"token": ("t", b"x" * 10)})
        assert multipart.status_code == 400
        assert client.post("/login", data={"token": TOKEN}, follow_redirects=False
                           ).status_code == 303
    assert httpx.head(f"{base}/login").status_code == 200  # a GET, not a failed login


# -- 5. Metrics without the keys to the house ---------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_metrics_token_reads_metrics_and_nothing_else(serve: Serve) -> None:
    metrics_token = "only-for-prometheus-scrapes"
    base = serve(token=TOKEN, metrics_token=metrics_token)
    scrape = {"authorization": f"Bearer {metrics_token}"}
    with httpx.Client(base_url=base) as client:
        assert client.get("/metrics", headers=scrape).status_code == 200
        assert "leaseq_" in client.get("/metrics", headers=scrape).text
        assert client.get("/api/queues", headers=scrape).status_code == 403
        assert client.post("/api/queues/q/pause", headers=scrape).status_code == 403
        assert client.get("/metrics").status_code == 401
    public = serve(token=TOKEN, public_metrics=True)
    with httpx.Client(base_url=public) as client:
        assert client.get("/metrics").status_code == 200
        assert client.get("/api/queues").status_code == 401


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_behind_a_trusted_proxy_the_throttle_and_cookies_follow_its_headers(
        url: str, prefix: str) -> None:
    with cli_dashboard("--url", url, "--table-prefix", prefix, "--token", TOKEN,
                       "--forwarded-allow-ips", "127.0.0.1") as (_, base, _lines):
        attacker = {"x-forwarded-for": "203.0.113.7"}
        answers = [httpx.post(f"{base}/login", data={"token": "guess"}, headers=attacker
                              ).status_code for _ in range(6)]
        assert answers == [401] * 5 + [429]
        # Another client behind the same proxy is not locked out with the attacker.
        user = {"x-forwarded-for": "203.0.113.8", "x-forwarded-proto": "https"}
        login = httpx.post(f"{base}/login", data={"token": TOKEN}, headers=user,
                           follow_redirects=False)
        assert login.status_code == 303
        assert "Secure" in login.headers["set-cookie"]
    with cli_dashboard("--url", url, "--table-prefix", prefix, "--token", TOKEN
                       ) as (_, base, _lines):
        # Untrusted: the headers are ignored, so every client is the socket's peer.
        login = httpx.post(f"{base}/login", data={"token": TOKEN}, follow_redirects=False,
                           headers={"x-forwarded-proto": "https"})
        assert "Secure" not in login.headers["set-cookie"]
        for n in range(5):
            httpx.post(f"{base}/login", data={"token": "guess"},
                       headers={"x-forwarded-for": f"203.0.113.{n}"})
        assert httpx.post(f"{base}/login", data={"token": TOKEN}, headers={
            "x-forwarded-for": "203.0.113.99"}).status_code == 429
