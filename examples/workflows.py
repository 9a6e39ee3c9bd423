"""Chains and groups: each step's result feeds the next, each step exactly once.

A worker runs in a thread here so the example is one file; in production it is
`leaseq worker workflows:app` in processes of its own.
"""

import asyncio
import threading

import leaseq

app = leaseq.App("sqlite:///workflows.db")


@app.task(queue="media")
def fetch(url: str) -> str:
    return f"<html>{url}</html>"


@app.task(queue="media")
def parse(html: str) -> int:
    return len(html)


@app.task(queue="media")
def store(size: int, label: str) -> str:
    return f"{label}: {size} bytes"


@app.task(queue="media")
def resize(image: str, width: int) -> str:
    return f"{image}@{width}"


@app.task(queue="media")
def notify(thumbnails: list[str], user: str) -> str:
    return f"{user} got {', '.join(thumbnails)}"


if __name__ == "__main__":
    app.migrate()
    worker = leaseq.Worker(app, poll_interval=0.05)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run_async()))
    thread.start()
    try:
        # fetch's result is parse's first argument, parse's is store's.
        pipeline = leaseq.chain(fetch.s("https://example.com"), parse.s(),
                                store.s(label="homepage"))
        print(pipeline.enqueue().wait(timeout=30))

        # The members run in parallel; notify gets their results, in member order.
        thumbs = leaseq.group(resize.s("cat.png", 64), resize.s("cat.png", 128))
        print(thumbs.then(notify.s(user="ada")).enqueue().wait(timeout=30))

        # A group without a callback waits for the list of member results.
        print(leaseq.group(*(resize.s("dog.png", w) for w in (32, 48))).enqueue().wait(30))
    finally:
        worker.stop()
        thread.join()
        app.close()
