"""Cheap guards: __all__ is complete and sorted, the two clients do not drift, the
examples run, every public name has a docstring."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import leaseq

ROOT = Path(__file__).resolve().parent.parent


def test_all_is_sorted_and_complete() -> None:
    assert leaseq.__all__ == sorted(leaseq.__all__)
    public = {n for n, v in vars(leaseq).items()
              if not n.startswith("_") and not inspect.ismodule(v)}
    assert public | set(leaseq._LAZY) == set(leaseq.__all__)
    for name in leaseq.__all__:  # the lazy ones resolve too
        assert getattr(leaseq, name) is not None, name


def test_import_leaves_flows_and_schedules_for_first_use() -> None:
    """A worker without workflows or schedules starts without importing them (start-up
    time); they load on first use, by attribute or by ``from leaseq import``."""
    code = ("import sys, leaseq, leaseq.cli, leaseq.worker;"
            "assert 'leaseq.flows' not in sys.modules, 'flows';"
            "assert 'leaseq.schedules' not in sys.modules, 'schedules';"
            "assert 'cronsim' not in sys.modules, 'cronsim';"
            "from leaseq import chain, Schedule;"
            "assert chain is sys.modules['leaseq.flows'].chain;"
            "assert Schedule is sys.modules['leaseq.schedules'].Schedule;"
            "assert 'chain' in dir(leaseq)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    with pytest.raises(AttributeError, match="no_such_name"):
        leaseq.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_queue_and_async_queue_share_methods_and_signatures() -> None:
    def methods(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(fn)
            for name, fn in vars(cls).items()
            if callable(fn) and not name.startswith("_")
        }

    sync, aio = methods(leaseq.Queue), methods(leaseq.AsyncQueue)
    assert sync.keys() == aio.keys()
    for name, sig in sync.items():
        assert [str(p) for p in sig.parameters.values()] == [
            str(p) for p in aio[name].parameters.values()
        ], name
        assert inspect.iscoroutinefunction(getattr(leaseq.AsyncQueue, name)), name


def test_every_public_name_has_a_docstring() -> None:
    for name in leaseq.__all__:
        obj = getattr(leaseq, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name
            for meth_name, meth in vars(obj).items():
                if inspect.isfunction(meth) and not meth_name.startswith("_"):
                    assert meth.__doc__, f"{name}.{meth_name}"


def test_examples_run(tmp_path: Path) -> None:
    for example in sorted((ROOT / "examples").glob("*.py")):
        done = subprocess.run(
            [sys.executable, str(example)], cwd=tmp_path, capture_output=True, text=True,
            timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
        assert done.returncode == 0, f"{example.name}:\n{done.stdout}\n{done.stderr}"
        assert done.stdout.strip(), example.name
