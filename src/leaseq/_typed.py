"""Typed payloads: task arguments and results of richer types, stored as plain JSON.

A task whose annotations name a type JSON lacks gets a ``Conversion``, made once per task
from ``typing.get_type_hints``. Enqueue *dumps* its arguments to JSON values (by what each
value is); the worker *loads* them back before the call (by what each annotation says).
Results cross the other way. Tasks without such annotations get no ``Conversion`` at all,
so plain jobs skip this module entirely.

Stored forms:

==========================  =============================================
type                        JSON
==========================  =============================================
``datetime``, ``date``      ISO 8601 text; aware datetimes keep their offset
``UUID``, ``Decimal``       their ``str``
``Path`` (any ``PurePath``)  its ``str``
``Enum``                    its value
dataclass                   an object of its ``__init__`` fields, recursively
pydantic model              ``model_dump(mode="json")`` (pydantic 2)
``list``/``tuple``/``set``  an array
==========================  =============================================

These nest: in ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, ``X | None`` and
dataclass fields. pydantic is never imported here: a model can only exist once its user
imported pydantic, so ``sys.modules`` says whether a value or annotation is one.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from pathlib import PurePath
from typing import Any
from uuid import UUID

from leaseq.errors import PayloadNotSerializable

Loader = Callable[[Any], Any]
"""Rebuilds one value of an annotated type from its JSON form."""

_NONE = type(None)
_JSON_SCALARS = frozenset({str, int, float, bool, _NONE})
_PLAIN = frozenset({str, int, float, bool, _NONE, Any, object})
_LISTS = frozenset({list, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection})
_SETS = frozenset({set, abc.Set, abc.MutableSet})
_DICTS = frozenset({dict, abc.Mapping, abc.MutableMapping})
CONVERTED = ("dataclasses, pydantic models, datetime, date, UUID, Decimal, Enum, Path, "
             "tuples and sets")


class _Unsupported(TypeError):
    """A value leaseq cannot turn into JSON (wrapped in PayloadNotSerializable)."""


@dataclass(frozen=True, slots=True)
class Conversion:
    """How one task's arguments and result cross JSON.

    Attributes:
        task: The task's name, for error messages.
        params: A loader per parameter whose annotation needs one (the others pass as is).
        declared: Every named parameter; other argument names went through ``**kwargs``.
        rest: The loader for ``**kwargs`` values, when their annotation needs one, and
            that parameter's name.
        result: The loader for the return annotation, when it needs one.
        hints: The resolved annotations, for error messages.
    """

    task: str
    params: Mapping[str, Loader]
    declared: frozenset[str]
    rest: tuple[Loader, str] | None
    result: Loader | None
    hints: Mapping[str, Any]

    def _loader_of(self, name: str) -> tuple[Loader, str] | None:
        load = self.params.get(name)
        if load is not None:
            return load, name
        return None if name in self.declared else self.rest

    def dump_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The call's keyword arguments as JSON values; raises PayloadNotSerializable."""
        out = dict(arguments)
        for name, value in arguments.items():
            if self._loader_of(name) is not None:
                out[name] = _dump_top(value, f"argument {name!r}")
        return out

    def load_arguments(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The stored payload rebuilt into the annotated types; a value that does not fit
        raises TypeError naming the task, the argument and the annotation."""
        out = dict(payload)
        for name, value in payload.items():
            found = self._loader_of(name)
            if found is not None:
                out[name] = self._load(found[0], value, f"argument {name!r}", found[1])
        return out

    def dump_result(self, value: Any) -> Any:
        """The handler's return value as JSON values (unchanged when the return annotation
        needs no conversion); raises PayloadNotSerializable."""
        return value if self.result is None else _dump_top(value, "result", "result")

    def load_result(self, value: Any) -> Any:
        """A stored result rebuilt into the return annotation's type."""
        return value if self.result is None else self._load(self.result, value, "result",
                                                            "return")

    def _load(self, load: Loader, value: Any, what: str, hint: str) -> Any:
        try:
            return load(value)
        except Exception as exc:
            wanted = _type_name(self.hints.get(hint, "?"))
            raise TypeError(
                f"task {self.task!r}: {what} does not fit its annotation {wanted} "
                f"({type(exc).__name__}: {exc}); stored value: {value!r:.200}"
            ) from exc


