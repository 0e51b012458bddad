"""The chi-square distribution without scipy.

* ``Q(a, x) = Gamma(a, x) / Gamma(a)`` (regularized upper incomplete gamma): the series
  ``P(a, x) = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))`` and ``Q = 1 - P``
  for ``x < a + 1``, else the continued fraction ``Q(a, x) = x^a e^-x / Gamma(a) *
  1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...)))`` evaluated by
  the modified Lentz method (Numerical Recipes 6.2), relative precision about 1e-14.
* chi-square survival ``P(X > x) = Q(k / 2, x / 2)``; its inverse by bisection.
* noncentral chi-square survival (``k`` degrees of freedom, noncentrality ``lambda``): the
  Poisson mixture ``sum_j e^(-lambda/2) (lambda/2)^j / j! * Q(k/2 + j, x/2)``, the ``Q``
  computed upward by ``Q(a + 1, y) = Q(a, y) + y^a e^-y / Gamma(a + 1)``.
"""

from __future__ import annotations

import math

__all__ = ["chi2_isf", "chi2_sf", "ncx2_sf", "regularized_gamma_q"]

_EPS = 1e-15
_TINY = 1e-300
_MAX_ITER = 100_000


def _check(a: float, x: float) -> None:
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"shape must be finite and > 0, got {a!r}")
    if math.isnan(x) or x < 0:
        raise ValueError(f"x must be >= 0, got {x!r}")


def _log_prefactor(a: float, x: float) -> float:
    """``log(x^a e^-x / Gamma(a))``."""
    return a * math.log(x) - x - math.lgamma(a)


def _series_p(a: float, x: float) -> float:
    term = 1.0 / a
    total = term
    ap = a
    for _ in range(_MAX_ITER):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(_log_prefactor(a, x))


def _continued_q(a: float, x: float) -> float:
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < _TINY:
            d = _TINY
        c = b + an / c
        if abs(c) < _TINY:
            c = _TINY
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(_log_prefactor(a, x)) * h


def regularized_gamma_q(a: float, x: float) -> float:
    """``Q(a, x) = Gamma(a, x) / Gamma(a)``, the regularized upper incomplete gamma
    (``Q(a, 0) = 1``; ``Q(a, inf) = 0``)."""
    _check(a, x)
    if x == 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    if x < a + 1.0:
        return max(0.0, 1.0 - _series_p(a, x))
    return min(1.0, _continued_q(a, x))


def chi2_sf(x: float, dof: int) -> float:
    """``P(X > x)`` for ``X ~ chi2(dof)``: ``Q(dof / 2, x / 2)`` (1 for ``x <= 0``)."""
    if dof < 1:
        raise ValueError(f"dof must be >= 1, got {dof!r}")
    if math.isnan(x):
        raise ValueError("x is NaN")
    if x <= 0:
        return 1.0
    return regularized_gamma_q(dof / 2.0, x / 2.0)


def chi2_isf(q: float, dof: int) -> float:
    """The ``x`` with ``chi2_sf(x, dof) == q`` (the critical value at level ``q``), by
    bisection to a relative width of 1e-12."""
    if not (0 < q < 1):
        raise ValueError(f"q must be in (0, 1), got {q!r}")
    lo, hi = 0.0, float(dof) + 10.0 * math.sqrt(2.0 * dof) + 10.0
    while chi2_sf(hi, dof) > q:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if chi2_sf(mid, dof) > q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0


def ncx2_sf(x: float, dof: int, nc: float) -> float:
    """``P(X > x)`` for a noncentral chi-square with ``dof`` degrees of freedom and
    noncentrality ``nc`` (the Poisson mixture of the module docstring, summed until the
    Poisson weights left are below 1e-14)."""
    if dof < 1:
        raise ValueError(f"dof must be >= 1, got {dof!r}")
    if not (math.isfinite(nc) and nc >= 0):
        raise ValueError(f"noncentrality must be finite and >= 0, got {nc!r}")
    if math.isnan(x):
        raise ValueError("x is NaN")
    if x <= 0:
        return 1.0
    if nc == 0:
        return chi2_sf(x, dof)
    half, y = nc / 2.0, x / 2.0
    a = dof / 2.0
    q = regularized_gamma_q(a, y)
    log_w = -half
    total = math.exp(log_w) * q
    used = math.exp(log_w)
    j = 0
    while 1.0 - used > 1e-14 and j < _MAX_ITER:
        # Q(a + 1, y) = Q(a, y) + y^a e^-y / Gamma(a + 1)
        q = min(1.0, q + math.exp(a * math.log(y) - y - math.lgamma(a + 1.0)))
        a += 1.0
        j += 1
        log_w += math.log(half) - math.log(j)
        w = math.exp(log_w)
        total += w * q
        used += w
        if j > half and w < 1e-17:
            break
    return min(1.0, total + max(0.0, 1.0 - used))
