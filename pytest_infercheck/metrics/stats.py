"""Small statistics helpers: confidence intervals, exact tests, clustered standard errors.

Only the standard library and numpy are used (no scipy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DistributionSummary",
    "clustered_mean_se",
    "mcnemar_exact",
    "normal_quantile",
    "percentile",
    "rms",
    "summarize",
    "wilson_interval",
    "wilson_min_trials",
]

# Coefficients of Acklam's rational approximation of the inverse normal CDF
# (relative error < 1.15e-9 before the refinement step below).
_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_B = (
    -5.447609879822406e01,
    1.615858368580409e02,
    -1.556989798598866e02,
    6.680131188771972e01,
    -1.328068155288572e01,
)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (
    7.784695709041462e-03,
    3.224671290700398e-01,
    2.445134137142996e00,
    3.754408661907416e00,
)
_P_LOW = 0.02425


def _poly(coeffs: Sequence[float], x: float) -> float:
    acc = 0.0
    for c in coeffs:
        acc = acc * x + c
    return acc


def normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF: the ``z`` with ``Phi(z) = p``, for ``0 < p < 1``.

    Acklam's rational approximation followed by one Halley step on
    ``Phi(z) = erfc(-z / sqrt(2)) / 2``, which brings it to double precision.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < _P_LOW:
        q = math.sqrt(-2.0 * math.log(p))
        x = _poly(_C, q) / (_poly(_D, q) * q + 1.0)
    elif p <= 1.0 - _P_LOW:
        q = p - 0.5
        r = q * q
        x = _poly(_A, r) * q / (_poly(_B, r) * r + 1.0)
    else:
        q = math.sqrt(-2.0 * math.log1p(-p))
        x = -_poly(_C, q) / (_poly(_D, q) * q + 1.0)
    err = 0.5 * math.erfc(-x / math.sqrt(2.0)) - p
    u = err * math.sqrt(2.0 * math.pi) * math.exp(x * x / 2.0)
    return x - u / (1.0 + x * u / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``k / n``.

    With ``p = k / n`` and ``z = Phi^-1(1 - (1 - confidence) / 2)``::

        centre = (p + z^2 / (2n)) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / (4 n^2))
        (lower, upper) = (centre - half, centre + half)

    clamped to ``[0, 1]`` (the lower bound is exactly 0 when ``k = 0`` and the upper bound
    exactly 1 when ``k = n``). ``n == 0`` gives the uninformative ``(0.0, 1.0)``.
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return (0.0, 1.0)
    z = normal_quantile(1.0 - (1.0 - confidence) / 2.0)
    z2 = z * z
    p = successes / n
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    lower = 0.0 if successes == 0 else max(0.0, centre - half)
    upper = 1.0 if successes == n else min(1.0, centre + half)
    return (lower, upper)


def wilson_min_trials(max_rate: float, confidence: float = 0.95) -> int | None:
    """The fewest trials ``n`` whose Wilson upper bound at zero successes is at most
    ``max_rate``: below it a gate on that bound fails even when nothing happens.

    At ``k = 0`` the upper bound of :func:`wilson_interval` is ``z^2 / (n + z^2)``, so
    ``n >= z^2 (1 - max_rate) / max_rate``; the smallest such integer (at least 1), checked
    against :func:`wilson_interval` itself so that float rounding at the boundary decides as
    the gate does. None when ``max_rate <= 0``: no number of trials is enough.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if max_rate <= 0.0:
        return None
    z = normal_quantile(1.0 - (1.0 - confidence) / 2.0)
    n = max(1, math.ceil(z * z * (1.0 - max_rate) / max_rate))
    while n > 1 and wilson_interval(0, n - 1, confidence)[1] <= max_rate:
        n -= 1
    while wilson_interval(0, n, confidence)[1] > max_rate:
        n += 1
    return n


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar test on the discordant pair counts.

    ``b`` = pairs correct on the baseline and wrong on the test engine, ``c`` = the reverse.
    Under H0 the discordant pairs split ``Binomial(b + c, 1/2)``, so::

        p = min(1, 2 * sum_{i=0}^{min(b, c)} C(b + c, i) / 2^(b + c))

    ``b == c == 0`` gives 1.0. Computed with exact integers, so it is safe for large counts.
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def _pooled(clusters: Sequence[ArrayLike]) -> list[NDArray[np.float64]]:
    return [np.asarray(g, dtype=np.float64).ravel() for g in clusters]


