"""Start-up: from starting `leaseq worker` to its handler's first statement.

    benchmarks/.venv/bin/python benchmarks/startup.py URL [RUNS] [PYTHON]

Each run makes a fresh table prefix (or key prefix) holding one due job, starts
`PYTHON -m leaseq.cli worker app:app` as a subprocess and takes the time from just
before `Popen` to the handler's first statement (same host clock); the handler then stops
the worker. Prints every run and the median. Run `python -m compileall -q src/leaseq`
first (benchmarks/run does): without bytecode the worker compiles leaseq at every start.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

APP = '''
import os, time
from leaseq import App

app = App({url!r}, table_prefix={prefix!r})

@app.task(queue="startup")
def hit() -> None:
    with open({stamp!r}, "w") as f:
        f.write(repr(time.time()))
    os.kill(os.getpid(), 15)
'''


def once(url: str, python: str, folder: Path) -> float:
    prefix = "su" + uuid.uuid4().hex[:8] + "_"
    stamp = folder / "stamp"
    stamp.unlink(missing_ok=True)
    shutil.rmtree(folder / "__pycache__", ignore_errors=True)  # same size, same second
    (folder / "startup_app.py").write_text(APP.format(url=url, prefix=prefix, stamp=str(stamp)))
    env = dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    subprocess.run([python, "-c", "import startup_app as s; s.app.migrate(); "
                    "s.hit.enqueue(); s.app.close()"], env=env, check=True)
    began = time.time()
    worker = subprocess.Popen([python, "-m", "leaseq.cli", "worker", "startup_app:app",
                               "--log-level", "WARNING"], env=env)
    deadline = began + 30
    while not (stamp.exists() and stamp.read_text()):
        if time.time() > deadline:
            worker.kill()
            raise SystemExit("the worker never ran the job")
        time.sleep(0.002)
    worker.wait(30)
    return float(stamp.read_text()) - began


def main() -> None:
    url = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    python = sys.argv[3] if len(sys.argv) > 3 else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        seconds = [once(url, python, Path(tmp)) for _ in range(runs)]
    print(url.split(":")[0], " ".join(f"{s:.3f}" for s in seconds),
          f"median {statistics.median(seconds):.3f} s")


if __name__ == "__main__":
    main()
