"""The bound a measured false-failure rate is held to: the exact one-sided binomial bound.

A test of size at most ``alpha`` judged ``n`` times fails ``X ~ Binomial(n, s)`` times with
``s <= alpha``; :func:`binomial_upper` is the smallest ``c`` with ``P(Binomial(n, alpha) <= c)
>= confidence``, so a test of size <= alpha exceeds it with probability below ``1 -
confidence``. Used by ``tests/unit/test_sampling_size.py`` and the false-failure integration
tests."""

from __future__ import annotations

import math

CONFIDENCE = 0.999
"""The confidence of the bound every false-failure test states."""


def binomial_upper(n: int, alpha: float, confidence: float = CONFIDENCE) -> int:
    """The smallest ``c`` with ``P(Binomial(n, alpha) <= c) >= confidence`` (the pmf summed
    in log space: ``log C(n, x) + x log alpha + (n - x) log(1 - alpha)``)."""
    if not (0 < alpha < 1 and 0 < confidence < 1 and n >= 1):
        raise ValueError(f"bad arguments ({n}, {alpha}, {confidence})")
    total = 0.0
    for x in range(n + 1):
        log_pmf = (
            math.lgamma(n + 1)
            - math.lgamma(x + 1)
            - math.lgamma(n - x + 1)
            + x * math.log(alpha)
            + (n - x) * math.log1p(-alpha)
        )
        total += math.exp(log_pmf)
        if total >= confidence:
            return x
    return n
