"""The dashboard in a real browser (Playwright driving Debian's chromium), on every
backend: each page loads and updates itself, each action is confirmed and changes the
database, and a hostile payload is shown as text."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

import leaseq
from tests.dashboard.conftest import HOSTILE, Serve, make_dead
from tests.helpers import held_transaction, wait_for

CHROMIUM = os.environ.get("LEASEQ_TEST_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 15_000

playwright_api = pytest.importorskip("playwright.sync_api")


# Module scope, not session: while Playwright's sync API is open it holds an event loop
# running on the main thread, and later tests that call asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        why = f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}; CI=true: a missing browser fails the run")
        pytest.skip(why)
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


class Tab:
    """A page that records dialogs and console errors, answering confirms as told."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.accept = True
        page.set_default_timeout(TIMEOUT_MS)
        page.on("dialog", self._dialog)
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        if dialog.type == "confirm" and self.accept:
            dialog.accept()
        else:
            dialog.dismiss()

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path)
        return self.page

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).first.inner_text())

    def wait_text(self, selector: str, expected: str) -> None:
        playwright_api.expect(self.page.locator(selector).first).to_have_text(
            expected, timeout=TIMEOUT_MS)

    def pwned(self) -> bool:
        return bool(self.page.evaluate("() => window.__pwned === 1"))


@pytest.fixture
def tab(browser: Any, serve: Serve) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Tab(context.new_page(), serve(refresh=0.3))
    finally:
        context.close()


def test_overview_updates_without_reload(q: leaseq.Queue, tab: Tab) -> None:
    q.enqueue_many([{"queue": "web", "payload": {"i": i}} for i in range(2)])
    page = tab.open("/")
    tab.wait_text('tr[data-queue="web"] [data-field="available"]', "2")
    page.evaluate("() => { window.__same_page = true; }")
    q.enqueue("web", {"i": 3})
    q.enqueue("arrived-later", {})
    tab.wait_text('tr[data-queue="web"] [data-field="available"]', "3")
    tab.wait_text('tr[data-queue="arrived-later"] [data-field="available"]', "1")
    tab.wait_text('[data-total="available"]', "4")
    assert page.evaluate("() => window.__same_page") is True  # no reload happened
    page.click('tr[data-queue="arrived-later"] a')
    tab.wait_text("#queue-name", "arrived-later")
    assert tab.errors == []


def test_overview_card_follows_the_oldest_transaction(q: leaseq.Queue, tab: Tab,
                                                     prefix: str) -> None:
    if q.backend not in ("postgres", "mysql"):
        pytest.skip("no transaction age on this backend (tests/dashboard/test_api.py "
                    "checks the card is left out)")
    page = tab.open("/")
    card = page.locator('[data-total="oldest_transaction_age"]')
    with held_transaction(q.backend, f"{prefix}jobs"):
        # The card counts up without a reload: "N.N s" past 2 s (others' sessions may be
        # older, so only a lower bound).
        wait_for(lambda: (m := re.fullmatch(r"([\d.]+) s|(\d+) min", card.inner_text()))
                 is not None and (m.group(2) is not None or float(m.group(1)) >= 2.0),
                 timeout=15, message="the card to pass 2 s")
    assert tab.errors == []


def test_job_actions_are_confirmed_and_applied(q: leaseq.Queue, tab: Tab) -> None:
    dead = make_dead(q, "jobs-ui")
    page = tab.open(f"/jobs/{dead}")
    tab.wait_text("h1 [data-field=state]", "dead")

    tab.accept = False  # the user changes their mind: nothing happens
    page.click("button:has-text('Retry now')")
    assert tab.dialogs and tab.dialogs[-1].startswith("confirm:")
    assert q.get(dead).state == "dead"

    tab.accept = True
    page.click("button:has-text('Retry now')")
    tab.wait_text("h1 [data-field=state]", "available")
    assert q.get(dead).state == "available"

    page.click("button:has-text('Discard')")
    tab.wait_text("h1 [data-field=state]", "discarded")
    assert q.get(dead).state == "discarded"

    waiting = q.enqueue("jobs-ui", {}, delay=3600).id
    page = tab.open(f"/jobs/{waiting}")
    page.click("button:has-text('Cancel')")
    tab.wait_text("h1 [data-field=state]", "cancelled")
    assert q.get(waiting).state == "cancelled"
    assert tab.errors == []


def test_job_page_follows_the_job_live(q: leaseq.Queue, tab: Tab) -> None:
    job_id = q.enqueue("follow", {}).id
    page = tab.open(f"/jobs/{job_id}")
    page.evaluate("() => { window.__same_page = true; }")
    (job,) = q.dequeue("follow", worker_id="browser-test")
    tab.wait_text("h1 [data-field=state]", "running")
    q.ack(job)
    tab.wait_text("h1 [data-field=state]", "completed")
    # The actions a finished job no longer allows are gone.
    playwright_api.expect(page.locator("button:has-text('Cancel')")).to_be_hidden()
    assert page.evaluate("() => window.__same_page") is True