def conversion(fn: Callable[..., Any], task: str) -> Conversion | None:
    """The ``Conversion`` of ``fn``'s annotations, or None when nothing needs one."""
    hints = _hints(fn)
    memo: dict[Any, Loader] = {}
    params: dict[str, Loader] = {}
    rest: tuple[Loader, str] | None = None
    declared = set()
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind is param.VAR_KEYWORD or param.kind is param.VAR_POSITIONAL:
            load = loader(hints[name], memo) if name in hints else None
            rest = (load, name) if load and param.kind is param.VAR_KEYWORD else rest
            continue
        declared.add(name)
        load = loader(hints[name], memo) if name in hints else None
        if load is not None:
            params[name] = load
    result = loader(hints["return"], memo) if "return" in hints else None
    if not params and rest is None and result is None:
        return None
    return Conversion(task, params, frozenset(declared), rest, result, hints)


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``get_type_hints``, and when one annotation cannot be resolved (a name imported
    only for type checkers, a class local to a function), the others one by one: an
    unresolved annotation counts as none."""
    try:
        return typing.get_type_hints(fn)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    globalns = getattr(fn, "__globals__", {})
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        holder = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints.update(typing.get_type_hints(holder, globalns=globalns))
        except Exception:
            continue
    return hints


# -- dumping: by what the value is -----------------------------------------------------


def _dump_top(value: Any, what: str, name: str = "payload") -> Any:
    try:
        return dump(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadNotSerializable(
            f"{name} is not JSON-serialisable ({what}: {exc}); use dicts with string keys, "
            f"lists, strings, finite numbers, booleans, None, or {CONVERTED}"
        ) from exc


def dump(value: Any) -> Any:
    """``value`` with every converted type replaced by its JSON form."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if isinstance(value, Enum):
        return dump(value.value)
    if kind is dict or isinstance(value, Mapping):
        return {_dump_key(k): dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [dump(v) for v in value]
    if isinstance(value, date):  # datetime too
        return value.isoformat()
    if isinstance(value, (UUID, Decimal, PurePath)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name))
                for f in dataclasses.fields(value) if f.init}
    model = _pydantic_model()
    if model is not None and isinstance(value, model):
        return value.model_dump(mode="json")
    if isinstance(value, (int, float, str)):  # subclasses of the JSON scalars
        return value
    raise _Unsupported(f"values of type {kind.__qualname__} cannot be stored")


def _dump_key(key: Any) -> str:
    if type(key) is str:
        return key
    dumped = dump(key)
    if not isinstance(dumped, str):
        raise _Unsupported(f"dict key {key!r} is not a string")
    return dumped


def _pydantic_model() -> Any:
    """pydantic's ``BaseModel`` when pydantic was imported (it must have been for a
    model to exist), else None."""
    pydantic = sys.modules.get("pydantic")
    model = getattr(pydantic, "BaseModel", None)
    return model if isinstance(model, type) else None


# -- loading: by what the annotation says ----------------------------------------------


def loader(tp: Any, memo: dict[Any, Loader]) -> Loader | None:
    """A function rebuilding values of type ``tp`` from JSON, or None when JSON values
    already are such values (plain types, ``Any``, unannotated, unknown classes)."""
    if tp in _PLAIN or isinstance(tp, typing.TypeVar):
        return None
    alias = getattr(typing, "TypeAliasType", None)
    if alias is not None and isinstance(tp, alias):
        return loader(tp.__value__, memo)
    supertype = getattr(tp, "__supertype__", None)  # NewType
    if supertype is not None:
        return loader(supertype, memo)
    origin = typing.get_origin(tp)
    if origin is not None:
        return _generic(origin, typing.get_args(tp), memo)
    if not isinstance(tp, type):
        return None
    if tp in memo:
        return memo[tp]
    if issubclass(tp, Enum):
        return tp
    if issubclass(tp, datetime):
        return _datetime
    if issubclass(tp, date):
        return _date
    if issubclass(tp, (UUID, Decimal, PurePath)):
        return _from_text(tp)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, memo)
    model = _pydantic_model()
    if model is not None and issubclass(tp, model):
        return tp.model_validate  # type: ignore[attr-defined, no-any-return]
    if tp is tuple:
        return _sequence(tuple, None)
    if tp in (set, frozenset):
        return _sequence(tp, None)
    return None


