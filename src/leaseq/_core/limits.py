"""Flow control arithmetic shared by the backends that decide it in Python (memory and
the SQL backends; Redis says the same in Lua, ``scripts/claim.lua``).

A queue's ``rate_per_sec`` is a token bucket of ``rate_burst`` tokens (default 1),
refilled continuously at ``rate_per_sec`` tokens a second by the database's clock; each
job started takes one. Its state is two stored values, the tokens left after the last
claim that spent any and when that was; no row stores a bucket that was never used, which
reads as full.
"""

from __future__ import annotations

import math

BURST = 1
"""Bucket size when ``rate_burst`` is not set."""


def tokens_now(
    rate: float, burst: int | None, tokens: float | None, elapsed: float | None
) -> float:
    """Tokens in a bucket ``elapsed`` seconds after it held ``tokens`` (None: never used,
    so full), capped at its size."""
    size = float(burst or BURST)
    if tokens is None or elapsed is None:
        return size
    return min(size, tokens + max(0.0, elapsed) * rate)


def allowance(
    limit: int, concurrency_limit: int | None, running: int, rate: float | None,
    tokens: float | None,
) -> int:
    """How many jobs one claim may start in a queue: ``limit``, cut to the room under
    ``concurrency_limit`` (``running`` jobs hold some) and to the whole tokens the bucket
    holds (``tokens`` as ``tokens_now`` gives them; ignored without a ``rate``)."""
    n = limit
    if concurrency_limit is not None:
        n = min(n, concurrency_limit - running)
    if rate is not None and tokens is not None:
        # A hair below a whole token counts as one: tokens refill by float arithmetic.
        n = min(n, math.floor(tokens + 1e-9))
    return max(0, n)


def token_wait(rate: float, tokens: float) -> float:
    """Seconds until a bucket holding ``tokens`` (now) holds a whole one."""
    return max(0.0, (1.0 - tokens) / rate)


def next_start(
    earliest: float | None, running: int, concurrency_limit: int | None,
    rate: float | None, tokens: float | None,
) -> float | None:
    """One queue's share of ``Backend.next_due``: seconds until one of its jobs may next
    be claimable, or None when nothing tells. ``earliest`` is the seconds until its
    earliest available job is due (<= 0: one is due now; None: it has none), ``tokens`` the
    bucket's tokens now."""
    if earliest is None:
        return None
    if earliest > 0:
        wait = earliest
        if rate is not None and tokens is not None:
            wait = max(wait, token_wait(rate, tokens))  # the job waits for both
        return wait
    if concurrency_limit is not None and running >= concurrency_limit:
        return None  # a slot frees when a job ends: the worker hears of its own
    if rate is not None and tokens is not None:
        return token_wait(rate, tokens)
    return 0.0


def after_pause(wait: float | None, pause_left: float | None) -> float | None:
    """``next_start``'s ``wait`` for a queue paused until ``pause_left`` seconds from now
    (None or <= 0: no timed pause in force): nothing starts before the pause ends, and
    the bucket goes on filling meanwhile, so the later of the two is when a job may
    start. None stays None: with nothing waiting, the pause's end wakes no one."""
    if wait is None or pause_left is None or pause_left <= 0:
        return wait
    return max(wait, pause_left)


def snoozed_too_often(snoozes: int, max_snoozes: int) -> str:
    """The error of a job a snooze sent dead: it had been snoozed ``snoozes`` times, its
    queue's ``max_snoozes`` (scripts/snooze.lua writes the same text)."""
    return f"snoozed {snoozes} times, the queue's max_snoozes={max_snoozes}; not again"
