"""Sans-I/O plumbing shared by the SQL backends.

A backend operation is a *plan*: a generator that yields ``Stmt`` objects (a named query
and its parameters) and receives each one's ``Result``. Plans hold the logic (fencing, the
dead-or-retry decision, unique-key races) once; a sync runner and an async runner drive
the same plan over psycopg, PyMySQL/aiomysql or sqlite3. Because a plan is re-created from
its factory, a runner can retry a whole transaction after a deadlock without the plan
knowing.
"""

from __future__ import annotations

import functools
import pkgutil
import re
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Stmt:
    """One query to run: ``name`` from the dialect's queries.sql, bound ``params``.

    With ``many``, ``params`` is a sequence of mappings run as one batch. With
    ``duplicate_ok``, a unique-key violation is reported as ``Result.duplicate`` instead
    of raised (MySQL, which has no ``ON CONFLICT DO NOTHING ... RETURNING``).
    """

    name: str
    params: Mapping[str, Any] | Sequence[Mapping[str, Any]] = field(default_factory=dict)
    many: bool = False
    duplicate_ok: bool = False


@dataclass
class Result:
    """What a statement gave back."""

    rows: list[tuple[Any, ...]]
    rowcount: int
    lastrowid: int | None = None
    duplicate: bool = False


Plan = Generator[Stmt, Result, T]
PlanFactory = Callable[[], Plan[T]]


def drive(plan: Plan[T], execute: Callable[[Stmt], Result]) -> T:
    """Run a plan to completion with a synchronous ``execute``."""
    try:
        stmt = next(plan)
        while True:
            stmt = plan.send(execute(stmt))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


_NAME = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def load_queries(package: str, prefix: str, paramstyle: str) -> dict[str, str]:
    """Load ``queries.sql`` of a dialect package, and the statements every dialect shares
    (``_sql/queries.sql``), into ``{name: sql}``.

    This is the one place where SQL text is changed at run time: ``{prefix}`` becomes the
    validated table prefix (``Settings`` allows only ``[a-z0-9_]``), ``{_fragment}`` the
    text of the file's fragment of that name, and ``:name`` placeholders the driver's
    style. Values are always bound parameters.
    """
    bodies: dict[str, str] = {}
    # The statements every dialect writes alike first (_sql/queries.sql), then the
    # dialect's own; a name in both is a mistake, not an override.
    for source in (__package__ or "leaseq.backends._sql", package):
        # pkgutil, not importlib.resources: the same loader-aware read, without the ~5 ms
        # of tempfile, shutil and compression modules that importlib.resources imports.
        data = pkgutil.get_data(source, "queries.sql")
        if data is None:  # a loader that cannot read package data: a broken install
            raise FileNotFoundError(f"{source}/queries.sql cannot be read")
        parts = _NAME.split(data.decode("utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in bodies:
                raise ValueError(f"{source}/queries.sql defines {name!r} again")
            # Comment lines are dropped so that prose in them is never parsed for
            # placeholders.
            lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
            bodies[name] = "\n".join(lines).strip().rstrip(";").replace("{prefix}", prefix)
    # A name starting with "_" is a fragment, not a query: other queries say {_name} where
    # its text belongs (the column list of a job row, written once per dialect).
    fragments = {f"{{{name}}}": sql for name, sql in bodies.items() if name.startswith("_")}
    queries: dict[str, str] = {}
    for name, sql in bodies.items():
        if name.startswith("_"):
            continue
        for mark, fragment in fragments.items():
            sql = sql.replace(mark, fragment)
        if paramstyle == "pyformat":
            sql = _PARAM.sub(r"%(\1)s", sql)
        queries[name] = sql
    return queries


def load_migrations(package: str, prefix: str) -> list[tuple[int, str, list[str]]]:
    """``[(version, name, [statement, ...]), ...]`` from ``migrations/NNNN_name.sql``."""
    from importlib import resources  # only migrate and the CLI list migrations

    folder = resources.files(package).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version, _, name = entry.name[:-4].partition("_")
            body = entry.read_text("utf-8").replace("{prefix}", prefix)
            statements = [s.strip() for s in body.split(";\n") if _has_sql(s)]
            found.append((int(version), name, statements))
    return sorted(found)


@functools.cache
def latest_migration(package: str) -> int:
    """The newest migration version ``package`` ships: what this leaseq needs."""
    from importlib import resources

    names = [entry.name for entry in resources.files(package).joinpath("migrations").iterdir()]
    return max(int(name.partition("_")[0]) for name in names if name.endswith(".sql"))


def _has_sql(chunk: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in chunk.splitlines())


def fingerprint(text: str) -> str:
    """A short hash of a routine's text: ``migrate`` replaces the routine when it differs."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def routine_constants() -> dict[str, object]:
    """The limits the stored enqueue routines check, from the client's own checks and
    ``Settings``' defaults (a routine has no client settings to read)."""
    from leaseq._core import validate as v
    from leaseq._core.settings import Settings

    defaults = Settings()
    return {
        "max_payload_bytes": defaults.max_payload_bytes,
        "default_max_attempts": defaults.max_attempts,
        "max_attempts_cap": v.MAX_ATTEMPTS,
        "max_kind": v.MAX_KIND,
        "max_unique_key": v.MAX_UNIQUE_KEY,
        "max_delay": v.MAX_SECONDS,
        "max_depth": v.MAX_DEPTH,
        "max_tags": v.MAX_TAGS,
        "max_tag": v.MAX_TAG,
        "unique_retries": UNIQUE_RETRIES,
    }


UNIQUE_RETRIES = 100
"""Inserts a keyed enqueue tries while its twin keeps leaving (``SqlOps.insert_unique``)."""

_ROUTINE_QUERY = re.compile(r"\{query:([a-z_]+)\}")
_ROUTINE_CONSTANT = re.compile(r"\{([a-z_]+)\}")


def load_routine(
    package: str, prefix: str, params: Mapping[str, str], constants: Mapping[str, object]
) -> str:
    """The text of a dialect's stored enqueue routine (``enqueue.sql``), ready to run.

    ``{query:name}`` becomes the text of that query of the dialect's ``queries.sql``, the
    very statement the client runs, with each ``:param`` placeholder replaced by the
    routine's expression for it from ``params``: the routine and the client cannot drift
    apart in what they write. ``{name}`` becomes ``constants[name]`` (limits the Python
    validation uses too) and ``{prefix}`` the table prefix. An unknown placeholder raises.
    """
    data = pkgutil.get_data(package, "enqueue.sql")
    if data is None:
        raise FileNotFoundError(f"{package}/enqueue.sql cannot be read")
    lines = [ln for ln in data.decode("utf-8").splitlines()
             if not ln.lstrip().startswith("--")]  # prose in comments is never substituted
    text = "\n".join(lines).strip().rstrip(";").replace("{prefix}", prefix)
    queries = load_queries(package, prefix, "named")

    def query(match: re.Match[str]) -> str:
        def param(found: re.Match[str]) -> str:
            if found.group(1) not in params:
                raise KeyError(f"enqueue.sql: no routine value for :{found.group(1)}")
            return params[found.group(1)]

        return _PARAM.sub(param, queries[match.group(1)])

    text = _ROUTINE_QUERY.sub(query, text)
    return _ROUTINE_CONSTANT.sub(lambda m: str(constants[m.group(1)]), text)