def _generic(origin: Any, args: tuple[Any, ...], memo: dict[Any, Loader]) -> Loader | None:
    if origin is typing.Union or origin is types.UnionType:
        return _union(args, memo)
    if origin is typing.Literal or origin is typing.ClassVar:
        return None
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence(tuple, loader(args[0], memo))
        return _fixed_tuple([loader(a, memo) for a in args])
    if origin in _LISTS:
        item = loader(args[0], memo) if args else None
        return None if item is None else _sequence(list, item)
    if origin in _SETS or origin is frozenset:
        return _sequence(frozenset if origin is frozenset else set,
                         loader(args[0], memo) if args else None)
    if origin in _DICTS:
        key, value = (loader(a, memo) for a in args) if len(args) == 2 else (None, None)
        return None if key is None and value is None else _dict(key, value)
    return None


def _union(members: tuple[Any, ...], memo: dict[Any, Loader]) -> Loader | None:
    nullable = _NONE in members
    options = [(m, loader(m, memo)) for m in members if m is not _NONE]
    if all(load is None for _, load in options):
        return None
    if len(options) == 1:
        only = options[0][1]
        assert only is not None

        def optional(value: Any) -> Any:
            return None if value is None else only(value)

        return optional

    def first_fit(value: Any) -> Any:
        if value is None and nullable:
            return None
        for member, load in options:
            if load is None:
                if _plainly(member, value):
                    return value
                continue
            try:
                return load(value)
            except Exception:
                continue
        names = " | ".join(_type_name(m) for m in members)
        raise TypeError(f"{value!r:.80} fits none of {names}")

    return first_fit


def _plainly(tp: Any, value: Any) -> bool:
    """Whether a JSON value already is of the plain type ``tp`` (a union member)."""
    kind = typing.get_origin(tp) or tp
    if kind is typing.Literal:
        return value in typing.get_args(tp)
    if not isinstance(kind, type) or kind is object:
        return True
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _sequence(kind: type, item: Loader | None) -> Loader:
    def load(value: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {value!r:.80}")
        return kind(value if item is None else map(item, value))

    return load


def _fixed_tuple(items: list[Loader | None]) -> Loader:
    def load(value: Any) -> Any:
        if not isinstance(value, list) or len(value) != len(items):
            raise TypeError(f"expected an array of {len(items)} items, got {value!r:.80}")
        return tuple(v if f is None else f(v) for f, v in zip(items, value, strict=True))

    return load


def _dict(key: Loader | None, value: Loader | None) -> Loader:
    def load(data: Any) -> Any:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {data!r:.80}")
        return {k if key is None else key(k): v if value is None else value(v)
                for k, v in data.items()}

    return load


def _dataclass(cls: type, memo: dict[Any, Loader]) -> Loader:
    fields: dict[str, Loader] = {}  # the fields whose type needs loading

    def load(value: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {cls.__qualname__}, got {value!r:.80}")
        kwargs = dict(value)
        for name, field_loader in fields.items():
            if name in kwargs:
                kwargs[name] = field_loader(kwargs[name])
        return cls(**kwargs)

    memo[cls] = load  # before the fields: a dataclass may contain itself
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        field_loader = loader(hints[f.name], memo) if f.init and f.name in hints else None
        if field_loader is not None:
            fields[f.name] = field_loader
    return load


def _datetime(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"expected ISO 8601 text, got {value!r:.80}")
    if value.endswith(("Z", "z")):  # Python 3.10 does not read the Z suffix
        value = value[:-1] + "+00:00"
    return datetime.fromisoformat(value)


def _date(value: Any) -> date:
    if not isinstance(value, str):
        raise TypeError(f"expected ISO 8601 text, got {value!r:.80}")
    return date.fromisoformat(value)


def _from_text(kind: type) -> Loader:
    def load(value: Any) -> Any:
        if not isinstance(value, str) and not (kind is Decimal and type(value) is int):
            raise TypeError(f"expected text for {kind.__name__}, got {value!r:.80}")
        return kind(value)

    return load


def _type_name(tp: Any) -> str:
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    return str(tp).replace("typing.", "")
