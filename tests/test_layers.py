"""Every import in src/leaseq points down the layers (issue 24, item 12; docs/design.md
§34): core → backends → client → tasks → flows/schedules → worker → cli, dashboard and the
package's own ``__init__`` on top.

Read from the source with ``ast``, so an import inside a function, under
``TYPE_CHECKING`` or through ``importlib.import_module("leaseq...")`` counts as much as
one at the top of a file: the circle tasks ↔ flows ↔ schedules cannot come back hidden in
one of those. A module may import its own layer and any below; every module must be
placed in a layer, so a new one is placed deliberately.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Each layer is a list of module-name prefixes (a prefix names a module and its children).
LAYERS: list[tuple[str, list[str]]] = [
    ("core", ["leaseq._core", "leaseq.errors", "leaseq.outcomes"]),
    ("backends", ["leaseq.backends"]),
    ("client", ["leaseq._client", "leaseq._aclient", "leaseq._shared", "leaseq._conn",
                "leaseq._listen", "leaseq._results", "leaseq._wakeup",
                "leaseq._aio",
                "leaseq._group", "leaseq._hooks", "leaseq._typed", "leaseq.tracing",
                "leaseq.metrics"]),
    ("tasks", ["leaseq.tasks"]),
    ("flows/schedules", ["leaseq.flows", "leaseq.schedules"]),
    ("worker", ["leaseq.worker", "leaseq.testing"]),
    ("top", ["leaseq", "leaseq.cli", "leaseq.dashboard", "leaseq.bench", "leaseq.contrib"]),
]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "leaseq").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer(module: str) -> int:
    """Index of the layer whose longest prefix names ``module``; -1 when none does. The
    package itself, ``leaseq``, names only its ``__init__``."""
    best, length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = prefix != "leaseq" and module.startswith(prefix + ".")
            if (module == prefix or below) and len(prefix) > length:
                best, length = index, len(prefix)
    return best


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The leaseq modules ``path`` imports anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:  # `from leaseq import tasks` imports leaseq.tasks
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
        elif isinstance(node, ast.Call) and node.args and isinstance(
                node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__"):
                found.add(node.args[0].value)
    return {m for m in found if m == "leaseq" or m.startswith("leaseq.")}


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in modules() if layer(m) < 0]
    assert not unplaced, f"place these modules in a layer of tests/test_layers.py: {unplaced}"


def test_no_module_imports_one_above_its_layer() -> None:
    known = set(modules())
    upward = []
    for name, path in modules().items():
        for target in sorted(imported(name, path, known)):
            if layer(target) > layer(name):
                upward.append(f"{name} ({LAYERS[layer(name)][0]}) imports {target} "
                              f"({LAYERS[layer(target)][0]})")
    assert not upward, "imports pointing up:\n" + "\n".join(upward)


def test_tasks_imports_neither_flows_nor_schedules() -> None:
    """The circle this layering broke, named: not even lazily or for typing."""
    known = set(modules())
    found = imported("leaseq.tasks", SRC / "leaseq" / "tasks.py", known)
    assert not {m for m in found if m.startswith(("leaseq.flows", "leaseq.schedules"))}


def test_the_checker_sees_hidden_imports(tmp_path: Path) -> None:
    """An import in a function, under TYPE_CHECKING or by name is found (so the tests
    above cannot pass by not looking)."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n    from leaseq.flows import Signature\n"
        "def f():\n    from leaseq import schedules\n"
        "    return importlib.import_module('leaseq.worker')\n"
        "from .tasks import App\n")
    known = {"leaseq.schedules", "leaseq.tasks"}
    assert imported("leaseq.probe", source, known) == {
        "leaseq.flows", "leaseq.schedules", "leaseq.worker", "leaseq.tasks"}
    assert layer("leaseq.probe") == -1  # unplaced: test_every_module_has_a_layer says so
    assert [layer(m) for m in ("leaseq.tasks", "leaseq.flows", "leaseq.worker.worker",
                               "leaseq._core.schedule", "leaseq")] == [3, 4, 5, 0, 6]


# -- capabilities, not names (issue 31, item 3; design §66) -----------------------------

CONTRACT = {"leaseq.backends", "leaseq.backends.base", "leaseq.backends.capabilities"}
"""What the rest of leaseq may import of ``leaseq.backends``: the registry
(``create_backend``, ``capabilities_for``, ``ddl``) and the contract's types."""

BACKEND_NAMES = {"memory", "sqlite", "postgres", "postgresql", "mysql", "mariadb", "redis",
                 "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel",
                 "rediss+sentinel"}


def named_backend(node: ast.AST) -> bool:
    """Whether an expression is a backend or scheme name, or names one: ``"mysql"``,
    ``("postgresql", "postgres")``, ``"+cluster://"``, ``aq.backend``, ``x.name`` of a
    backend..."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.lower()
        return (text in BACKEND_NAMES or text.rstrip(":/") in BACKEND_NAMES
                or "+cluster" in text or "+sentinel" in text)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(named_backend(element) for element in node.elts)
    return isinstance(node, ast.Attribute) and node.attr == "backend"


def name_comparisons(path: Path) -> list[str]:
    """``file:line`` of each comparison in ``path`` of a backend or scheme name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare) and any(
                named_backend(side) for side in [node.left, *node.comparators]):
            where = path.relative_to(SRC) if path.is_relative_to(SRC) else path.name
            found.append(f"{where}:{node.lineno}")
    return found


def outside_backends() -> dict[str, Path]:
    return {name: path for name, path in modules().items()
            if name != "leaseq.backends" and not name.startswith("leaseq.backends.")}


def test_no_module_outside_backends_imports_a_concrete_backend() -> None:
    """The worker, the clients and the CLI reach a backend's listener, turn, DDL and
    drivers through ``Capabilities``, never by importing its modules."""
    known = set(modules())
    found = [f"{name} imports {target}"
             for name, path in outside_backends().items()
             for target in sorted(imported(name, path, known))
             if target.startswith("leaseq.backends") and target not in CONTRACT]
    assert not found, "\n".join(found)


def test_no_module_outside_backends_compares_a_backend_or_scheme_name() -> None:
    """What differs per backend is a capability (``backends/capabilities.py``); the
    public ``Queue.backend`` stays a name to show, never one to branch on."""
    found = [where for path in outside_backends().values() for where in name_comparisons(path)]
    assert not found, "backend names compared outside backends/:\n" + "\n".join(found)


def test_the_name_check_sees_each_way_of_comparing(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "a = aq.backend == 'x'\n"
        "b = scheme not in ('postgresql', 'postgres')\n"
        "c = '+cluster://' not in url\n"
        "d = name != 'memory'\n"
        "e = request.url.scheme == 'https'\n"  # HTTP's scheme is no backend's
        "f = vendor in urls\n")
    lines = [int(where.rsplit(":", 1)[1]) for where in name_comparisons(source)]
    assert lines == [1, 2, 3, 4]
