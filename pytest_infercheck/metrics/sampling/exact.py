"""A p-value for the G statistic that is valid at the counts the check draws.

Under the null the ``k`` cells' counts (after pooling) are ``O ~ Multinomial(m, pi)`` and
``G = 2 sum_i O_i ln(O_i / (m pi_i))``. The chi-square approximation of ``G``'s tail (with
Williams' correction) runs above its nominal level at these counts: 174 false failures in
3,200 exact multinomial draws at 0.05, i.e. 0.0544. :func:`g_test_p_value` returns ``p`` with
``P(p <= u) <= u`` for every level ``u`` up to ``screen``, by construction but for one
stated condition on the far tail:

1. ``p_chi2 = P(chi2(k - 1) >= G / q)`` above ``screen``: ``p = p_chi2``. The item passes at
   every level up to ``screen`` whatever the exact tail is, so this branch adds nothing to the
   size at those levels (it only spares the simulation).
2. Else the bound ``B(G) = e^(-G / 2) (e G / (2 (k - 1)))^(k - 1)`` (for ``G > 2 (k - 1)``;
   else 1): Agrawal (2020), "Finite-sample concentration of the multinomial in relative
   entropy", IEEE Trans. Inf. Theory 66(10): the moment generating function of
   ``KL(O / m || pi) = G / (2 m)`` is at most that of a gamma of shape ``k - 1`` and rate
   ``m``, and Chernoff's bound at its best ``lambda`` gives ``B >= P(G' >= G)`` for every
   ``m`` and ``pi``. When ``B <= eps``: ``p = B``, and ``P(B <= v) <= v``.
3. Else ``p = min(1, eps + p_mc)``, ``p_mc`` the sequential Monte Carlo p-value of Besag and
   Clifford (1991, Biometrika 78(2) 301-304): simulate ``G'`` from ``Multinomial(m, pi)``
   until ``h`` of them are ``>= G`` (a tie counts against the observation: conservative) or
   ``n - 1`` have been simulated; ``p_mc = h / l`` in the first case (``l`` simulated),
   ``(g + 1) / n`` in the second (``g`` of them ``>= G``). ``P(p_mc <= u) <= u`` for every
   ``u`` and every ``n``: the observation is one more draw of the same law, exchangeable with
   the simulated ones.

Between branches 1 and 2, where ``p_chi2 < smallest / BELOW`` (a thousand times below the
item's own level: a gross departure), ``p = p_chi2`` without simulating (0-ing the cost of a
broken engine's items); that is the one place the p-value leans on the approximation.

So for ``u <= screen``: ``P(p <= u) <= P(B <= min(u, eps)) + P(p_far) + P(p_mc <= u - eps)
<= u + max(0, P(p_far) - eps)``, ``p_far`` the event ``p_chi2 < smallest / BELOW``: the size
is at most ``u`` as long as the chi-square's tail at ``smallest / BELOW`` is no more than
``BELOW / EPS_SHARE = 50`` times short of the exact one (at 0.05 it is 1.09 times short on
the adder's items, 1.5 times on two cells of 40 draws: ``docs/reference/checks/sampling.md``).
The constants: ``screen = SCREEN
x`` the largest level ``p`` is compared at (Holm's ``alpha``); ``eps = smallest /
EPS_SHARE`` and ``n = min(RESOLUTION / smallest, MAX_SIMULATIONS)``, ``smallest`` the
smallest level (the item's Bonferroni ``alpha / m``), so that an observation beyond every
simulated one reaches ``p = 1 / n + eps <= smallest`` (for ``smallest`` above 5.3e-6);
``h = STOP_AFTER``.

The simulation's generator is numpy's PCG64 seeded by a SHA-256 of ``m``, the cells'
probabilities and the observed counts: the same evidence gives the same ``p`` (a verdict is
reproducible), and the stream is as independent of the observation as a seeded generator's
stream is of anything (the validity argument treats it as fresh randomness).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .gamma import chi2_sf

__all__ = [
    "BELOW",
    "EPS_SHARE",
    "MAX_SIMULATIONS",
    "POWER_LEVEL",
    "RESOLUTION",
    "SCREEN",
    "STOP_AFTER",
    "GTestP",
    "agrawal_bound",
    "g_statistic",
    "g_test_p_value",
    "monte_carlo_p",
]

SCREEN = 4.0
"""A chi-square p-value above ``SCREEN x`` the largest level is kept (branch 1)."""
EPS_SHARE = 20.0
"""``eps = smallest level / EPS_SHARE``: the share of the level the bound may spend."""
RESOLUTION = 20.0
"""Simulations ``n = RESOLUTION / smallest level``: an observation with an exact tail
probability of half the level is rejected with probability ``P(Poisson(10) <= 18) = 0.993``."""
MAX_SIMULATIONS = 200_000
"""The most simulations one p-value costs (0.2-0.9 s at 5-40 cells and 2,000 draws; below
``RESOLUTION / MAX_SIMULATIONS = 1e-4`` a level is resolved less finely: a loss of power
there, never of size)."""
POWER_LEVEL = 0.7
"""``detectable_tv`` is computed at ``POWER_LEVEL x`` the item's level: this p-value rejects a
little less often than the chi-square's at the same level (the ``eps`` share, the
simulation's resolution, the exact tail a little heavier), so at the chi-square's own 80%
distance its power measured 0.775-0.795 (600 draws each, ``tests/unit/test_sampling_power.py``'s
three alternatives); at the distance for 0.7 x the level, 0.803-0.827 (2-3.5% farther)."""
BELOW = 1000.0
"""A chi-square p-value below ``smallest / BELOW`` is kept (a gross departure)."""
STOP_AFTER = 20
"""Besag-Clifford's ``h``: simulation stops once this many simulated ``G`` reach the
observed one."""
_BATCH = 4096
_TIE = 1e-9


@dataclass(frozen=True)
class GTestP:
    """A p-value of :func:`g_test_p_value`: ``method`` is ``"chi-square"`` (branch 1, or far
    below the levels),
    ``"bound"`` (2) or ``"monte-carlo"`` (3); ``simulated``: the ``G`` simulated (0 unless
    Monte Carlo); ``exceeded``: how many of them reached the observed ``G``."""

    p_value: float
    method: str
    simulated: int = 0
    exceeded: int = 0


def g_statistic(observed: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``2 sum_i O_i ln(O_i / E_i)`` along the last axis (``0 ln 0 = 0``), for one row of
    counts or many."""
    o = np.asarray(observed, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(o > 0, o * np.log(o / expected), 0.0)
    return np.asarray(2.0 * terms.sum(axis=-1))


def agrawal_bound(g: float, k: int) -> float:
    """``B(G) = e^(-G / 2) (e G / (2 (k - 1)))^(k - 1)`` for ``G > 2 (k - 1)``, else 1: an
    upper bound of ``P(G' >= G)`` for the uncorrected G statistic over ``k`` cells, any ``m``
    and ``pi`` (module docstring, branch 2)."""
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k!r}")
    d = k - 1
    if not g > 2.0 * d:
        return 1.0
    log_b = -g / 2.0 + d * (1.0 + math.log(g / (2.0 * d)))
    return math.exp(log_b) if log_b < 0 else 1.0


