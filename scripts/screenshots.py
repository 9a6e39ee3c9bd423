"""Screenshots of the dashboard for the docs: docs/images/dashboard-*.png.

    .venv/bin/python scripts/screenshots.py

Seeds a throwaway SQLite database with a few queues in every state, drains part of it
while the overview is open (so the throughput chart has a line), and photographs each
page in Debian's chromium.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

import leaseq
from leaseq.dashboard import create_app, running

OUT = Path(__file__).resolve().parent.parent / "docs" / "images"


def seed(q: leaseq.Queue) -> int:
    random.seed(7)
    for queue, n, kind in (("emails", 400, "send_welcome"), ("thumbnails", 250, "resize"),
                           ("billing", 60, "charge"), ("webhooks", 120, "deliver")):
        q.enqueue_many([{"queue": queue, "kind": kind, "priority": random.choice([0, 0, 5]),
                         "payload": {"user_id": 1000 + i, "attempt_note": "demo"}}
                        for i in range(n)])
        q.enqueue_many([{"queue": queue, "kind": kind, "delay": 3600,
                         "payload": {"user_id": 9000 + i}} for i in range(n // 10)])
    dead = 0
    for queue, errors in (("billing", 3), ("webhooks", 5)):
        for job in q.dequeue(queue, limit=errors, worker_id="demo-1"):
            q.bury(job, reason=f"HTTPError: 502 Bad Gateway from upstream (job {job.id})")
            dead = job.id
    q.dequeue("thumbnails", limit=4, worker_id="demo-2")  # running
    q.pause("billing")
    return dead


def drain(url: str, stop: threading.Event) -> None:
    q = leaseq.connect(url)
    while not stop.is_set():
        for queue in ("emails", "thumbnails", "webhooks"):
            q.ack_many(q.dequeue(queue, limit=random.randint(1, 6), worker_id="demo-3"))
        time.sleep(0.2)
    q.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/demo.db"
        q = leaseq.connect(url)
        q.migrate()
        dead = seed(q)
        stop = threading.Event()
        with running(create_app(url, refresh=0.5)) as base, sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 420})
            worker = threading.Thread(target=drain, args=(url, stop))
            worker.start()
            page.goto(base + "/")
            page.wait_for_timeout(20_000)  # the chart fills in
            page.screenshot(path=str(OUT / "dashboard-overview.png"))
            stop.set()
            worker.join()
            page.set_viewport_size({"width": 1280, "height": 720})
            page.goto(base + "/queues/webhooks")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(OUT / "dashboard-queue.png"))
            page.goto(f"{base}/jobs/{dead}")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(OUT / "dashboard-job.png"))
            page.goto(base + "/dead")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(OUT / "dashboard-dead.png"))
            browser.close()
        q.close()
    print(f"wrote {sorted(x.name for x in OUT.glob('dashboard-*.png'))}")


if __name__ == "__main__":
    main()
