"""Input checks and JSON encoding, shared by every backend so they reject the same things."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from leaseq._core.job import Undecodable
from leaseq._core.trace import format_user
from leaseq.errors import (
    InvalidArgument,
    InvalidQueueName,
    PayloadNotSerializable,
    PayloadTooLarge,
)

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
MAX_UNIQUE_KEY = 255
MAX_KIND = 200
MAX_WORKER_ID = 200
MAX_HEADERS = 64
MAX_HEADER_KEY = 100
MAX_HEADERS_BYTES = 8192
MAX_TAGS = 16
MAX_TAG = 64
TAG = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_TAG}}}")
"""A tag: 1-64 characters of ``A-Z a-z 0-9 _ . : -``. No quote, backslash or space can
appear, so a tag's JSON text is the tag in quotes: ``jobs(tag=)`` matches it by text."""
MAX_ERROR_DETAIL = 65536
MAX_TRACEBACK = 16384
INT32 = (-(2**31), 2**31 - 1)
MAX_ATTEMPTS = 1_000_000  # a job's max_attempts, and a queue's
MAX_SECONDS = 10 * 365 * 86400  # any duration: ten years, beyond that it is a mistake
MAX_DEPTH = 64
"""Most levels of nesting in a payload, a result or an error detail: the number of arrays
and objects inside one another (a scalar is 0; ``[]``, ``[1]`` and ``{"a": 1}`` are 1;
``[[1]]`` is 2). Deeper values raise ``InvalidArgument`` with nothing written, from every
entry: ``enqueue``, ``enqueue_many``, tasks, ``ack``'s result, ``nack``'s error detail,
the dashboard's enqueue and the SQL routines (``<prefix>enqueue``; on MariaDB, whose JSON
functions read 31 levels, the procedure's limit is 31). Every reader of a job (a handler,
a renderer, a re-encode) can then recurse over it without running out of stack, which
Python's ``json`` does at about 1,000 levels (docs/design.md §52)."""


# Names already checked: a producer names the same few queues again and again. Bounded, so
# a stream of distinct names cannot grow it without limit.
_GOOD_NAMES: set[str] = set()


def queue_name(name: object) -> str:
    if type(name) is str and name in _GOOD_NAMES:
        return name
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidQueueName(
            f"invalid queue name {name!r}: use 1-200 characters of A-Z a-z 0-9 _ . -"
        )
    if len(_GOOD_NAMES) < 10_000:
        _GOOD_NAMES.add(name)
    return name


def queue_names(names: str | Sequence[str]) -> list[str]:
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)):
        raise InvalidQueueName(f"queues must be a queue name or a list of them, got {names!r}")
    checked = list(dict.fromkeys(queue_name(n) for n in names))
    if not checked:
        raise InvalidQueueName("name at least one queue to dequeue from")
    return checked


_NESTED = (dict, list, tuple)  # what json writes as objects and arrays: what the walk enters


class _TooDeep(Exception):
    """Raised by ``_string_keys`` past ``MAX_DEPTH``; ``encode`` names the value."""


def _string_keys(value: Any, depth: int = 1) -> None:
    """Refuses what JSON would not give back as it went in (``{1: "a"}`` would come back
    as ``{"1": "a"}``) and nesting past ``MAX_DEPTH``; ``depth`` is ``value``'s own level
    when it is an array or object.

    The depth check lives in this walk, which every encode makes anyway: no second pass,
    and the walk stops at level 65 whatever lies below, so no value can take it (or
    ``json.dumps`` after it) into a ``RecursionError``."""
    if isinstance(value, dict):
        if depth > MAX_DEPTH:
            raise _TooDeep
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"dict key {key!r} is not a string")
            if isinstance(item, _NESTED):
                _string_keys(item, depth + 1)
    elif isinstance(value, (list, tuple)):  # json writes a tuple as an array
        if depth > MAX_DEPTH:
            raise _TooDeep
        for item in value:
            if isinstance(item, _NESTED):
                _string_keys(item, depth + 1)


_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def encode(value: Any, cap: int, what: str = "payload") -> str:
    """Encode to compact JSON, refusing what would not come back as it went in
    (``PayloadNotSerializable``), what nests deeper than ``MAX_DEPTH``
    (``InvalidArgument``) and what is larger than ``cap`` bytes (``PayloadTooLarge``)."""
    try:
        _string_keys(value)
        text = _ENCODER.encode(value)
        # ASCII text is its own UTF-8; anything else is encoded to count its bytes and to
        # refuse lone surrogates, which no database stores.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except _TooDeep:
        raise InvalidArgument(
            f"{what} nests arrays and objects more than MAX_DEPTH={MAX_DEPTH} levels deep; "
            "flatten it"
        ) from None
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise PayloadNotSerializable(
            f"{what} is not JSON-serialisable ({exc}); use dicts with string keys, lists, "
            "strings, finite numbers, booleans and None"
        ) from exc
    if size > cap:
        raise PayloadTooLarge(
            f"{what} is {size} bytes encoded, over the cap of {cap} bytes; store large data "
            "elsewhere and enqueue a reference, or raise max_payload_bytes"
        )
    return text


