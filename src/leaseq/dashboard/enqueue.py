"""``POST /api/queues/{name}/jobs``: a JSON body read with a size cap and turned into the
arguments of ``AsyncQueue.enqueue``, which checks every value as it checks a Python
caller's (docs/enqueue-from-sql-and-http.md)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from starlette.requests import Request

from leaseq.errors import InvalidArgument

FIELDS = ("payload", "kind", "priority", "delay", "run_at", "unique_key", "unique_for",
          "max_attempts", "headers", "tags")
"""The body's fields, each optional; the same names as ``enqueue``'s arguments."""

BODY_SLACK = 64 * 1024
"""Bytes a body may hold beyond twice the payload cap: the other fields and the JSON
around them (a payload sent with escapes may take more bytes than its compact form)."""


class BodyTooLarge(Exception):
    """The request's body is over the cap (a 413)."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"the request body is over the cap of {cap} bytes")
        self.cap = cap


def body_cap(max_payload_bytes: int) -> int:
    """The most bytes an enqueue body may have."""
    return 2 * max_payload_bytes + BODY_SLACK


async def read_body(request: Request, cap: int) -> bytes:
    """The body, refused without reading it when its Content-Length says it is over
    ``cap``, and cut off once ``cap`` bytes arrived otherwise (chunked uploads)."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > cap):
        raise BodyTooLarge(cap)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge(cap)
        chunks.append(chunk)
    return b"".join(chunks)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def enqueue_arguments(body: bytes) -> dict[str, Any]:
    """``enqueue``'s keyword arguments from a JSON body: an object of ``FIELDS``, each
    optional (an empty body enqueues a null payload). Raises ``InvalidArgument`` for what
    is not such an object; the values themselves are left to ``enqueue``'s checks, except
    ``run_at``, which arrives as an ISO 8601 text with a time zone."""
    if not body.strip():
        return {}
    try:
        # NaN and Infinity are not JSON; Python's parser would take them.
        data = json.loads(body.decode("utf-8"), parse_constant=_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"the body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(
            f"the body must be a JSON object of {', '.join(FIELDS)}; got a "
            f"{type(data).__name__}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise InvalidArgument(f"unknown fields {shown}: the body takes {', '.join(FIELDS)}")
    arguments = {name: data[name] for name in FIELDS if name in data}
    if arguments.get("run_at") is not None:
        arguments["run_at"] = timestamp(arguments["run_at"])
    for name in ("priority", "delay"):  # null means the default, as when left out
        if name in arguments and arguments[name] is None:
            del arguments[name]
    return arguments


def timestamp(value: object) -> datetime:
    """An aware datetime from ISO 8601 text with a time zone (``Z`` or ``+02:00``)."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return parsed
    raise InvalidArgument(
        "run_at must be an ISO 8601 time with a time zone, such as "
        f"2030-01-01T09:00:00Z; got {json.dumps(value)[:80]}")
