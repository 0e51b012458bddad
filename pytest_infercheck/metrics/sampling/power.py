"""What a goodness-of-fit test could have seen: the detectable total-variation distance.

A level-``alpha`` test on ``k`` cells with ``n`` samples rejects when ``G > c``, ``c`` the
chi-square(``k - 1``) critical value (times the Williams factor ``q`` when the statistic is
divided by it). Under an alternative ``q_i = p_i + delta_i``, ``G`` is approximately
noncentral chi-square(``k - 1``) with noncentrality ``lambda = n * sum_i delta_i^2 / p_i``
(Pearson's, the usual local approximation). Among alternatives at total variation
``d = sum_i |delta_i| / 2``, ``lambda`` is smallest when mass ``d`` moves from a set ``B`` to
its complement ``A`` in proportion to ``p``: ``lambda = n d^2 (1 / P(A) + 1 / P(B)) >= 4 n
d^2`` (Cauchy-Schwarz; equality at ``P(A) = 1/2``). So every alternative at distance
``d >= sqrt(lambda* / (4 n))`` has noncentrality ``>= lambda*``, where ``lambda*`` solves
``P(ncx2(k - 1, lambda*) > c) = power``: that ``d`` is reported (conservative when no split
reaches 1/2).

Mass the test cannot see (``hidden``: a pooled cell of several tokens or of the unknown tail,
whose inside can be rearranged freely) adds to it: ``TV(p, q) <= TV_cells(p, q) + hidden``,
so ``d + hidden`` is what every alternative beyond it is detected at. One cell (``k = 1``): only
a sample outside the support can reveal a change, seen with probability ``1 - (1 - d)^n``;
``d = 1 - (1 - power)^(1 / n)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from .gamma import chi2_isf, ncx2_sf

__all__ = ["detectable_tv", "noncentrality_for_power"]


@lru_cache(maxsize=4096)
def noncentrality_for_power(critical: float, dof: int, power: float) -> float:
    """The ``lambda`` with ``P(ncx2(dof, lambda) > critical) == power`` (bisection)."""
    if not (0 < power < 1):
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    lo, hi = 0.0, 1.0
    while ncx2_sf(critical, dof, hi) < power:
        lo, hi = hi, hi * 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if ncx2_sf(critical, dof, mid) < power:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return (lo + hi) / 2.0


def detectable_tv(
    n: int,
    cells: Sequence[float],
    alpha: float,
    *,
    power: float = 0.8,
    hidden: float = 0.0,
    williams: bool = True,
) -> float:
    """The total-variation distance beyond which every alternative is detected with
    probability >= ``power`` by the level-``alpha`` G-test with ``n`` samples over ``cells``
    (the expected probabilities of the test's cells, after pooling), plus the ``hidden``
    mass (module docstring), capped at 1. ``williams``: the statistic is divided by
    ``1 + (k + 1) / (6 n)`` (as :func:`~.fit.goodness_of_fit` does)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not (0 <= hidden <= 1):
        raise ValueError(f"hidden must be in [0, 1], got {hidden!r}")
    k = sum(1 for c in cells if c > 0)
    if k <= 1:
        d = 1.0 - (1.0 - power) ** (1.0 / n)
        return min(1.0, d + hidden)
    critical = chi2_isf(alpha, k - 1)
    if williams:
        critical *= 1.0 + (k + 1) / (6.0 * n)
    lam = noncentrality_for_power(critical, k - 1, power)
    return min(1.0, math.sqrt(lam / (4.0 * n)) + hidden)


def samples_needed(tv: float, cells: int, alpha: float, *, power: float = 0.8) -> int:
    """The samples the G-test over ``cells`` cells needs so that every alternative at total
    variation ``tv`` is detected with probability >= ``power`` at ``alpha``:
    ``n = ceil(lambda* / (4 tv^2))`` (the inverse of :func:`detectable_tv` without pooling
    or Williams' factor, which adds ``(k + 1) / 6`` samples or so). One cell:
    ``ceil(log(1 - power) / log(1 - tv))`` (a sample outside the support)."""
    if not (0 < tv <= 1):
        raise ValueError(f"tv must be in (0, 1], got {tv!r}")
    if not (0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if cells <= 1:
        if tv == 1:
            return 1
        return max(1, math.ceil(math.log(1 - power) / math.log(1 - tv)))
    lam = noncentrality_for_power(chi2_isf(alpha, cells - 1), cells - 1, power)
    return max(1, math.ceil(lam / (4.0 * tv * tv)))
