"""Follow-up jobs as the backends store them: specs (``_core/flow.py`` tells why).

Shared by every backend: the SQL plans and the memory backend decode specs in Python, and
Redis' ``complete_step.lua`` reads the same JSON with cjson.
"""

from __future__ import annotations

import json
from typing import Any

from leaseq._core.flow import halves, splice
from leaseq.backends.base import FlowStep, NewJob


def encode_step(step: FlowStep) -> str:
    """A follow-up job as stored until its turn comes: a JSON object of strings (a Lua
    script reads it with cjson and needs no number conversions)."""
    job = step.job
    head, rest = halves(job.payload, step.first)
    spec: dict[str, str] = {"queue": job.queue, "head": head, "rest": rest,
                            "priority": str(job.priority),
                            "max_attempts": str(job.max_attempts), "delay": repr(job.delay)}
    if job.kind is not None:
        spec["kind"] = job.kind
    if job.lease is not None:
        spec["lease"] = repr(job.lease)
    if job.headers is not None:
        spec["headers"] = job.headers
    if job.tags is not None:
        spec["tags"] = job.tags  # the JSON array text, as stored
    return json.dumps(spec, separators=(",", ":"))


def decode_step(spec: str, value: str | None) -> NewJob:
    """The follow-up job of a stored spec with ``value`` spliced in."""
    s: dict[str, Any] = json.loads(spec)
    return NewJob(
        queue=s["queue"], payload=splice(s["head"], s["rest"], value), kind=s.get("kind"),
        priority=int(s["priority"]), max_attempts=int(s["max_attempts"]),
        delay=float(s["delay"]),
        lease=float(s["lease"]) if "lease" in s else None, headers=s.get("headers"),
        tags=s.get("tags"),
    )