_DECODER = json.JSONDecoder()


def decode(text: str | bytes | None) -> Any:
    """JSON text as leaseq stored it, decoded; raises ``ValueError`` for text that is not
    JSON and ``RecursionError`` for nesting past about 1,000 levels. Reads of stored jobs
    use ``stored`` and ``claimed``, which never raise."""
    if text is None:
        return None
    if isinstance(text, str):
        # What leaseq stored is compact JSON: skip json.loads' two whitespace scans. Any
        # other text goes the long way, which also raises the proper error.
        try:
            value, end = _DECODER.raw_decode(text)
        except ValueError:
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def stored(text: str | bytes | None) -> Any:
    """A stored value as a read shows it (``get``, ``jobs``, ``peek``, history): decoded,
    or an ``Undecodable`` in its place. Never raises, so one bad row breaks no listing.
    A value deeper than ``MAX_DEPTH`` that the decoder reads is returned as stored."""
    try:
        return decode(text)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return _undecodable(text, exc)


def claimed(payload: str | bytes, headers: str | bytes | None) -> tuple[Any, Any]:
    """A claimed job's payload and headers, decoded; never raises inside a claim.

    When the payload does not decode, or the headers do not decode to an object of
    strings, the payload is an ``Undecodable`` that names which and the headers are None:
    the client buries the job instead of handing it out (``Backend.claim``). Only what
    the decoder cannot read counts; a payload deeper than ``MAX_DEPTH`` that it reads is
    handed out (a chain step's payload holds a result one level down), see design §52."""
    try:
        value = decode(payload)
    except (ValueError, RecursionError) as exc:
        return _undecodable(payload, exc, "payload "), None
    if headers is None:
        return value, None
    try:
        names = decode(headers)
    except (ValueError, RecursionError) as exc:
        return _undecodable(headers, exc, "headers "), None
    if not isinstance(names, dict) or not all(isinstance(x, str) for x in names.values()):
        return Undecodable("headers are not a JSON object of strings", _preview(headers)), None
    return value, names


def _undecodable(text: str | bytes | None, exc: BaseException, what: str = "") -> Undecodable:
    if isinstance(exc, RecursionError):
        return Undecodable(f"{what}nested too deep to decode ({exc})", _preview(text))
    return Undecodable(f"{what}not JSON ({exc})", _preview(text))


def _preview(text: str | bytes | None) -> str:
    """The first 200 characters of stored text (bytes read as UTF-8, bad bytes replaced)."""
    if isinstance(text, bytes):
        return text[:800].decode("utf-8", "replace")[:200]
    return str(text)[:200]


def headers(value: object) -> str | None:
    """A job's headers as the JSON text stored: a mapping of string keys (1-100
    characters) to string values, at most ``MAX_HEADERS`` entries and ``MAX_HEADERS_BYTES``
    encoded. None and an empty mapping are None: no headers."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"headers must be a mapping of str to str, got {type(value).__name__}"
        )
    if not value:
        return None
    if len(value) > MAX_HEADERS:
        raise InvalidArgument(f"headers hold {len(value)} entries, over the cap of {MAX_HEADERS}")
    for key, item in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_HEADER_KEY:
            raise InvalidArgument(
                f"header names must be strings of 1-{MAX_HEADER_KEY} characters, got {key!r:.80}"
            )
        if not isinstance(item, str):
            raise InvalidArgument(f"header {key!r} must have a string value, got {item!r:.80}")
    text = _ENCODER.encode(dict(value))
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate: no database stores it
        raise InvalidArgument(f"headers are not valid Unicode ({exc})") from exc
    if size > MAX_HEADERS_BYTES:
        raise InvalidArgument(
            f"headers are {size} bytes encoded, over the cap of {MAX_HEADERS_BYTES} bytes"
        )
    return text


def tags(value: object) -> str | None:
    """A job's tags as the JSON text stored: a list (or tuple) of at most ``MAX_TAGS``
    strings of ``TAG``, duplicates dropped, order kept. None and an empty list are None.
    A bare string is refused: ``tags="eu"`` would otherwise read as two letters."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidArgument(
            f"tags must be a list of strings, got {type(value).__name__} {value!r:.80}")
    kept = list(dict.fromkeys(tag(item) for item in value))
    if len(kept) > MAX_TAGS:
        raise InvalidArgument(f"tags hold {len(kept)} tags, over the cap of {MAX_TAGS}")
    return _ENCODER.encode(kept) if kept else None


