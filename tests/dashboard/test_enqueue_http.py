"""``POST /api/queues/{name}/jobs`` over a real uvicorn server, driven by ``curl`` and by
Node's built-in ``fetch`` (examples/enqueue_over_http.mjs, the docs' example) on every
backend; its guards (the bearer token always, read-only), hostile bodies and names; and
``/api/openapi.json``, which must name every JSON route and validate."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

import leaseq
from leaseq.dashboard import create_app
from leaseq.dashboard.app import JOB_ACTIONS, QUEUE_ACTIONS
from tests.dashboard.conftest import Serve, csrf_of
from tests.helpers import require_tool

TOKEN = "s3cret-token-for-http-enqueue"
AUTH = {"authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["sqlite", "postgres", "mysql", "redis"]
needs_curl = pytest.mark.usefixtures("has_curl")
needs_node = pytest.mark.usefixtures("has_node")


@pytest.fixture
def has_curl() -> str:
    return require_tool("curl")


@pytest.fixture
def has_node() -> str:
    return require_tool("node")


def curl(url: str, *args: str, body: str | None = None) -> tuple[int, dict[str, str], Any]:
    """``curl`` as the docs show it: the status, the headers (lower-cased) and the JSON."""
    cmd = ["curl", "-sS", "-i", "-X", "POST", url, *args]
    if body is not None:
        cmd += ["-H", "content-type: application/json", "--data-binary", body]
    # Bytes, not text: universal newlines would hide the \r\n that ends the headers.
    out = subprocess.run(cmd, capture_output=True, timeout=30, check=True).stdout.decode()
    head, _, text = out.partition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return status, headers, json.loads(text) if text else None


@needs_curl
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_curl(q: leaseq.Queue, serve: Serve) -> None:
    # Before the dashboard's client reads the settings (it keeps them for a few seconds).
    q.configure_queue("full", max_jobs=1)
    base = serve(token=TOKEN)
    jobs = f"{base}/api/queues/emails/jobs"
    bearer = ["-H", f"Authorization: Bearer {TOKEN}"]
    body = json.dumps({"payload": {"order_id": 42}, "kind": "send_receipt",
                       "unique_key": "receipt-42", "headers": {"source": "curl"},
                       "max_attempts": 3, "priority": 5, "tags": ["billing", "eu"]})
    status, _, made = curl(jobs, *bearer, body=body)
    assert (status, made["created"]) == (201, True)
    job = q.get(made["id"])
    assert (job.queue, job.payload, job.kind, job.priority, job.max_attempts, job.headers,
            job.tags) == ("emails", {"order_id": 42}, "send_receipt", 5, 3,
                          {"source": "curl"}, ("billing", "eu"))
    assert set(made) == {"id", "created"}  # the reply is unchanged by tags
    assert curl(jobs, *bearer, body=body)[:3:2] == (200, {"id": made["id"], "created": False})
    status, _, error = curl(jobs, *bearer, body='{"priority": "high"}')
    assert status == 400 and error["error"]["type"] == "InvalidArgument"
    assert "priority" in error["error"]["message"]
    assert curl(jobs, body="{}")[0] == 401  # no token
    full = f"{base}/api/queues/full/jobs"
    assert curl(full, *bearer, body="{}")[0] == 201
    status, headers, error = curl(full, *bearer, body="{}")
    assert (status, error["error"]["type"], headers["retry-after"]) == (429, "QueueFull", "1")
    assert q.stats()["full"].available == 1
    # run_at and delay, by the database's clock.
    at = "2031-02-03T04:05:06+02:00"
    status, _, made = curl(f"{base}/api/queues/later/jobs", *bearer,
                           body=json.dumps({"run_at": at}))
    assert status == 201
    assert q.get(made["id"]).available_at.isoformat() == "2031-02-03T02:05:06+00:00"
    made = curl(f"{base}/api/queues/later/jobs", *bearer, body='{"delay": 60}')[2]
    info = q.get(made["id"])
    assert info.state == "scheduled" and info.available_at and info.created_at
    assert 59 < (info.available_at - info.created_at).total_seconds() < 61


@needs_node
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_node_fetch(q: leaseq.Queue, serve: Serve) -> None:
    base = serve(token=TOKEN)
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "LEASEQ_DASHBOARD_URL": base,
           "LEASEQ_DASHBOARD_TOKEN": TOKEN}
    run = subprocess.run(["node", str(ROOT / "examples" / "enqueue_over_http.mjs")],
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["first"]["created"] is True
    assert out["again"] == {"id": out["first"]["id"], "created": False}
    assert q.get(out["first"]["id"]).payload == {"order_id": 42}
    later = q.get(out["later"]["id"])
    assert (later.queue, later.state) == ("reports", "scheduled")
    assert out["refused"]["status"] == 400 and out["refused"]["type"] == "InvalidArgument"
    assert sum(s.available + s.scheduled for s in q.stats().values()) == 2


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_always_needs_the_bearer_token(q: leaseq.Queue, serve: Serve) -> None:
    # Without a token (loopback) the dashboard reads and acts, but never enqueues.
    with httpx.Client(base_url=serve()) as open_board:
        refused = open_board.post("/api/queues/emails/jobs", json={},
                                  headers=csrf_of(open_board))
        assert refused.status_code == 403
        assert "--token" in refused.json()["error"]["message"]
    base = serve(token=TOKEN)
    with httpx.Client(base_url=base) as client:
        assert client.post("/login", data={"token": TOKEN}).status_code in (200, 303)
        assert client.get("/api/queues").status_code == 200  # the cookie reads...
        csrf = csrf_of(client)
        cookie_only = client.post("/api/queues/emails/jobs", json={}, headers=csrf)
        assert cookie_only.status_code == 401  # ...but does not enqueue
        assert cookie_only.headers["www-authenticate"].startswith("Bearer")
        wrong = client.post("/api/queues/emails/jobs", json={},
                            headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        cross = client.post("/api/queues/emails/jobs", json={},
                            headers={**AUTH, "origin": "http://evil.example"})
        assert cross.status_code == 403
    with httpx.Client(base_url=serve(token=TOKEN, read_only=True), headers=AUTH) as ro:
        refused = ro.post("/api/queues/emails/jobs", json={})
        assert (refused.status_code, refused.json()["error"]["type"]) == (403, "ReadOnly")
    assert q.stats() == {}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_hostile_input(q: leaseq.Queue, serve: Serve) -> None:
    base = serve(token=TOKEN)
    cap = 2 * leaseq.Settings().max_payload_bytes + 64 * 1024
    with httpx.Client(base_url=base, headers=AUTH, timeout=30) as client:
        def post(path: str, content: bytes | str, **headers: str) -> httpx.Response:
            return client.post(path, content=content, headers=headers)

        jobs = "/api/queues/emails/jobs"
        bad = [b"{nope", b"[1, 2]", b'"text"', b"null", b'{"payload": NaN}',
               b'{"payload": Infinity}', b"\xff\xfe{}", b'{"payload": 1, "lease": 5}',
               b'{"' + b"k" * 5000 + b'": 1}', b'{"priority": true}', b'{"priority": 1.5}',
               b'{"delay": "5"}', b'{"delay": -1}', b'{"run_at": "tomorrow"}',
               b'{"run_at": "2030-01-01T00:00:00"}', b'{"unique_for": 5}',
               b'{"headers": {"a": 1}}', b'{"headers": [1]}', b'{"kind": ""}',
               b'{"max_attempts": 0}', b'{"payload": {"a": 1e999}}',
               b'{"tags": "billing"}', b'{"tags": ["a b"]}', b'{"tags": [1]}',
               b'{"tags": [""]}', b'{"tags": {"a": "b"}}',
               b'{"tags": ' + json.dumps([f"t{i}" for i in range(17)]).encode() + b"}",
               b"[" * 100_000 + b"]" * 100_000]
        for body in bad:
            answer = post(jobs, body, **{"content-type": "application/json"})
            assert answer.status_code == 400, (body[:60], answer.text)
            assert answer.json()["error"]["message"]
        # Over the cap: refused from the Content-Length alone, or as the bytes arrive.
        huge = b'{"payload": "' + b"x" * cap + b'"}'
        answer = post(jobs, huge)
        assert answer.status_code == 413 and str(cap) in answer.json()["error"]["message"]

        def chunks() -> Any:
            yield b'{"payload": "'
            for _ in range(cap // 65536 + 2):
                yield b"x" * 65536
            yield b'"}'

        answer = client.post(jobs, content=chunks())  # chunked: no Content-Length
        assert answer.status_code == 413
        # A payload just over max_payload_bytes fits the body cap: leaseq refuses it.
        big = json.dumps({"payload": "x" * leaseq.Settings().max_payload_bytes})
        answer = post(jobs, big)
        assert (answer.status_code, answer.json()["error"]["type"]) == (400, "PayloadTooLarge")
        # Nested one level past MAX_DEPTH (64): the client the route calls refuses it.
        answer = post(jobs, '{"payload": ' + "[" * 65 + "]" * 65 + "}")
        assert (answer.status_code, answer.json()["error"]["type"]) == (400, "InvalidArgument")
        assert "MAX_DEPTH=64" in answer.json()["error"]["message"]
        for name in ("bad%20name", "%00", "caf%C3%A9", "x" * 201, "a%2Fb", "%3Cscript%3E",
                     "%0A", "%E2%80%AE"):
            answer = post(f"/api/queues/{name}/jobs", b"{}")
            assert answer.status_code in (400, 404), name
            if answer.status_code == 400:
                assert answer.json()["error"]["type"] == "InvalidQueueName"
        assert q.stats() == {}  # nothing written by any of it
        # Odd but within leaseq's rules (1-200 of A-Z a-z 0-9 _ . -): an ordinary queue.
        made = post("/api/queues/%2e%2e/jobs", b"{}")
        assert made.status_code == 201 and q.get(made.json()["id"]).queue == ".."
        made = post(jobs, '{"payload": ' + "[" * 64 + "]" * 64 + "}")  # at the limit
        assert made.status_code == 201


def json_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) of the dashboard's JSON API, each action spelled out."""
    found = set()
    for route in app.routes:
        if not isinstance(route, Route) or not route.path.startswith("/api/"):
            continue
        for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
            path = route.path.replace(":str}", "}")
            if path.endswith("/{action}"):
                actions = QUEUE_ACTIONS if path.startswith("/api/queues") else JOB_ACTIONS
                found |= {(method, path.replace("{action}", a)) for a in actions}
            else:
                found.add((method, path))
    return found


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_openapi_names_every_json_route_and_validates(
    q: leaseq.Queue, url: str, prefix: str, serve: Serve
) -> None:
    from openapi_spec_validator import validate

    app = create_app(url, token=TOKEN, table_prefix=prefix)
    with httpx.Client(base_url=serve(app=app), headers=AUTH) as client:
        doc = client.get("/api/openapi.json").json()
        assert client.get("/api/openapi.json", headers={"authorization": ""}
                          ).status_code == 401
    validate(doc)
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    routes = json_routes(app)
    assert ("POST", "/api/queues/{name}/jobs") in routes
    assert routes == described
    body = doc["components"]["schemas"]["Enqueue"]["properties"]
    from leaseq.dashboard.enqueue import FIELDS

    assert tuple(body) == FIELDS