def test_queue_actions(q: leaseq.Queue, tab: Tab) -> None:
    dead = [make_dead(q, "qui") for _ in range(2)]
    page = tab.open("/queues/qui")
    tab.wait_text("[data-field=dead]", "2")

    page.click("button:has-text('Pause')")
    playwright_api.expect(page.locator("h1 .badge.paused")).to_be_visible()
    assert q.paused() == ["qui"]
    page.click("button:has-text('Resume')")
    playwright_api.expect(page.locator("h1 .badge.paused")).to_be_hidden()
    assert q.paused() == []

    page.click("button:has-text('Kick dead jobs')")
    tab.wait_text("[data-field=dead]", "0")
    tab.wait_text("[data-field=available]", "2")
    assert {q.get(i).state for i in dead} == {"available"}

    page.select_option("select[name=state]", "available")
    page.click("button:has-text('Find')")
    playwright_api.expect(page.locator("#jobs tbody tr")).to_have_count(2)
    assert all(d in tab.dialogs[i] for i, d in enumerate(["Pause", "Resume", "dead job"]))


def test_dead_letters_bulk_retry_and_discard(q: leaseq.Queue, tab: Tab) -> None:
    dead = [make_dead(q, "bulk-ui") for _ in range(3)]
    page = tab.open("/dead")
    for job_id in dead[:2]:
        page.check(f'input[name=ids][value="{job_id}"]')
    page.click("button:has-text('Retry selected')")
    playwright_api.expect(page.locator("p.notice")).to_contain_text("2 done")
    assert [q.get(i).state for i in dead] == ["available", "available", "dead"]

    page.check("input[data-select-all]")
    page.click("button:has-text('Discard selected')")
    playwright_api.expect(page.locator("p.notice")).to_contain_text("1 done")
    assert q.get(dead[2]).state == "discarded"
    assert tab.dialogs[-1] == ("confirm: Discard the selected dead jobs? They move to history "
                               "and will not run.")


def test_hostile_strings_are_shown_as_text(q: leaseq.Queue, tab: Tab) -> None:
    live = q.enqueue("hostile-ui", {"x": HOSTILE}, unique_key=HOSTILE[:60]).id
    dead = make_dead(q, "hostile-ui-dead", payload={"x": HOSTILE}, error=HOSTILE)
    page = tab.open(f"/jobs/{dead}")
    assert json.dumps(HOSTILE, ensure_ascii=False) in tab.text("#payload")
    assert tab.text("#error") == HOSTILE
    for path in (f"/jobs/{live}", "/queues/hostile-ui", "/dead", "/"):
        page = tab.open(path)
        # Let at least two live updates (which build rows in script) run.
        page.wait_for_function("() => document.getElementById('live').className === 'live on'")
        page.wait_for_timeout(700)
        assert not tab.pwned(), path
    page = tab.open("/queues/hostile-ui")
    page.wait_for_function("() => document.getElementById('live').className === 'live on'")
    assert "<script>window.__pwned=1</script>" in tab.text(f'tr[data-job="{live}"] td.mono')
    assert tab.dialogs == []  # no alert, no confirm: nothing ran
    assert not tab.pwned()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_login_then_act(q: leaseq.Queue, browser: Any, serve: Serve) -> None:
    job_id = q.enqueue("login-ui", {}, delay=3600).id
    context = browser.new_context()
    try:
        tab = Tab(context.new_page(), serve(token="browser-token-123"))
        page = tab.open(f"/jobs/{job_id}")
        page.fill("input[name=token]", "wrong")
        page.click("button:has-text('Log in')")
        playwright_api.expect(page.locator("p.notice.err")).to_be_visible()
        page.fill("input[name=token]", "browser-token-123")
        page.click("button:has-text('Log in')")
        tab.wait_text("h1 [data-field=state]", "scheduled")
        page.click("button:has-text('Retry now')")
        tab.wait_text("h1 [data-field=state]", "available")
        assert q.get(job_id).state == "available"
        cookie = next(c for c in context.cookies() if c["name"] == "leaseq_session")
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"
        wait_for(lambda: page.evaluate("() => document.cookie") == "", message="cookie hidden")
        # The session expires (12 h by default) and logout ends it for good: the same
        # cookie put back into a fresh browser no longer opens a page.
        assert 12 * 3600 - 120 < cookie["expires"] - time.time() <= 12 * 3600
        page.click("button:has-text('Log out')")
        playwright_api.expect(page.locator("input[name=token]")).to_be_visible()
        replay = browser.new_context()
        try:
            replay.add_cookies([cookie])
            again = Tab(replay.new_page(), tab.base).open(f"/jobs/{job_id}")
            playwright_api.expect(again.locator("input[name=token]")).to_be_visible()
            assert again.locator("[data-field=state]").count() == 0
        finally:
            replay.close()
    finally:
        context.close()
