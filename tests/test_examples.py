"""The single-file examples run as the docs show them, on a fresh SQLite file each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

EXPECTED = {
    "results.py": [
        "2 + 3 = 5",
        "stored: 5",
        "job 2 is dead: ZeroDivisionError: division by zero",
        "still waiting after 0.2 s; the job is untouched",
    ],
    "workflows.py": [
        "homepage: 32 bytes",
        "ada got cat.png@64, cat.png@128",
        "['dog.png@32', 'dog.png@48']",
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_prints_what_its_comments_promise(name: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == EXPECTED[name]
