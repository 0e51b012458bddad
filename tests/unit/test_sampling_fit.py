"""The G-test, its pooling and support rules, and Holm, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.metrics.sampling import Expected, detectable_tv, goodness_of_fit, holm
from pytest_infercheck.metrics.sampling.exact import POWER_LEVEL
from pytest_infercheck.metrics.sampling.params import TAIL


def test_g_statistic_and_p_value_of_a_small_table() -> None:
    # n = 30, p = (.5, .3, .2): E = (15, 9, 6); O = (20, 6, 4)
    expected = Expected({0: 0.5, 1: 0.3, 2: 0.2})
    fit = goodness_of_fit({0: 20, 1: 6, 2: 4}, expected)
    g = 2 * (20 * math.log(20 / 15) + 6 * math.log(6 / 9) + 4 * math.log(4 / 6))
    assert g == pytest.approx(3.39798, abs=1e-5)
    williams = 1 + (3 + 1) / (6 * 30)
    assert fit.statistic == pytest.approx(g / williams, rel=1e-12)
    assert fit.dof == 2
    # chi-square with 2 dof: P(X > x) = exp(-x / 2)
    assert fit.p_value == pytest.approx(math.exp(-g / williams / 2), rel=1e-10)
    assert fit.samples == 30 and fit.pooled == () and fit.outside_support == ()


def test_a_perfect_fit_has_g_zero() -> None:
    fit = goodness_of_fit({0: 50, 1: 30, 2: 20}, Expected({0: 0.5, 1: 0.3, 2: 0.2}))
    assert fit.statistic == 0.0 and fit.p_value == 1.0


def test_cells_below_five_expected_are_pooled() -> None:
    # n = 100: E = 50, 30, 15, 3, 2 -> (3, 2) pooled into one cell of E = 5
    expected = Expected({0: 0.5, 1: 0.3, 2: 0.15, 3: 0.03, 4: 0.02})
    fit = goodness_of_fit({0: 50, 1: 30, 2: 15, 3: 5, 4: 0}, expected)
    assert fit.pooled == (3, 4) and fit.dof == 3
    g = 2 * 5 * math.log(5 / 5)  # the other cells match exactly; the pool has O = 5, E = 5
    assert fit.statistic == pytest.approx(g)
    assert fit.hidden == pytest.approx(0.05)
    # what the pooled cell hides adds to the distance the test answers for
    cells = [0.5, 0.3, 0.15, 0.05]
    # at POWER_LEVEL x the level: what the valid p-value detects with 80% power (measured)
    assert fit.detectable_tv == pytest.approx(detectable_tv(100, cells, 0.0007) + 0.05)
    assert POWER_LEVEL == 0.7
    assert fit.detectable_tv - 0.05 == pytest.approx(
        goodness_of_fit({0: 50, 1: 30, 2: 15, 3: 5}, Expected(dict(enumerate(cells)))).detectable_tv
    )
    # a pool still below 5 takes the smallest other cell: E = 50, 30, 16, 4 -> (16, 4) pooled
    expected = Expected({0: 0.5, 1: 0.3, 2: 0.16, 3: 0.04})
    fit = goodness_of_fit({0: 50, 1: 30, 2: 10, 3: 10}, expected)
    assert fit.pooled == (2, 3) and fit.dof == 2
    assert fit.statistic == 0.0  # pooled O = 20 = E


def test_outside_support_and_boundary_and_tail() -> None:
    expected = Expected({0: 0.6, 1: 0.4}, boundary=frozenset({2}), excluded=frozenset({3}))
    fit = goodness_of_fit({0: 60, 1: 40, 2: 7, 3: 1, 99: 2}, expected)
    assert fit.outside_support == (3, 99)
    assert fit.boundary_samples == 7 and fit.samples == 110
    assert fit.statistic == 0.0  # the 100 support samples fit exactly
    # a boundary token inside the support: its samples set aside, the rest renormalised
    expected = Expected({0: 0.5, 1: 0.3, 2: 0.2}, boundary=frozenset({2}))
    fit = goodness_of_fit({0: 50, 1: 30, 2: 3}, expected)
    assert fit.statistic == pytest.approx(
        2
        * (50 * math.log(50 / (80 * 0.625)) + 30 * math.log(30 / (80 * 0.375)))
        / (1 + 3 / (6 * 80)),
        abs=1e-12,
    )
    # with a tail, an unlisted token counts in the tail; a listed excluded one is outside
    expected = Expected({0: 0.7}, tail=0.3, excluded=frozenset({5}))
    fit = goodness_of_fit({0: 70, 11: 20, 12: 10, 5: 1}, expected)
    assert fit.outside_support == (5,)
    assert fit.statistic == pytest.approx(0.0, abs=1e-12)
    assert fit.hidden == pytest.approx(0.3)  # inside the tail nothing is seen
    fit = goodness_of_fit({0: 98, 11: 2}, Expected({0: 0.97}, tail=0.03))
    assert fit.pooled == (TAIL, 0)


def test_bad_counts_raise() -> None:
    expected = Expected({0: 1.0})
    with pytest.raises(ValueError, match="no samples"):
        goodness_of_fit({}, expected)
    with pytest.raises(ValueError, match="not a count"):
        goodness_of_fit({0: -1}, expected)
    with pytest.raises(ValueError, match="not finite"):
        goodness_of_fit({0: 1}, Expected({0: math.nan}))


def test_one_cell_tests_the_support_only() -> None:
    fit = goodness_of_fit({0: 100}, Expected({0: 1.0}))
    assert fit.dof == 0 and fit.p_value == 1.0
    # a change is seen only as a sample outside: 1 - (1 - d)^100 = .8
    assert fit.detectable_tv == pytest.approx(1 - 0.2 ** (1 / 100))


def test_holm_step_down_by_hand() -> None:
    # m = 4, alpha .05: sorted .005 <= .0125 reject; .01 <= .05/3 reject; .03 > .025 stop
    assert holm([0.01, 0.04, 0.03, 0.005], 0.05) == [True, False, False, True]
    # equality rejects; a failure stops the later ones even if they would pass alone
    assert holm([0.025, 0.05], 0.05) == [True, True]
    # m = 3: .001 <= .05/3 reject; .03 > .025 stop; .04 <= .05 would pass alone
    assert holm([0.04, 0.001, 0.03], 0.05) == [False, True, False]
    assert holm([0.026, 0.026], 0.05) == [False, False]
    assert holm([], 0.05) == []
    with pytest.raises(ValueError):
        holm([math.nan], 0.05)
    with pytest.raises(ValueError):
        holm([0.1], 0.0)
