"""Holm's step-down procedure across the items of one check."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["holm"]


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which hypotheses Holm's step-down rejects at family-wise level ``alpha``, in the order
    given.

    Sort the ``m`` p-values ascending, ``p_(1) <= ... <= p_(m)``; reject ``H_(1) ... H_(j)``
    for the largest ``j`` such that ``p_(i) <= alpha / (m - i + 1)`` for every ``i <= j``
    (stop at the first that fails). Ties keep their given order. Raises ``ValueError`` on a
    p-value that is NaN or outside [0, 1], or ``alpha`` outside (0, 1).
    """
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    values = [float(p) for p in p_values]
    for i, p in enumerate(values):
        if math.isnan(p) or not (0.0 <= p <= 1.0):
            raise ValueError(f"p-value {i} is not in [0, 1] ({p!r})")
    m = len(values)
    rejected = [False] * m
    for rank, index in enumerate(sorted(range(m), key=lambda i: values[i])):
        if values[index] > alpha / (m - rank):
            break
        rejected[index] = True
    return rejected