def _seed(m: int, probs: np.ndarray, observed: np.ndarray) -> int:
    h = hashlib.sha256()
    h.update(np.int64(m).tobytes())
    h.update(np.ascontiguousarray(probs, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(observed, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest()[:16], "little")


def monte_carlo_p(
    observed: Sequence[int],
    probs: Sequence[float],
    *,
    simulations: int,
    stop_after: int = STOP_AFTER,
) -> GTestP:
    """Besag and Clifford's sequential Monte Carlo p-value of the G statistic of
    ``observed`` under ``Multinomial(sum(observed), probs)``, at most ``simulations - 1``
    simulated (module docstring, branch 3; the seed is the hash of the inputs)."""
    obs = np.asarray(observed, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    if obs.ndim != 1 or obs.shape != p.shape or len(obs) < 2:
        raise ValueError("observed and probs must be two equal-length vectors of >= 2 cells")
    if simulations < 2:
        raise ValueError(f"simulations must be >= 2, got {simulations!r}")
    p = p / p.sum()
    m = int(obs.sum())
    expected = m * p
    g_obs = float(g_statistic(obs, expected))
    threshold = g_obs - _TIE * max(1.0, g_obs)
    # x ln x for x = 0..m, so a batch's G is a table look-up and a dot product
    x = np.arange(m + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        xlogx = np.where(x > 0, x * np.log(x), 0.0)
    log_e = np.log(expected)
    rng = np.random.Generator(np.random.PCG64(_seed(m, p, obs)))
    limit = simulations - 1
    done = exceeded = 0
    batch = _BATCH
    while done < limit:
        size = min(batch, limit - done)
        counts = rng.multinomial(m, p, size=size)
        g = 2.0 * (xlogx[counts].sum(axis=1) - counts @ log_e)
        hits = np.flatnonzero(g >= threshold)
        if exceeded + len(hits) >= stop_after:
            at = int(hits[stop_after - exceeded - 1]) + 1  # the h-th exceedance's index
            return GTestP(stop_after / (done + at), "monte-carlo", done + at, stop_after)
        exceeded += len(hits)
        done += size
        batch = min(2 * batch, 8 * _BATCH)
    return GTestP((exceeded + 1) / simulations, "monte-carlo", done, exceeded)


def g_test_p_value(
    observed: Sequence[int],
    probs: Sequence[float],
    statistic: float,
    *,
    smallest: float,
    largest: float | None = None,
) -> GTestP:
    """The p-value of the module docstring for the cells' ``observed`` counts and ``probs``
    (``k >= 2``); ``statistic``: ``G / q`` (Williams-corrected, for branch 1); ``smallest``
    and ``largest``: the levels ``p`` is compared at (the item's Bonferroni level and Holm's
    ``alpha``; ``largest`` defaults to ``smallest``). ``P(p <= u) <= u`` for ``u <=
    SCREEN x largest``."""
    k = len(observed)
    if k < 2:
        raise ValueError(f"at least two cells are needed, got {k}")
    top = smallest if largest is None else largest
    if not (0 < smallest <= top < 1):
        raise ValueError(f"levels must satisfy 0 < smallest <= largest < 1 ({smallest}, {top})")
    p_chi2 = chi2_sf(statistic, k - 1)
    if p_chi2 > min(1.0, SCREEN * top):
        return GTestP(p_chi2, "chi-square")
    obs = np.asarray(observed, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    p = p / p.sum()
    g_raw = float(g_statistic(obs, int(obs.sum()) * p))
    eps = smallest / EPS_SHARE
    bound = agrawal_bound(g_raw, k)
    if bound <= eps:
        return GTestP(bound, "bound")
    if p_chi2 < smallest / BELOW:
        return GTestP(p_chi2, "chi-square")
    n = int(min(MAX_SIMULATIONS, math.ceil(RESOLUTION / smallest)))
    mc = monte_carlo_p(observed, probs, simulations=n)
    return GTestP(min(1.0, eps + mc.p_value), mc.method, mc.simulated, mc.exceeded)