def clustered_mean_se(clusters: Sequence[ArrayLike]) -> tuple[float, float]:
    """Pooled mean of all values and its cluster-robust standard error (clusters = prompts).

    With ``N`` values in total and ``G`` non-empty clusters::

        mean = sum_i x_i / N
        se   = sqrt(G / (G - 1) * sum_g (sum_{i in g} (x_i - mean))^2) / N

    Positions within one prompt are correlated, so the naive ``std / sqrt(N)`` would be too
    small; this treats each prompt as the independent unit. ``G < 2`` gives ``se = nan`` and
    no values at all gives ``(nan, nan)``. Nothing is skipped: a NaN value makes the mean
    NaN, an infinite value makes it ``inf`` (NaN with both ``+inf`` and ``-inf``), and the
    standard error is then ``nan``.
    """
    groups = [g for g in _pooled(clusters) if g.size > 0]
    total = sum(g.size for g in groups)
    if total == 0:
        return (math.nan, math.nan)
    sums = [float(g.sum()) for g in groups]
    if all(math.isfinite(x) for x in sums):
        mean = math.fsum(sums) / total
    else:  # fsum raises on inf + -inf; a plain sum gives nan there and keeps nan / inf
        with np.errstate(invalid="ignore"):
            mean = float(np.sum(sums)) / total
    n_groups = len(groups)
    if n_groups < 2:
        return (mean, math.nan)
    with np.errstate(invalid="ignore"):
        scores = [float((g - mean).sum()) for g in groups]
    variance = n_groups / (n_groups - 1) * math.fsum(s * s for s in scores)
    return (mean, math.sqrt(variance) / total)


def percentile(values: ArrayLike, q: float) -> float:
    """``q``-th percentile (0..100) with numpy's default linear interpolation.

    For sorted values ``x_0 <= ... <= x_{n-1}`` and ``h = (n - 1) * q / 100``::

        percentile = x_floor(h) + (h - floor(h)) * (x_ceil(h) - x_floor(h))

    which equals ``np.percentile`` on finite data, but stays correct when some values are
    ``+inf`` (``np.percentile`` returns nan there, e.g. for the median of ``[1, 2, inf]``).
    Empty input gives nan, and so does any NaN value (a NaN is never sorted out of the way).
    """
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q}")
    if x.size == 0 or math.isnan(float(x[-1])):  # np.sort puts NaN last
        return math.nan
    h = (x.size - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, x.size - 1)
    frac = h - lo
    x_lo, x_hi = float(x[lo]), float(x[hi])
    if frac == 0.0 or x_lo == x_hi:
        return x_lo
    return x_lo + frac * (x_hi - x_lo)


@dataclass(frozen=True)
class DistributionSummary:
    """Summary of a pooled per-position metric (e.g. KL) over several prompts.

    ``mean`` and ``se`` come from :func:`clustered_mean_se`; the percentiles use linear
    interpolation over the pooled values (:func:`percentile`).

    Fail closed: one NaN value makes ``mean``, ``se``, the percentiles and ``max`` NaN (no
    value is skipped), and ``non_finite`` lists every NaN / ``+inf`` / ``-inf`` value as
    ``(cluster index, index within the cluster)``, so callers can name them.
    """

    n: int
    mean: float
    se: float
    median: float
    p90: float
    p99: float
    max: float
    non_finite: tuple[tuple[int, int], ...] = ()

    @property
    def n_non_finite(self) -> int:
        return len(self.non_finite)


def summarize(clusters: Sequence[ArrayLike]) -> DistributionSummary:
    """Summarise the values of all clusters pooled together.

    ``n`` is the number of values; everything else is nan when there are none. See
    :class:`DistributionSummary` for NaN and infinite values.
    """
    groups = _pooled(clusters)
    pooled = np.concatenate(groups) if groups else np.zeros(0, dtype=np.float64)
    if pooled.size == 0:
        nan = math.nan
        return DistributionSummary(n=0, mean=nan, se=nan, median=nan, p90=nan, p99=nan, max=nan)
    mean, se = clustered_mean_se(groups)
    return DistributionSummary(
        n=int(pooled.size),
        mean=mean,
        se=se,
        median=percentile(pooled, 50.0),
        p90=percentile(pooled, 90.0),
        p99=percentile(pooled, 99.0),
        max=float(np.max(pooled)),  # np.max propagates NaN wherever it is
        non_finite=tuple(
            (c, int(i)) for c, g in enumerate(groups) for i in np.flatnonzero(~np.isfinite(g))
        ),
    )


def rms(values: ArrayLike) -> float:
    """Root mean square ``sqrt(sum_i x_i^2 / n)``; nan for no values."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return math.nan
    return float(np.sqrt(np.mean(x * x)))
