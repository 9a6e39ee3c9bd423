"""Client settings: one frozen dataclass, validated on creation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from leaseq._core.backoff import Backoff
from leaseq.errors import ConfigurationError

_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,39}")


@dataclass(frozen=True)
class Settings:
    """How a ``Queue`` behaves. Pass fields as keyword arguments to ``connect``.

    Attributes:
        lease: Default lease length in seconds for ``dequeue``. Defaults to 30.
        max_attempts: Default attempts per job before it goes dead. Defaults to 5.
        max_payload_bytes: Cap on an encoded payload or result. Defaults to 1 MiB.
        backoff: Retry delays for ``nack`` without an explicit delay. Defaults to
            ``Backoff()``: 1 s doubling to 1 h, 10 % jitter.
        pool_size: Most connections the client keeps open. Defaults to 10.
        connect_timeout: Seconds to wait for a connection. Defaults to 10.
        reclaim_interval: ``dequeue`` also reclaims expired leases of the queues it
            reads, at most once per this many seconds; 0 reclaims on every dequeue and
            None never (then run ``reclaim`` yourself). Defaults to 1.
        table_prefix: Prefix of leaseq's table names (or Redis keys), so several
            independent queues can share one database. Defaults to ``"leaseq_"``.
        group_commit: Concurrent ``enqueue`` calls of this client (threads of a
            ``Queue``, tasks of an ``AsyncQueue``) that arrive while another one is being
            written share the next transaction, each returning after its commit with its
            own result or error; a lone enqueue is written at once, as without it.
            ``conn=`` enqueues never take part. False writes each call in a transaction
            of its own. Defaults to True (the memory backend, which has no commit to
            share, always writes directly).
        listen_url: PostgreSQL only: the URL the push wake-ups' LISTEN connections use
            (workers, blocking ``dequeue``, result waits), reaching the server directly or
            through a session-mode pooler. Needed for push behind a transaction pooler
            (``pgbouncer=true`` in the URL), which polls without it; the URL's own
            ``listen_url=`` parameter (URL-encoded) does the same. Defaults to None: the
            client's URL.
    """

    lease: float = 30.0
    max_attempts: int = 5
    max_payload_bytes: int = 1024 * 1024
    backoff: Backoff = field(default_factory=Backoff)
    pool_size: int = 10
    connect_timeout: float = 10.0
    reclaim_interval: float | None = 1.0
    table_prefix: str = "leaseq_"
    group_commit: bool = True
    listen_url: str | None = field(default=None, repr=False)  # may hold a password

    def __post_init__(self) -> None:
        def bad(name: str, want: str) -> ConfigurationError:
            return ConfigurationError(f"{name} must be {want}, got {getattr(self, name)!r}")

        if not (isinstance(self.lease, (int, float)) and self.lease > 0):
            raise bad("lease", "a positive number of seconds")
        if not (isinstance(self.max_attempts, int) and self.max_attempts >= 1):
            raise bad("max_attempts", "an integer >= 1")
        if not (isinstance(self.max_payload_bytes, int) and self.max_payload_bytes >= 16):
            raise bad("max_payload_bytes", "an integer >= 16")
        if not isinstance(self.backoff, Backoff):
            raise bad("backoff", "a leaseq.Backoff")
        if not (isinstance(self.pool_size, int) and self.pool_size >= 1):
            raise bad("pool_size", "an integer >= 1")
        if not (isinstance(self.connect_timeout, (int, float)) and self.connect_timeout > 0):
            raise bad("connect_timeout", "a positive number of seconds")
        if self.reclaim_interval is not None and not (
            isinstance(self.reclaim_interval, (int, float)) and self.reclaim_interval >= 0
        ):
            raise bad("reclaim_interval", "None or a number of seconds >= 0")
        if not (isinstance(self.table_prefix, str) and _PREFIX.fullmatch(self.table_prefix)):
            raise bad("table_prefix", "1-40 characters of a-z 0-9 _, not starting with a digit")
        if not isinstance(self.group_commit, bool):
            raise bad("group_commit", "True or False")
        if self.listen_url is not None and not (
            isinstance(self.listen_url, str) and "://" in self.listen_url
        ):
            raise ConfigurationError("listen_url must be None or a postgresql:// URL")