def tag(value: object) -> str:
    """One tag, checked (``enqueue(tags=)`` and ``jobs(tag=)``)."""
    if not isinstance(value, str) or TAG.fullmatch(value) is None:
        raise InvalidArgument(
            f"a tag must be 1-{MAX_TAG} characters of A-Z a-z 0-9 _ . : -, got {value!r:.80}")
    return value


def stored_tags(text: str | bytes | None) -> tuple[str, ...]:
    """Stored tags as ``Job.tags`` and ``JobInfo.tags`` show them: ``()`` for none, and
    for text that is not a JSON list of strings (a row written by hand): tags are labels,
    and a bad one must not stop a claim or a listing."""
    if text is None:
        return ()
    try:
        value = decode(text)
    except (ValueError, RecursionError):
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str))


def integer(name: str, value: object, low: int, high: int = INT32[1]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def seconds(name: str, value: object, *, positive: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(number) and (number > 0 if positive else number >= 0)
        ok = ok and number <= MAX_SECONDS
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise InvalidArgument(f"{name} must be a number of seconds {bound}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def optional_text(name: str, value: object, limit: int) -> str | None:
    if value is None:
        return None
    if type(value) is str and value.isascii() and 0 < len(value) <= limit and "\x00" not in value:
        return value  # the common case, without the UTF-8 round trip below
    if (not isinstance(value, str) or not 1 <= len(value) <= limit or "\x00" in value
            or not _utf8(value)):
        raise InvalidArgument(
            f"{name} must be a string of 1-{limit} characters of valid Unicode without NUL, "
            f"got {value!r:.80}"
        )
    return value


def _utf8(text: str) -> bool:
    """False for lone surrogates, which no database can store as text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def aware_utc(name: str, value: object) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidArgument(
            f"{name} must be a timezone-aware datetime (naive times are ambiguous), "
            f"got {value!r}"
        )
    return value.astimezone(timezone.utc)


def error_text(value: object) -> str | None:
    """Errors are stored as text; anything else is repr'd, long ones are cut."""
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\x00", "\\x00")
    if not _utf8(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= 65536 else text[:65520] + "...[truncated]"


@dataclass(frozen=True)
class Raised:
    """An error the worker records: ``text`` as the readable error (the traceback it has
    always stored) and ``exc``, the exception, as its detail."""

    text: str | None
    exc: BaseException


def _exception_detail(value: BaseException) -> str:
    """``{"type", "message", "traceback"}`` of an exception, as JSON text."""
    message = error_text(str(value)) or ""
    trace = error_text(format_user(value)) or ""
    if len(trace) > MAX_TRACEBACK:  # keep the end: where it was raised
        trace = "...[truncated]" + trace[-MAX_TRACEBACK:]
    record = {"type": type(value).__name__, "message": message[:MAX_TRACEBACK],
              "traceback": trace}
    return json.dumps(record, ensure_ascii=False, allow_nan=False)


def discard_record(reason: str | None, last_error: str | None, last_detail: Any
                   ) -> tuple[str | None, str | None]:
    """What a discard stores as ``(error, error_detail)``, on every backend: the reason
    beside the last real error, ``{"message": reason, "previous": <the last error's
    detail>}`` (``{"message": last_error}`` when it had none; no ``"previous"`` when
    there was no error). Without a reason, ``(None, None)``: the last error stays as it
    is. ``last_detail`` is the stored detail, decoded."""
    if reason is None:
        return None, None
    previous = last_detail if isinstance(last_detail, dict) else (
        None if last_error is None else {"message": last_error})
    record: dict[str, Any] = {"message": reason}
    if previous is not None:
        record["previous"] = previous
    return reason, json.dumps(record, ensure_ascii=False, allow_nan=False)


def error_record(value: object) -> tuple[str | None, str | None]:
    """What ``nack(job, error=...)`` stores: the readable text and the error as a JSON
    object (text), or None when the text says it all (a string: read back as
    ``{"message": text}``).

    A dict is kept as given (it must encode as JSON, at most ``MAX_ERROR_DETAIL`` bytes;
    its text is its ``"message"`` when that is a string, else its JSON). An exception is
    ``{"type", "message", "traceback"}`` and reads ``"Type: message"``; a traceback
    longer than ``MAX_TRACEBACK`` characters loses its start (where it was raised stays),
    a message its end. A ``Raised`` (the worker's) is its text with its exception's
    detail. Anything else is text, as ``error_text`` makes it."""
    if isinstance(value, Mapping):
        detail = encode(value, MAX_ERROR_DETAIL, "error")
        message = value.get("message")
        return error_text(message if isinstance(message, str) else detail), detail
    if isinstance(value, BaseException):
        return error_text(f"{type(value).__name__}: {value}"), _exception_detail(value)
    if isinstance(value, Raised):
        return error_text(value.text), _exception_detail(value.exc)
    return error_text(value), None
