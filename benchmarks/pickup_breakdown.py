"""Where leaseq's Redis pickup latency goes, step by step.

    benchmarks/.venv/bin/python benchmarks/pickup_breakdown.py [SECONDS] [URL]

As the harness's pickup workload (one `leaseq worker` process; a producer here enqueues
200 jobs/s, each carrying time.time() taken just before its enqueue call), but the worker
runs with timestamps around its push wake-up (`Worker._wake_soon`), each claim
(`AsyncQueue.dequeue`) and the handler's first statement, all appended to one file, and
the producer notes when each enqueue call returned. At 200 jobs/s the jobs are 5 ms apart,
so each job's events follow its enqueue before the next one's: the steps are read off in
order. Prints p50/p90/p99 of each step in ms.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

EVENTS = Path(os.environ.get("BREAKDOWN_EVENTS", "/tmp/leaseq-pickup-breakdown.txt"))
URL = os.environ.get("BREAKDOWN_URL", "redis://127.0.0.1:6379/0")
_fd: int | None = None


def event(tag: str, *values: float) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(_fd, (" ".join([f"{time.time():.6f}", tag, *(f"{v:.6f}" for v in values)])
                   + "\n").encode())


from leaseq import App  # noqa: E402

app = App(URL, table_prefix="breakdown_")


@app.task(queue="breakdown", name="breakdown.hit")  # one name in both processes
async def hit(t: float) -> None:
    event("handler", t)


def worker() -> None:
    """The worker process: `leaseq worker` with the timestamps patched in."""
    from leaseq import _client
    from leaseq.cli import main
    from leaseq.worker import worker as w

    wake = w.Worker._wake_soon

    def woken(self: w.Worker) -> None:
        event("wake")
        wake(self)

    dequeue = _client.AsyncQueue.dequeue

    async def claimed(self: _client.AsyncQueue, *args: object, **kwargs: object) -> list:
        began = time.time()
        jobs = await dequeue(self, *args, **kwargs)  # type: ignore[arg-type]
        event("claim", began, len(jobs))
        return jobs

    w.Worker._wake_soon = woken  # type: ignore[method-assign]
    _client.AsyncQueue.dequeue = claimed  # type: ignore[method-assign,assignment]
    sys.argv = ["leaseq", "worker", "pickup_breakdown:app",
                "--log-level", os.environ.get("BREAKDOWN_LOG", "WARNING")]
    main()


def produce(seconds: float, rate: float = 200.0) -> None:
    EVENTS.write_text("")
    app.migrate()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent), BREAKDOWN_URL=URL)
    proc = subprocess.Popen([sys.executable, __file__, "--worker"], env=env)
    try:
        deadline = time.time() + 30
        while "handler" not in EVENTS.read_text():  # warmed up: the worker runs jobs
            if time.time() > deadline:
                raise SystemExit("the worker never ran a job")
            hit.enqueue(time.time())
            time.sleep(0.05)
        time.sleep(0.2)
        EVENTS.write_text("")
        due = time.perf_counter()
        for _ in range(int(rate * seconds)):
            due += 1 / rate
            while time.perf_counter() < due:
                pass
            began = time.time()
            hit.enqueue(began)
            event("enqueued", began, time.time())
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    report()


def report() -> None:
    lines = (line.split() for line in EVENTS.read_text().splitlines())
    events = sorted((float(ts), tag, [float(v) for v in rest]) for ts, tag, *rest in lines)
    starts = [e for e in events if e[1] == "enqueued"]
    rows = []
    for k, (_, _, (began, returned)) in enumerate(starts):
        until = starts[k + 1][2][0] if k + 1 < len(starts) else float("inf")
        wake = claim = handler = None
        for ts, tag, values in events:
            if not began <= ts < until:
                continue
            if tag == "wake" and wake is None:
                wake = ts
            elif tag == "claim" and claim is None and values[1] > 0:
                claim = (values[0], ts)
            elif tag == "handler" and abs(values[0] - began) < 1e-5:
                handler = ts
        if wake is None or claim is None or handler is None:
            continue  # claimed by a poll before its wake-up came: no steps to split
        rows.append((returned - began, wake - began, claim[0] - wake, claim[1] - claim[0],
                     handler - claim[1], handler - began,
                     (wake - began) + (handler - claim[1])))
    # The last row bounds a one-hop design (the enqueue script leasing the job to a worker
    # blocked on a list, as huey's BRPOP): its reply could not reach the worker before the
    # publish does, and the job would still need the claim -> handler step.
    names = ["enqueue call returns", "enqueue -> wake-up", "wake-up -> claim sent",
             "claim round trip", "claim -> handler", "pickup (total)",
             "bound without the claim"]
    print(f"{len(rows)} of {len(starts)} jobs had every step")

    def pct(values: list[float], p: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    for name, column in zip(names, zip(*rows, strict=True), strict=True):
        print(f"{name:24} p50 {pct(list(column), .5):6.3f}  p90 {pct(list(column), .9):6.3f}"
              f"  p99 {pct(list(column), .99):6.3f} ms")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker()
    else:
        URL = sys.argv[2] if len(sys.argv) > 2 else URL
        produce(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0)
