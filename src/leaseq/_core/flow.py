"""Workflow plumbing with no I/O: the ``leaseq-flow`` header, step specs, the splice.

A job that belongs to a chain or a group carries one header, ``leaseq-flow``, saying
where it stands (``FlowLink``). Its ack then goes through ``Backend.complete_steps``, which
completes it and, in the same transaction (SQL) or script (Redis), enqueues what follows.
Jobs without the header are acked as before and pay nothing for the feature.

A follow-up job is stored ahead of time as a *spec* (``encode_step``): a JSON object of
strings, the job's fields plus its payload split around the hole its first parameter
leaves (``head``, ``rest``). The backend then builds the payload as text, ``head + value
+ rest``, where ``value`` is the JSON text of the result that fills the hole: no JSON is
parsed or re-encoded, so a Lua script can do it as well as Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from leaseq.errors import BackendError

FlowKind = Literal["chain", "group"]

HEADER = "leaseq-flow"
KINDS = {"c": "chain", "g": "group"}
MARKS = {kind: mark for mark, kind in KINDS.items()}


@dataclass(frozen=True, slots=True)
class FlowLink:
    """Where a job stands in a flow (its ``leaseq-flow`` header).

    Attributes:
        flow_id: The flow's id (32 hex digits, made by the client).
        kind: ``"chain"`` or ``"group"``.
        index: The job's step (chain) or member (group) index, from 0.
        queue: The queue of the job this one's completion may enqueue (the next step, or
            the group's callback), None when there is none. Redis needs it to name the
            keys its script touches.
    """

    flow_id: str
    kind: FlowKind
    index: int
    queue: str | None


@dataclass(frozen=True, slots=True)
class FlowState:
    """A flow as stored (``Backend.get_flow``).

    Attributes:
        flow_id: The flow's id.
        kind: ``"chain"`` or ``"group"``.
        size: Steps of the chain, members of the group.
        remaining: Steps or members not completed yet.
        step: Chain: the index of the step enqueued last (``job_id``). Group: 0.
        job_id: Chain: the id of the step enqueued last. Group: the callback's id once
            the last member completed, else None.
    """

    flow_id: str
    kind: FlowKind
    size: int
    remaining: int
    step: int
    job_id: int | None


def header(link: FlowLink) -> str:
    """The ``leaseq-flow`` header value of a job at ``link``: ``c`` or ``g``, the flow id,
    the job's index, and the queue of the job its completion may enqueue (queue names
    never hold ``:``)."""
    return f"{MARKS[link.kind]}:{link.flow_id}:{link.index}:{link.queue or ''}"


def link(headers: Mapping[str, str] | None) -> FlowLink | None:
    """The ``FlowLink`` in a job's headers, or None for a job outside any flow (the
    common case, decided by one test on None)."""
    if not headers:
        return None
    text = headers.get(HEADER)
    if text is None:
        return None
    try:
        mark, flow_id, index, queue = text.split(":")
        return FlowLink(flow_id, KINDS[mark], int(index), queue or None)  # type: ignore[arg-type]
    except (ValueError, KeyError) as exc:
        raise BackendError(f"malformed {HEADER} header {text!r}") from exc


def halves(payload: str, first: str) -> tuple[str, str]:
    """``(head, rest)`` of a payload template (a JSON object without ``first``): the
    payload with ``first`` set to a value is ``head + value + rest``."""
    head = "{" + json.dumps(first) + ":"
    inner = payload.strip()[1:]  # after "{"
    rest = "}" if inner.strip() == "}" else "," + inner
    return head, rest


def splice(head: str, rest: str, value: str | None) -> str:
    """The payload with the hole filled by ``value`` (JSON text; None is ``null``)."""
    return head + ("null" if value is None else value) + rest


def joined(results: Sequence[str | None]) -> str:
    """The JSON array text of a group's results, in member order."""
    return "[" + ",".join("null" if r is None else r for r in results) + "]"
