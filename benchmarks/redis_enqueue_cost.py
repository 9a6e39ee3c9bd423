"""What one enqueue costs on Redis, leaseq against huey, and where leaseq's time goes.

    benchmarks/.venv/bin/python benchmarks/redis_enqueue_cost.py [URL]

Tight loops from one process (best of 5 rounds of 3,000 calls, µs per call): a PING and an
LPUSH for the round trip itself, huey's enqueue (pickle + LPUSH), the EVALSHA of leaseq's
enqueue script with exactly the arguments leaseq sends, and leaseq's Queue.enqueue and
task.enqueue. Then the server's own time per enqueue script (INFO commandstats), and of
the shared prelude every script begins with (_common.lua).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import redis
from huey import RedisHuey

from leaseq import App
from leaseq.backends.redis import driver
from leaseq.backends.redis.lua import COMMON, PACKAGE, SCRIPTS

URL = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0"
app = App(URL, table_prefix="enqcost_")


@app.task(queue="enqcost", name="enqcost.hit")
def hit(t: float) -> None: ...


def best(call: Callable[[], Any], n: int = 3000, rounds: int = 5) -> float:
    out = []
    for _ in range(rounds):
        for _ in range(200):
            call()
        began = time.perf_counter()
        for _ in range(n):
            call()
        out.append((time.perf_counter() - began) / n * 1e6)
    return min(out)


def server_us(r: redis.Redis, call: Callable[[], Any], n: int = 2000) -> float:
    r.config_resetstat()
    for _ in range(n):
        call()
    return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


def main() -> None:
    r = redis.Redis.from_url(URL)
    q = app.queue
    q.migrate()
    seen = []
    execute = driver.SyncRunner.execute

    def spy(self: driver.SyncRunner, call: Any) -> Any:
        seen.append(call)
        return execute(self, call)

    driver.SyncRunner.execute = spy  # type: ignore[method-assign]
    q.enqueue("enqcost", {"t": 1.0})
    driver.SyncRunner.execute = execute  # type: ignore[method-assign]
    call = seen[-1]
    args = (SCRIPTS[call.name].sha, len(call.keys), *call.keys, *call.args)
    huey = RedisHuey("enqcost", url=URL)

    @huey.task()
    def huey_hit(t: float) -> None: ...

    rows = [
        ("PING (the round trip)", lambda: r.ping()),
        ("LPUSH of 100 bytes", lambda: r.lpush("enqcost:x", "x" * 100)),
        ("huey: task call (pickle + LPUSH)", lambda: huey_hit(1.0)),
        (f"EVALSHA {call.name}.lua, leaseq's arguments",
         lambda: r.execute_command("EVALSHA", *args)),
        ("leaseq: Queue.enqueue", lambda: q.enqueue("enqcost", {"t": 1.0})),
        ("leaseq: task.enqueue", lambda: hit.enqueue(1.0)),
    ]
    for name, fn in rows:
        print(f"{best(fn):7.1f} µs  {name}")
    from importlib import resources

    common = resources.files(PACKAGE).joinpath("scripts", COMMON).read_text("utf-8")
    bare, prelude = r.script_load("return 1"), r.script_load(common + "\nreturn 1")
    script = server_us(r, lambda: r.execute_command("EVALSHA", *args))
    print(f"server time per call: {call.name}.lua {script:.1f} µs, "
          f"'return 1' {server_us(r, lambda: r.evalsha(bare, 0)):.1f} µs, "
          f"_common.lua + 'return 1' {server_us(r, lambda: r.evalsha(prelude, 0)):.1f} µs")
    huey.storage.flush_queue()
    r.delete("enqcost:x")
    for key in r.scan_iter("*enqcost_*"):
        r.delete(key)
    app.close()


if __name__ == "__main__":
    main()
