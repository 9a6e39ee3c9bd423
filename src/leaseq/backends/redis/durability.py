"""Replicated writes: the URL options ``wait_replicas``, ``wait_timeout`` and ``wait_aof``.

Redis replicates asynchronously: a primary answers a write before any replica has it, and
a failover to a replica that had not caught up loses it. With ``wait_replicas=N`` every
call that writes is followed by ``WAIT N wait_timeout`` (with ``wait_aof=1``: ``WAITAOF 1
N wait_timeout``) before it returns. ``WAIT`` counts the writes of the connection it is
sent on, so the runners send the write and the ``WAIT`` together on one connection, in one
non-transactional pipeline (one round trip); on a cluster, to the node that owns the
keys' slot. When too few replicas confirm in time the call raises ``NotReplicated``
after the whole operation ran on the primary, carrying what the primary answered.

Which calls write is decided by what they are, listed here as the reads: any other script
or command is taken for a write, so a new one is waited on until it is listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from leaseq.backends.redis.ops import Call
from leaseq.errors import ConfigurationError, NotReplicated

OPTIONS = ("wait_replicas", "wait_timeout", "wait_aof")
DEFAULT_TIMEOUT_MS = 1000
WAITAOF_VERSION = (7, 2)
READ_SCRIPTS = frozenset({"configs", "get", "heads", "list", "locate", "next_due", "peek",
                          "queues", "stats",
                          "priority_counts"})
Shortfall = tuple[int, "bool | None", str]
"""A write too few confirmed: replicas that did, fsynced locally (wait_aof), the node."""
READ_COMMANDS = frozenset({"PING", "INFO", "CONFIG GET", "SCRIPT LOAD", "TIME", "HGET",
                           "SCAN"})


@dataclass(frozen=True)
class Durability:
    """What every write waits for: ``replicas`` replicas (and with ``aof`` the primary's
    own append-only-file fsync), for at most ``timeout_ms`` (0: without limit)."""

    replicas: int
    timeout_ms: int
    aof: bool = False

    def waits(self, call: Call) -> bool:
        """True when ``call`` may write, so must be waited on."""
        if call.command:
            return call.name not in READ_COMMANDS
        return call.name not in READ_SCRIPTS

    def command(self) -> tuple[str | int, ...]:
        """The ``WAIT`` (or ``WAITAOF``) sent after each write."""
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def shortfall(self, reply: Any) -> tuple[int, bool | None] | None:
        """``(replicas acknowledged, fsynced locally)`` when ``reply`` falls short."""
        if self.aof:
            local, replicas = int(reply[0]), int(reply[1])
            if local < 1 or replicas < self.replicas:
                return replicas, local >= 1
            return None
        acknowledged = int(reply)
        return (acknowledged, None) if acknowledged < self.replicas else None

    def error(self, shortfalls: Sequence[Shortfall], result: Any) -> NotReplicated:
        """The ``NotReplicated`` for an operation whose writes fell short."""
        acknowledged = min(n for n, _, _ in shortfalls)
        fsynced = None if not self.aof else all(bool(f) for _, f, _ in shortfalls)
        where = ", ".join(dict.fromkeys(node for _, _, node in shortfalls))
        what = f"{acknowledged} of {self.replicas} replicas"
        if fsynced is False:
            what += " (and not the primary's own append-only file)"
        return NotReplicated(
            f"the write WAS made on the Redis primary at {where}, but only {what} "
            f"confirmed it within {self.timeout_ms} ms (wait_replicas): it may not survive "
            "a failover. An enqueue with a unique_key can be retried safely (it returns "
            "the same job), and so can an ack (a repeated ack under the same lease is a "
            "no-op that succeeds); a plain enqueue retried may leave two jobs.",
            acknowledged, self.replicas, fsynced, result,
        )


def split_options(url: str) -> tuple[str, Durability | None]:
    """``url`` without the durability options, and what they ask for (None: nothing).

    redis-py turns unknown query arguments into connection keywords and fails on them,
    so they are taken out here, the other arguments kept as they were written."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, None
    kept: list[str] = []
    found: dict[str, str] = {}
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name in OPTIONS:
            found[name] = unquote(value)
        elif part:
            kept.append(part)
    if not found:
        return url, None
    stripped = base + ("?" + "&".join(kept) if kept else "")
    replicas = count(found, "wait_replicas", 0)
    timeout = count(found, "wait_timeout", DEFAULT_TIMEOUT_MS)
    aof = count(found, "wait_aof", 0)
    if aof > 1:
        raise ConfigurationError(f"wait_aof must be 0 or 1, not {found['wait_aof']!r}")
    if not replicas and not aof:
        if "wait_timeout" in found and "wait_replicas" not in found:
            raise ConfigurationError("wait_timeout needs wait_replicas=N (or wait_aof=1)")
        return stripped, None  # wait_replicas=0: nothing to wait for, no WAIT sent
    return stripped, Durability(replicas, timeout, bool(aof))


def count(found: dict[str, str], name: str, default: int) -> int:
    """The option ``name`` as a non-negative integer (``default`` when absent)."""
    if name not in found:
        return default
    text = found[name].strip()
    if not text.isdecimal() or not text.isascii():
        raise ConfigurationError(
            f"{name} must be a non-negative integer, not {found[name]!r}")
    return int(text)


def check_version(durability: Durability | None, version: tuple[int, ...],
                  where: str) -> None:
    """``wait_aof`` needs ``WAITAOF``, new in Redis 7.2."""
    if durability is None or not durability.aof:
        return
    if not version or version < WAITAOF_VERSION:
        shown = ".".join(map(str, version)) or "unknown"
        raise ConfigurationError(
            f"wait_aof=1 needs WAITAOF, Redis 7.2+; Redis at {where} is version {shown}. "
            "Use wait_replicas=N alone, or upgrade the server."
        )
