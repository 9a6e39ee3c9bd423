"""Waiting for results: a task's return value, a failure, a timeout.

A worker runs in a thread here so the example is one file; in production it is
`leaseq worker results:app` in processes of its own.
"""

import asyncio
import threading

import leaseq

app = leaseq.App("sqlite:///results.db")


@app.task(queue="math")
def add(a: int, b: int) -> int:
    return a + b


@app.task(queue="math", max_attempts=1)
def divide(a: int, b: int) -> float:
    return a / b


@app.task(queue="later")
def nobody_runs_this() -> None: ...


if __name__ == "__main__":
    app.migrate()
    worker = leaseq.Worker(app, queues=["math"], poll_interval=0.05)
    thread = threading.Thread(target=lambda: asyncio.run(worker.run_async()))
    thread.start()
    try:
        r = add.enqueue(a=2, b=3)
        print("2 + 3 =", r.wait(timeout=30))               # the handler's return value
        print("stored:", app.queue.result(r.id))           # read again, without waiting

        try:
            divide.enqueue(a=1, b=0).wait(timeout=30)
        except leaseq.JobFailed as failed:                 # dead, discarded or cancelled
            print(f"job {failed.job_id} is {failed.state}: {failed.error.splitlines()[-1]}")

        try:
            nobody_runs_this.enqueue().wait(timeout=0.2)
        except TimeoutError:
            print("still waiting after 0.2 s; the job is untouched")
    finally:
        worker.stop()
        thread.join()
        app.close()
