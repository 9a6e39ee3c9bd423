"""The Redis key schema, built in exactly one place.

Key names are made only of the validated table prefix (``[a-z0-9_]``) and validated queue
names (``[A-Za-z0-9_.-]``), both checked again here; everything a caller gives besides
(unique keys, kinds, payloads, errors, worker ids) is stored as hash fields and values.
So no caller input can become a hash tag, a glob pattern or another tenant's key. The
layout itself is documented at the top of ``scripts/_common.lua``, with the two pub/sub
channels (``P:wake``, ``P:done``) whose names are built here too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from leaseq._core.validate import QUEUE_NAME
from leaseq.errors import ConfigurationError, InvalidArgument, InvalidQueueName

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,39}")

# The order of a queue's key GROUP in every script's KEYS: PARTS in scripts/_common.lua.
QUEUE_PARTS = ("job:", "jobs", "ready", "delayed", "running", "dead", "completed",
               "cancelled", "discarded", "unique", "paused", "settings", "finished", "buried")
SETTINGS = QUEUE_PARTS.index("settings")
_GLOB = re.compile(r"([*?\[\]\\])")
_FLOW_ID = re.compile(r"[0-9a-f]{32}")


class Keys:
    """Key names under one prefix: ``{P}:...`` for the global keys, ``{P:Q}:...`` for
    queue ``Q``'s keys (the braces are the Redis Cluster hash tag); and ``wake``, the
    wake-up channel ``P:wake`` (messages: a queue name; _listen.py subscribes), and
    ``done``, ``P:done`` (messages: ids of jobs that finished, comma-separated)."""

    def __init__(self, prefix: str) -> None:
        if not _PREFIX.fullmatch(prefix):
            raise ConfigurationError(f"table_prefix {prefix!r} cannot name Redis keys")
        self.prefix = prefix
        self.ids = f"{{{prefix}}}:ids"
        # The server that last handed out ids and the epoch (scripts/epoch.lua, §59).
        self.epoch = f"{{{prefix}}}:epoch"
        self.index = f"{{{prefix}}}:index"
        self.queues = f"{{{prefix}}}:queues"
        self.configured = f"{{{prefix}}}:configured"
        self.flows = f"{{{prefix}}}:flows"
        # unique_scope="global": key -> id of its last holder (scripts/enqueue.lua).
        self.global_keys = f"{{{prefix}}}:global"
        # Redis Cluster only: key -> when its holder reserved it, µs (scripts/allocate.lua).
        self.global_at = f"{{{prefix}}}:global_at"
        # configure_server's settings (field max_queues).
        self.server = f"{{{prefix}}}:server"
        # Not a key: the pub/sub channel on which scripts that make jobs due now publish
        # the queue's name (``wake`` in scripts/_common.lua builds the same name from a
        # queue's "{P:Q}:job:" key prefix). Pub/sub channels have no slots, so no hash tag.
        self.wake = f"{prefix}:wake"
        # The channel on which scripts that finish jobs publish their ids, once per call
        # (``publish_finished`` in scripts/_common.lua); waiters on results subscribe.
        self.done = f"{prefix}:done"

    def queue(self, name: str) -> list[str]:
        """The GROUP of keys of queue ``name``, in script order."""
        if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
            raise InvalidQueueName(f"invalid queue name {name!r} for a Redis key")
        base = f"{{{self.prefix}:{name}}}:"
        return [base + part for part in QUEUE_PARTS]

    def turn(self, queues: Sequence[str]) -> tuple[str, str]:
        """The turn key and relay list of the idle workers of a queue set (``worker/turn.py``):
        ``{P}:turn:<queues, sorted, comma-separated>`` and the same with ``:relay``."""
        names = sorted(set(queues))
        for name in names:
            self.queue(name)  # validates it
        base = f"{{{self.prefix}}}:turn:{','.join(names)}"
        return base, base + ":relay"

    def settings(self, name: str) -> str:
        """The settings hash of queue ``name``."""
        return self.queue(name)[SETTINGS]

    def job(self, queue: str, job_id: int) -> str:
        """The hash of one job."""
        return f"{self.queue(queue)[0]}{int(job_id)}"

    def with_job(self, queue: str, job_id: int) -> list[str]:
        """KEYS of a script on one job: its hash, then its queue's GROUP."""
        group = self.queue(queue)
        return [group[0] + str(int(job_id)), *group]

    def flow(self, flow_id: str) -> str:
        """The hash of one chain or group (``complete_step.lua`` documents its fields);
        ``flow_id`` is 32 hex digits, made by the client."""
        if not isinstance(flow_id, str) or not _FLOW_ID.fullmatch(flow_id):
            raise InvalidArgument(f"invalid flow id {flow_id!r}")
        return f"{{{self.prefix}}}:flow:{flow_id}"

    def handoff(self, queue: str) -> str:
        """Redis Cluster only: the HASH of queue ``queue``'s completed flow steps whose
        follow-up is not yet known to be enqueued (``complete_handoff.lua``); in the
        queue's slot, beside the jobs it names, outside the queue's key GROUP."""
        return self.queue(queue)[0][: -len("job:")] + "handoff"

    def void(self, queue: str) -> str:
        """Redis Cluster only: the HASH of queue ``queue``'s job ids that a takeover of an
        abandoned global key reservation voided (``void.lua``): ids that no enqueue may
        write any more. In the queue's slot, outside its key GROUP."""
        return self.queue(queue)[0][: -len("job:")] + "void"

    def pattern(self) -> str:
        """A ``SCAN MATCH`` pattern for every key under this prefix, and no other prefix's
        (the character after the prefix is always ``}`` or ``:``)."""
        return "\\{" + _GLOB.sub(r"\\\1", self.prefix) + "[:}]*"
