"""The goodness-of-fit test of sampled counts against an expected distribution.

Given ``counts`` (token -> times sampled, ``N`` in all) and an :class:`~.params.Expected`:

1. Each sampled token is a *boundary* token (its samples are set aside: the test is of the
   distribution conditional on not sampling one, the same whether the engine kept it or
   not), a *support* token (in ``probs``), a *tail* token (``tail > 0`` and not a listed
   token the truncation excluded), or *outside the support* (reported; the check fails on
   any, no statistics).
2. The cells are the non-boundary support tokens and the tail, with probabilities
   ``pi_i = p_i / sum_{non-boundary} p`` and expected counts ``E_i = m pi_i``, ``m`` the
   samples in them.
3. Cells with ``E_i < 5`` are pooled into one cell; if that cell's expected count is still
   below 5, the smallest remaining cells join it until it reaches 5 (or none is left).
4. ``G = 2 sum_i O_i ln(O_i / E_i)`` over the ``k`` cells (``0 ln 0 = 0``), divided by
   Williams' correction ``q = 1 + (k + 1) / (6 m)``. ``p``: :func:`~.exact.g_test_p_value`,
   valid at these counts (``P(p <= u) <= u`` for every level ``u`` it is compared at):
   ``P(chi2(k - 1) >= G / q)`` (:func:`~.gamma.chi2_sf`) where that is far above the
   levels, else Agrawal's finite-sample bound where it is tiny, else a sequential Monte Carlo
   p-value simulated from the cells' multinomial. One cell: ``G = 0``, ``p = 1`` (only the
   support is tested).
5. ``detectable_tv``: :func:`~.power.detectable_tv` of ``m``, the cells, ``alpha x``
   :data:`~.exact.POWER_LEVEL` (the p-value of step 4 is a little more conservative than the
   chi-square's: measured) and the hidden mass (the pooled cell when it holds several
   tokens or the tail, and the tail).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .exact import POWER_LEVEL, g_test_p_value
from .params import TAIL, Expected
from .power import detectable_tv

__all__ = ["MIN_EXPECTED", "Fit", "goodness_of_fit"]

MIN_EXPECTED = 5.0
"""Cells with an expected count below this are pooled."""


@dataclass(frozen=True)
class Fit:
    """The outcome of :func:`goodness_of_fit` (module docstring for the formulas).

    ``statistic``: ``G / q`` (Williams-corrected G); ``dof``: cells - 1; ``p_value``:
    ``P(chi2(dof) >= statistic)``; ``pooled``: the tokens merged into one cell (:data:`TAIL`
    for the tail), sorted; ``outside_support``: sampled tokens with zero expected
    probability that are not boundary tokens, sorted (the check fails at once on any);
    ``detectable_tv``: the total-variation distance from the expected distribution beyond
    which this test detects every alternative with probability >= ``power`` at ``alpha``;
    ``samples``: the counts' total ``N``; ``boundary_samples``: the samples of boundary
    tokens set aside; ``hidden``: the mass inside pooled cells the test cannot see into;
    ``method``: how ``p_value`` was computed (``"chi-square"``, ``"bound"``,
    ``"monte-carlo"``: :mod:`.exact`; ``"none"`` for one cell); ``simulated``: the ``G``
    simulated for it."""

    statistic: float
    dof: int
    p_value: float
    pooled: tuple[int, ...]
    outside_support: tuple[int, ...]
    detectable_tv: float
    samples: int
    boundary_samples: int = 0
    hidden: float = 0.0
    method: str = "none"
    simulated: int = 0


def _counts(counts: Mapping[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for token, count in counts.items():
        if isinstance(count, bool) or int(count) != count or count < 0:
            raise ValueError(f"count of token {token} is not a count ({count!r})")
        if int(count):
            out[int(token)] = int(count)
    return out


def _cells(expected: Expected) -> dict[int, float]:
    """The non-boundary support (and the tail, as :data:`TAIL`) with probabilities."""
    raw: dict[int, float] = {}
    for token, p in expected.probs.items():
        if not (math.isfinite(p) and p >= 0):
            raise ValueError(f"expected probability of token {token} is not finite ({p!r})")
        if p > 0 and token not in expected.boundary:
            raw[int(token)] = float(p)
    if not (math.isfinite(expected.tail) and 0 <= expected.tail < 1):
        raise ValueError(f"expected tail is not in [0, 1) ({expected.tail!r})")
    if expected.tail > 0:
        raw[TAIL] = expected.tail
    total = sum(raw.values())
    if total <= 0:
        raise ValueError("the expected support has no token outside the boundary")
    return {t: p / total for t, p in raw.items()}


def _pool(expected_counts: dict[int, float]) -> list[int]:
    pool = [t for t, e in expected_counts.items() if e < MIN_EXPECTED]
    rest = sorted((e, t) for t, e in expected_counts.items() if e >= MIN_EXPECTED)
    if not pool:
        return []
    while sum(expected_counts[t] for t in pool) < MIN_EXPECTED and rest:
        pool.append(rest.pop(0)[1])
    return sorted(pool)


def goodness_of_fit(
    counts: Mapping[int, int],
    expected: Expected,
    *,
    alpha: float = 0.001,
    power: float = 0.8,
    up_to: float | None = None,
) -> Fit:
    """Test ``counts`` (token id -> times sampled) against ``expected`` by the G-test of the
    module docstring. ``alpha``: the level the item is judged at (under Holm, ``alpha /
    items``, the strictest); ``up_to``: the largest level its p-value is compared at (Holm's
    ``alpha``; default ``alpha``): the p-value is valid at every level between. ``alpha`` and
    ``power`` set what ``detectable_tv`` reports.

    Raises ``ValueError`` on no samples, a count that is not a non-negative integer, or a
    non-finite expected probability (the kind reports it as unmeasured)."""
    observed = _counts(counts)
    total = sum(observed.values())
    if total == 0:
        raise ValueError("no samples")
    cells = _cells(expected)
    listed = set(expected.probs) | set(expected.excluded)
    in_cells: dict[int, int] = {t: 0 for t in cells}
    outside: list[int] = []
    boundary_samples = 0
    for token, count in observed.items():
        if token in expected.boundary:
            boundary_samples += count
        elif token in cells:
            in_cells[token] += count
        elif TAIL in cells and token not in listed and token != TAIL:
            in_cells[TAIL] += count
        else:
            outside.append(token)
    m = sum(in_cells.values())
    if m == 0:
        return Fit(0.0, 0, 1.0, (), tuple(sorted(outside)), 1.0, total, boundary_samples, 0.0)
    expected_counts = {t: m * p for t, p in cells.items()}
    pooled = _pool(expected_counts)
    groups: list[tuple[float, int, float]] = []  # (expected count, observed, probability)
    if pooled:
        groups.append(
            (
                sum(expected_counts[t] for t in pooled),
                sum(in_cells[t] for t in pooled),
                sum(cells[t] for t in pooled),
            )
        )
    in_pool = set(pooled)
    groups += [(expected_counts[t], in_cells[t], cells[t]) for t in cells if t not in in_pool]
    k = len(groups)
    hidden = 0.0
    if pooled and (len(pooled) > 1 or TAIL in in_pool):
        hidden += groups[0][2]
    if TAIL in cells and TAIL not in in_pool:
        hidden += cells[TAIL]
    method, simulated = "none", 0
    if k <= 1:
        statistic, p_value = 0.0, 1.0
    else:
        g = 2.0 * sum(o * math.log(o / e) for e, o, _ in groups if o > 0)
        statistic = max(0.0, g) / (1.0 + (k + 1) / (6.0 * m))
        tested = g_test_p_value(
            [o for _, o, _ in groups],
            [c for _, _, c in groups],
            statistic,
            smallest=alpha,
            largest=max(alpha, up_to or alpha),
        )
        p_value, method, simulated = tested.p_value, tested.method, tested.simulated
    cells_p = [c for _, _, c in groups]
    tv = detectable_tv(m, cells_p, alpha * POWER_LEVEL, power=power, hidden=min(1.0, hidden))
    return Fit(
        statistic,
        max(0, k - 1),
        p_value,
        tuple(pooled),
        tuple(sorted(outside)),
        tv,
        total,
        boundary_samples,
        min(1.0, hidden),
        method,
        simulated,
    )
