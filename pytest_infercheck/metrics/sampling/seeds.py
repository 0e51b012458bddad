"""How often two independent draws agree by chance: what a "two seeds gave the same output"
finding is worth.

At one position with distribution ``q`` (support ``q_i`` and a pooled ``tail``), two
independent draws agree with probability ``sum_i q_i^2 + sum_{j in tail} t_j^2``; the tail's
part is at most ``tail^2`` (its tokens' squares sum to at most the square of their sum), so
``agreement = sum_i q_i^2 + tail^2`` is an upper bound (exact with a full vocabulary). Over
independent positions (or independent samples) the chance that all agree is the product.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .params import Expected

__all__ = ["agreement_probability", "all_agree_probability"]


def agreement_probability(expected: Expected) -> float:
    """``sum_i q_i^2 + tail^2``: the probability (an upper bound with a tail) that two
    independent draws from ``expected`` give the same token."""
    values = [*expected.probs.values(), expected.tail]
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError("expected probabilities must be finite and >= 0")
    return min(1.0, sum(v * v for v in expected.probs.values()) + expected.tail**2)


def all_agree_probability(positions: Iterable[Expected]) -> float:
    """The product of :func:`agreement_probability` over independent ``positions`` (the
    chance that two honest seeds agree everywhere)."""
    out = 1.0
    for expected in positions:
        out *= agreement_probability(expected)
    return out
