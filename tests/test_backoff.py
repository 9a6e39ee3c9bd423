"""Backoff: capped exponential with jitter inside its bounds, for any attempt count."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import leaseq


@given(
    attempt=st.integers(min_value=-5, max_value=10**9),
    base=st.floats(min_value=0, max_value=1000),
    extra=st.floats(min_value=0, max_value=10**6),
    jitter=st.floats(min_value=0, max_value=0.99),
    seed=st.integers(),
)
def test_delay_is_capped_and_jitter_stays_in_bounds(
    attempt: int, base: float, extra: float, jitter: float, seed: int
) -> None:
    b = leaseq.Backoff(base=base, cap=base + extra, jitter=jitter)
    delay = b.delay(attempt, random.Random(seed))
    raw = min(b.cap, base * 2.0 ** max(0, min(attempt - 1, 64)))
    assert raw * (1 - jitter) - 1e-9 <= delay <= raw * (1 + jitter) + 1e-9
    assert delay <= b.cap * (1 + jitter) + 1e-9


def test_delay_doubles_until_the_cap() -> None:
    b = leaseq.Backoff(base=1, cap=10, jitter=0)
    assert [b.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


@pytest.mark.parametrize(
    "kwargs", [{"base": -1}, {"base": 5, "cap": 1}, {"jitter": 1.0}, {"jitter": -0.1}]
)
def test_bad_backoff_names_the_field(kwargs: dict[str, float]) -> None:
    with pytest.raises(leaseq.InvalidArgument, match="backoff"):
        leaseq.Backoff(**kwargs)
