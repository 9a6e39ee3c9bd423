"""The dashboard's JSON API and pages over a real server, on every backend: the data it
shows, each action and its effect in the database, and the error statuses."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

import leaseq
from leaseq.dashboard import create_app
from tests.dashboard.conftest import Serve, csrf_of, make_completed, make_dead
from tests.helpers import held_transaction, wait_for


def test_queues_api_matches_stats(q: leaseq.Queue, http: httpx.Client) -> None:
    q.enqueue_many([{"queue": "mail", "payload": {"n": i}} for i in range(3)])
    q.enqueue("mail", {"later": True}, delay=3600)
    make_dead(q, "dead-only")
    make_completed(q, "done")
    q.configure_queue("quiet", max_attempts=3)  # settings only: listed with zeros
    q.pause("mail")

    body = http.get("/api/queues").json()
    by_name = {row["queue"]: row for row in body["queues"]}
    assert set(by_name) == {"mail", "dead-only", "done", "quiet"}
    assert by_name["mail"] | {"oldest_available_age": None, "series": [], "throughput": 0} == {
        "queue": "mail", "available": 3, "scheduled": 1, "running": 0, "dead": 0,
        "completed": 0, "cancelled": 0, "discarded": 0, "failed": 0, "paused": True,
        "paused_until": None, "oldest_available_age": None, "series": [], "throughput": 0,
    }
    assert by_name["mail"]["oldest_available_age"] >= 0
    assert by_name["dead-only"]["dead"] == 1
    assert by_name["done"]["completed"] == 1
    assert by_name["quiet"]["available"] == 0
    assert body["totals"]["available"] == 3
    assert body["totals"]["dead"] == 1
    assert body["totals"]["queues"] == 4

    one = http.get("/api/queues/mail").json()
    assert one["queue"]["available"] == 3
    assert one["queue"]["paused"] is True
    quiet = http.get("/api/queues/quiet").json()
    assert quiet["config"]["max_attempts"] == 3
    # A valid name nobody used yet is an empty queue, not an error.
    assert http.get("/api/queues/never-used").json()["queue"]["available"] == 0

    page = http.get("/")
    assert page.status_code == 200
    for name in ("mail", "dead-only", "done", "quiet"):
        assert f'data-queue="{name}"' in page.text


def test_jobs_api_pages_by_id(q: leaseq.Queue, http: httpx.Client) -> None:
    ids = [r.id for r in q.enqueue_many([{"queue": "pg", "payload": {"i": i}}
                                         for i in range(7)])]
    q.enqueue("elsewhere", {})
    seen: list[int] = []
    after = 0
    while True:
        body = http.get("/api/jobs", params={"queue": "pg", "limit": 3, "after": after}).json()
        seen += [job["id"] for job in body["jobs"]]
        if body["next_after"] is None:
            break
        after = body["next_after"]
    assert seen == ids

    scheduled = q.enqueue("pg", {}, delay=3600).id
    body = http.get("/api/jobs", params={"queue": "pg", "state": "scheduled"}).json()
    assert [job["id"] for job in body["jobs"]] == [scheduled]


def test_find_by_kind_and_unique_key(q: leaseq.Queue, http: httpx.Client) -> None:
    a = q.enqueue("find", {}, kind="resize").id
    b = q.enqueue("find", {}, kind="email", unique_key="user-7").id
    q.enqueue("find", {}, kind="email")
    body = http.get("/api/jobs", params={"queue": "find", "kind": "resize"}).json()
    assert [job["id"] for job in body["jobs"]] == [a]
    body = http.get("/api/jobs", params={"queue": "find", "unique_key": "user-7"}).json()
    assert [job["id"] for job in body["jobs"]] == [b]
    page = http.get("/queues/find", params={"unique_key": "user-7"})
    assert f'data-job="{b}"' in page.text
    assert f'data-job="{a}"' not in page.text
    assert http.get("/jobs/go", params={"id": a}, follow_redirects=False).headers[
        "location"].endswith(f"/jobs/{a}")


def test_tags_are_shown_and_filtered_by(q: leaseq.Queue, http: httpx.Client) -> None:
    eu = q.enqueue("tagged", {}, tags=["billing", "eu"]).id
    us = q.enqueue("tagged", {}, tags=["billing", "us"]).id
    plain = q.enqueue("tagged", {}).id
    body = http.get("/api/jobs", params={"queue": "tagged", "tag": "eu"}).json()
    assert [(job["id"], job["tags"]) for job in body["jobs"]] == [(eu, ["billing", "eu"])]
    body = http.get("/api/jobs", params={"tag": "billing", "state": "available"}).json()
    assert [job["id"] for job in body["jobs"]] == [eu, us]
    assert http.get("/api/jobs", params={"tag": "no good"}).status_code == 400
    page = http.get("/queues/tagged", params={"tag": "us"})
    assert f'data-job="{us}"' in page.text and f'data-job="{eu}"' not in page.text
    assert 'name="tag" value="us"' in page.text  # the filter form keeps it
    assert 'href="/queues/tagged?tag=billing"' in http.get("/queues/tagged").text.replace(
        http.base_url.path.rstrip("/"), "")
    job_page = http.get(f"/jobs/{eu}").text
    assert ">billing</a>" in job_page and ">eu</a>" in job_page
    assert http.get(f"/api/jobs/{plain}").json()["job"]["tags"] == []


def test_job_api_and_page(q: leaseq.Queue, http: httpx.Client) -> None:
    job_id = q.enqueue("one", {"hello": "world"}, kind="greet", priority=4).id
    job = http.get(f"/api/jobs/{job_id}").json()["job"]
    assert job["id"] == job_id
    assert job["state"] == "available"
    assert job["payload"] == {"hello": "world"}
    assert job["kind"] == "greet"
    assert job["priority"] == 4
    page = http.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "&#34;hello&#34;: &#34;world&#34;" in page.text or '"hello": "world"' in page.text

    finished = make_completed(q, "one-done")
    assert http.get(f"/api/jobs/{finished}").json()["job"]["result"] == {"ok": True}

    failed = q.enqueue("one-failed", max_attempts=1).id
    [held] = q.dequeue("one-failed", worker_id="w")
    q.nack(held, {"message": "quota spent", "code": 429})
    assert http.get(f"/api/jobs/{failed}").json()["job"]["error_detail"] == {
        "message": "quota spent", "code": 429}
    page = http.get(f"/jobs/{failed}")
    assert 'id="error-detail"' in page.text and "429" in page.text
    assert 'id="error-detail"' not in http.get(f"/jobs/{make_dead(q, 'one-dead')}").text


def test_errors_are_json_with_fitting_status(q: leaseq.Queue, http: httpx.Client) -> None:
    missing = http.get("/api/jobs/987654321")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "JobNotFound"
    assert http.get("/jobs/987654321").status_code == 404

    bad_name = http.get("/api/queues/bad name!")
    assert bad_name.status_code == 400
    assert bad_name.json()["error"]["type"] == "InvalidQueueName"
    assert http.get("/queues/bad name!").status_code == 400
    assert http.post("/api/queues/bad name!/pause", headers=csrf_of(http)).status_code == 400
    assert http.get("/api/jobs/not-a-number").status_code == 400
    assert http.get("/api/jobs", params={"state": "sideways"}).status_code == 400
    assert http.get("/api/jobs", params={"limit": "0"}).status_code == 400
    assert http.post("/api/jobs/1/explode", headers=csrf_of(http)).status_code == 404

    done = make_completed(q, "wrong-state")
    for action in ("retry", "discard", "cancel"):
        refused = http.post(f"/api/jobs/{done}/{action}", headers=csrf_of(http))
        assert refused.status_code == 409, action
        assert refused.json()["error"]["type"] == "JobStateError"
    assert q.get(done).state == "completed"


def test_job_actions_change_the_database(q: leaseq.Queue, http: httpx.Client) -> None:
    headers = csrf_of(http)
    dead = make_dead(q, "act-retry")
    assert http.post(f"/api/jobs/{dead}/retry", headers=headers).json()["ok"] is True
    assert q.get(dead).state == "available"

    scheduled = q.enqueue("act-discard", {}, delay=3600).id
    http.post(f"/api/jobs/{scheduled}/discard", headers=headers).raise_for_status()
    assert q.get(scheduled).state == "discarded"

    waiting = q.enqueue("act-cancel", {}).id
    body = http.post(f"/api/jobs/{waiting}/cancel", headers=headers).json()
    assert body["state"] == "cancelled"
    assert q.get(waiting).state == "cancelled"

    running = q.enqueue("act-cancel-running", {}).id
    assert [j.id for j in q.dequeue("act-cancel-running", worker_id="w")] == [running]
    assert http.post(f"/api/jobs/{running}/cancel", headers=headers).json()["state"] == "running"
    assert q.get(running).cancel_requested is True


def test_a_timed_pause_shows_its_end_and_resume_ends_it(
    q: leaseq.Queue, http: httpx.Client
) -> None:
    q.enqueue("later", {})
    q.pause("later", until=datetime.now(timezone.utc) + timedelta(hours=3))
    end = q.stats()["later"].paused_until
    assert end is not None
    shown = http.get("/api/queues/later").json()["queue"]
    assert shown["paused"] is True and shown["paused_until"] == end.isoformat()
    page = http.get("/queues/later").text
    assert f"until {end.strftime('%Y-%m-%d %H:%M:%S')}" in page
    assert "/api/queues/later/resume" in page  # the resume button ends a timed pause too
    http.post("/api/queues/later/resume", headers=csrf_of(http)).raise_for_status()
    assert q.paused() == [] and q.stats()["later"].paused_until is None
    assert "data-format=\"paused-until\" hidden" in http.get("/queues/later").text


def test_queue_actions_change_the_database(q: leaseq.Queue, http: httpx.Client) -> None:
    headers = csrf_of(http)
    http.post("/api/queues/qa/pause", headers=headers).raise_for_status()
    assert "qa" in q.paused()
    http.post("/api/queues/qa/resume", headers=headers).raise_for_status()
    assert "qa" not in q.paused()

    dead = [make_dead(q, "qa-kick") for _ in range(3)]
    body = http.post("/api/queues/qa-kick/kick", headers=headers).json()
    assert body["kicked"] == 3
    assert {q.get(i).state for i in dead} == {"available"}


def test_plain_form_posts_redirect_back(q: leaseq.Queue, http: httpx.Client) -> None:
    csrf = csrf_of(http)["x-csrf-token"]
    dead = [make_dead(q, "bulk") for _ in range(3)]
    response = http.post("/dead/retry", data={"csrf": csrf, "ids": dead[:2], "next": "/dead"},
                         follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/dead?done=2&failed=0"
    assert [q.get(i).state for i in dead] == ["available", "available", "dead"]
    http.post("/dead/discard", data={"csrf": csrf, "ids": [dead[2], dead[0]]},
              follow_redirects=False)
    assert [q.get(i).state for i in dead] == ["discarded", "available", "discarded"]

    response = http.post("/api/queues/bulk/pause", data={"csrf": csrf, "next": "/queues/bulk"},
                         follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/queues/bulk")
    # A 'next' that leaves the dashboard is replaced by the overview.
    response = http.post("/api/queues/bulk/resume",
                         data={"csrf": csrf, "next": "//evil.example/x"},
                         follow_redirects=False)
    assert response.headers["location"] == "/"


def test_dead_page_lists_dead_jobs_of_every_queue(q: leaseq.Queue, http: httpx.Client) -> None:
    a, b = make_dead(q, "dl-a"), make_dead(q, "dl-b")
    q.enqueue("dl-a", {"alive": True})
    page = http.get("/dead")
    assert f'data-job="{a}"' in page.text
    assert f'data-job="{b}"' in page.text
    only_b = http.get("/dead", params={"queue": "dl-b"})
    assert f'data-job="{a}"' not in only_b.text
    assert f'data-job="{b}"' in only_b.text


def test_metrics_endpoint_serves_queue_state(q: leaseq.Queue, http: httpx.Client) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    q.enqueue_many([{"queue": "m", "payload": {}} for _ in range(2)])
    make_dead(q, "m-dead")
    response = http.get("/metrics")
    assert response.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    assert samples[("leaseq_jobs", (("queue", "m"), ("state", "available")))] == 2
    assert samples[("leaseq_jobs", (("queue", "m"), ("state", "dead")))] == 0
    assert samples[("leaseq_jobs", (("queue", "m-dead"), ("state", "dead")))] == 1


@pytest.mark.parametrize("path", ["/", "/dead", "/api/queues"])
def test_security_headers(http: httpx.Client, path: str) -> None:
    headers = http.get(path).headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_metrics_report_a_failed_read_as_scrape_error(serve: Serve, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    # A database without leaseq's tables: every read fails with SchemaMissing.
    base = serve(app=create_app(f"sqlite:///{tmp_path}/unmigrated.db"))
    with httpx.Client(base_url=base) as client:
        response = client.get("/metrics")
        assert response.status_code == 200
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        assert families["leaseq_scrape_error"].samples[0].value == 1
        assert "leaseq_jobs" not in families
        assert client.get("/api/queues").status_code == 503
        assert client.get("/").status_code == 503


def test_overview_shows_the_oldest_transaction_where_the_server_has_one(
    q: leaseq.Queue, http: httpx.Client, prefix: str
) -> None:
    q.enqueue("tx", {})
    if q.backend not in ("postgres", "mysql"):  # no such thing: null, and no card
        assert http.get("/api/queues").json()["totals"]["oldest_transaction_age"] is None
        assert 'data-total="oldest_transaction_age"' not in http.get("/").text
        return
    assert http.get("/api/queues").json()["totals"]["oldest_transaction_age"] >= 0
    with held_transaction(q.backend, f"{prefix}jobs"):
        wait_for(lambda: http.get("/api/queues").json()["totals"]["oldest_transaction_age"]
                 >= 1.5, message="the held transaction's age on /api/queues")
        page = http.get("/").text
        assert 'data-total="oldest_transaction_age"' in page
        assert "oldest db transaction" in page
        wait_for(lambda: (metric := re.search(
            r"^leaseq_db_oldest_transaction_age_seconds (\S+)$", http.get("/metrics").text,
            re.MULTILINE)) is not None and float(metric.group(1)) >= 1.5,
            message="the gauge on /metrics")
