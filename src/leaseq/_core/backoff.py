"""Retry delays: capped exponential backoff with multiplicative jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from leaseq.errors import InvalidArgument


@dataclass(frozen=True)
class Backoff:
    """``min(cap, base * 2**(attempt-1)) * uniform(1-jitter, 1+jitter)`` seconds.

    Attributes:
        base: Delay after the first failed attempt, in seconds. Defaults to 1.
        cap: Upper bound before jitter, in seconds. Defaults to 3600.
        jitter: Relative spread, 0 <= jitter < 1; spreads retries of jobs that failed
            together so they do not return together. Defaults to 0.1.
    """

    base: float = 1.0
    cap: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not self.base >= 0:
            raise InvalidArgument(f"backoff base must be >= 0, got {self.base!r}")
        if not self.cap >= self.base:
            raise InvalidArgument(f"backoff cap must be >= base, got {self.cap!r}")
        if not 0 <= self.jitter < 1:
            raise InvalidArgument(f"backoff jitter must be in [0, 1), got {self.jitter!r}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay in seconds before retrying after failed attempt number ``attempt``."""
        # 2**n overflows a float past n=1023; any cap is reached long before n=64.
        exponent = min(max(0, attempt - 1), 64)
        raw = min(self.cap, self.base * 2.0**exponent)
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return raw * spread


HEADER = "leaseq-backoff"
"""The header a job enqueued with ``Task.options(backoff=...)`` carries: its own retry
delays, which a worker prefers to the queue's stored backoff (docs/queue-settings.md)."""


def to_header(backoff: Backoff) -> str:
    """``backoff`` as the text of a ``leaseq-backoff`` header: ``base,cap,jitter``."""
    return f"{backoff.base!r},{backoff.cap!r},{backoff.jitter!r}"


def from_header(headers: dict[str, str] | None) -> Backoff | None:
    """The backoff a job's ``leaseq-backoff`` header names; None when it has none, or one
    that does not parse (then the queue's or the app's backoff applies)."""
    text = headers.get(HEADER) if headers else None
    if text is None:
        return None
    try:
        base, cap, jitter = (float(part) for part in text.split(","))
        return Backoff(base, cap, jitter)
    except (ValueError, InvalidArgument):
        return None
