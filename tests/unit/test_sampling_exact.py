"""The G statistic's valid p-value (``metrics/sampling/exact.py``) against values computed by
hand, and its size measured on exact multinomial draws beside the chi-square's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.metrics.sampling import (
    Expected,
    agrawal_bound,
    chi2_sf,
    g_test_p_value,
    goodness_of_fit,
    monte_carlo_p,
)
from pytest_infercheck.metrics.sampling.exact import EPS_SHARE, RESOLUTION, g_statistic
from tests.false_failures import CONFIDENCE, binomial_upper


def _binomial_tail(m: int, p: float, observed: int) -> float:
    """``P(G' >= G)`` for two cells by enumerating every count."""

    def g(x: int) -> float:
        return float(g_statistic(np.array([x, m - x]), np.array([m * p, m * (1 - p)])))

    g_obs = g(observed)
    return sum(
        math.comb(m, x) * p**x * (1 - p) ** (m - x) for x in range(m + 1) if g(x) >= g_obs - 1e-9
    )


def test_g_statistic_by_hand() -> None:
    # O = (20, 6, 4), E = (15, 9, 6): 2 (20 ln 4/3 + 6 ln 2/3 + 4 ln 2/3) = 3.39798
    assert float(g_statistic(np.array([20, 6, 4]), np.array([15.0, 9.0, 6.0]))) == pytest.approx(
        3.39798, abs=1e-5
    )
    rows = g_statistic(np.array([[10, 0], [5, 5]]), np.array([5.0, 5.0]))
    assert rows.tolist() == pytest.approx([20 * math.log(2), 0.0])  # 0 ln 0 = 0


def test_agrawal_bound_by_hand_and_above_the_exact_tail() -> None:
    # k = 2, G = 20: e^-10 (e 20 / 2)^1 = 10 e^-9
    assert agrawal_bound(20.0, 2) == pytest.approx(10 * math.exp(-9), rel=1e-12)
    # k = 5, G = 40: e^-20 (e 40 / 8)^4 = 625 e^-16
    assert agrawal_bound(40.0, 5) == pytest.approx(625 * math.exp(-16), rel=1e-12)
    assert agrawal_bound(2.0, 2) == 1.0 and agrawal_bound(7.9, 5) == 1.0  # G <= 2 (k - 1)
    # it bounds the exact tail: two cells, m = 50, p = 0.3, every count
    for x in range(51):
        g = float(g_statistic(np.array([x, 50 - x]), np.array([15.0, 35.0])))
        assert agrawal_bound(g, 2) >= _binomial_tail(50, 0.3, x) * (1 - 1e-12)
    with pytest.raises(ValueError):
        agrawal_bound(1.0, 1)


def test_monte_carlo_p_by_hand() -> None:
    # G = 0: every simulated G reaches it; Besag-Clifford stops at the h-th: p = 20 / 20
    mc = monte_carlo_p([5, 5], [0.5, 0.5], simulations=1000)
    assert (mc.p_value, mc.simulated, mc.exceeded) == (1.0, 20, 20)
    # (10, 0) of a fair coin: G' >= G only at (10, 0) and (0, 10), exactly 2 / 1024
    mc = monte_carlo_p([10, 0], [0.5, 0.5], simulations=1_000_000)
    assert mc.exceeded == 20 and mc.p_value == 20 / mc.simulated
    assert mc.p_value == pytest.approx(2 / 1024, rel=0.5)
    # too few simulations to see 20: p = (g + 1) / n
    mc = monte_carlo_p([10, 0], [0.5, 0.5], simulations=500)
    assert mc.simulated == 499 and mc.p_value == (mc.exceeded + 1) / 500
    # an observation no simulation reaches: p = 1 / n
    mc = monte_carlo_p([0, 60], [0.999, 0.001], simulations=300)
    assert (mc.p_value, mc.exceeded) == (1 / 300, 0)
    # the same evidence gives the same p (the seed is the inputs' hash)
    again = monte_carlo_p([10, 0], [0.5, 0.5], simulations=500)
    assert again == monte_carlo_p([10, 0], [0.5, 0.5], simulations=500)
    with pytest.raises(ValueError):
        monte_carlo_p([3], [1.0], simulations=10)


def test_each_branch_of_the_p_value() -> None:
    # chi-square far above the levels: kept (2 cells, G / q = 1: p = erfc(sqrt(1 / 2)) = .317)
    p = g_test_p_value([55, 45], [0.5, 0.5], 1.0, smallest=0.001, largest=0.05)
    assert p.method == "chi-square" and p.p_value == pytest.approx(math.erfc(math.sqrt(0.5)))
    assert p.p_value == pytest.approx(chi2_sf(1.0, 1))
    # the same p is not kept when the largest level is within a factor 4 of it: simulated
    p = g_test_p_value([55, 45], [0.5, 0.5], 1.0, smallest=0.001, largest=0.1)
    assert p.method == "monte-carlo" and p.p_value == pytest.approx(
        0.001 / EPS_SHARE + 20 / p.simulated
    )
    # exact: the binomial mass of |O - 50| >= 5 (G is symmetric here) = .3682
    assert _binomial_tail(100, 0.5, 55) == pytest.approx(0.3682, abs=1e-4)
    assert p.p_value == pytest.approx(0.3682, rel=0.5)
    # far in the tail: the bound. O = (100, 0) of (.5, .5): G = 200 ln 2 = 138.6,
    # B = e^-69.3 (e 69.3)^1 = 3.7e-29 <= eps
    p = g_test_p_value([100, 0], [0.5, 0.5], 138.0, smallest=1e-6)
    assert p.method == "bound" and p.simulated == 0
    assert p.p_value == pytest.approx(math.exp(-100 * math.log(2)) * math.e * 100 * math.log(2))
    # far below the item's level and short of the bound: the chi-square, not simulated.
    # O = (150, 50, 100 x 8) of ten cells of 100: G = 2 (150 ln 1.5 + 50 ln .5) = 52.3,
    # B = e^-26.2 (e 52.3 / 18)^9 = 5.2e-4 > eps = 5e-5; chi2(9) p 4e-8 < .001 / 1000
    observed = [150, 50, *[100] * 8]
    g = 2 * (150 * math.log(1.5) + 50 * math.log(0.5))
    assert agrawal_bound(g, 10) == pytest.approx(5.22e-4, rel=0.01)
    p = g_test_p_value(observed, [0.1] * 10, g, smallest=0.001)
    assert (p.method, p.simulated) == ("chi-square", 0) and p.p_value == chi2_sf(g, 9) < 1e-6
    # between: Monte Carlo with n = RESOLUTION / smallest, p >= eps + 1 / n
    p = g_test_p_value([70, 30], [0.5, 0.5], 16.0, smallest=0.001)
    assert p.method == "monte-carlo"
    assert p.p_value >= 0.001 / EPS_SHARE + 0.001 / RESOLUTION
    assert p.p_value == pytest.approx(0.001 / EPS_SHARE + _binomial_tail(100, 0.5, 70), rel=0.5)
    with pytest.raises(ValueError):
        g_test_p_value([1, 1], [0.5, 0.5], 0.0, smallest=0.1, largest=0.01)


def test_binomial_upper_by_hand() -> None:
    # n = 2, alpha = .5: P(<= 0) = .25, P(<= 1) = .75, P(<= 2) = 1
    assert binomial_upper(2, 0.5, 0.7) == 1 and binomial_upper(2, 0.5, 0.8) == 2
    # n = 2000, alpha = .05: mean 100, sd 9.75; the 99.9% quantile is about 100 + 3.1 sd
    assert 128 <= binomial_upper(2000, 0.05) <= 133


ALPHA = 0.05
REPS = 4000


@pytest.mark.parametrize(
    ("name", "weights", "m", "recorded"),
    [
        # two cells at m = 40: the chi-square's tail is far off the lattice's
        ("two cells, m 40", [0.85, 0.15], 40, (160, 298)),
        # 200 cells of expected count 5.2: just above the pooling limit
        ("200 cells, m 1040", [1.0] * 200, 1040, (201, 284)),
    ],
)
def test_the_size_is_within_alpha_where_the_chi_square_exceeds_it(
    name: str, weights: list[float], m: int, recorded: tuple[int, int]
) -> None:
    """4,000 exact multinomial draws (seeded) judged at alpha .05: the valid p-value rejects
    at most the binomial bound's count (99.9% one-sided); the chi-square p-value of the same
    Williams-corrected statistic, on the same draws, rejects more than that bound."""
    p = np.array(weights) / sum(weights)
    expected = Expected(dict(enumerate(p.tolist())))
    rng = np.random.default_rng(2026)
    new = old = 0
    for _ in range(REPS):
        draw = rng.multinomial(m, p)
        fit = goodness_of_fit(dict(enumerate(draw.tolist())), expected, alpha=ALPHA)
        assert not fit.outside_support and fit.dof == len(weights) - 1
        new += fit.p_value <= ALPHA
        old += chi2_sf(fit.statistic, fit.dof) <= ALPHA
    bound = binomial_upper(REPS, ALPHA, CONFIDENCE)
    print(
        f"{name}: valid p {new}/{REPS} = {new / REPS:.4f}, chi-square {old}/{REPS} = "
        f"{old / REPS:.4f}, bound {bound} ({CONFIDENCE:.1%} one-sided)"
    )
    assert new <= bound
    assert old > bound
    assert (new, old) == recorded  # as the docs record them (seeded draws)
