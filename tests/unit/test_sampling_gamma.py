"""The chi-square distribution without scipy, against table values and closed forms."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.metrics.sampling import chi2_isf, chi2_sf, ncx2_sf, regularized_gamma_q

# Critical values from the standard chi-square table (upper tail q, dof)
TABLE = [
    (0.05, 1, 3.841459),
    (0.01, 1, 6.634897),
    (0.001, 1, 10.827566),
    (0.05, 2, 5.991465),
    (0.01, 5, 15.086272),
    (0.05, 10, 18.307038),
    (0.001, 10, 29.588298),
    (0.05, 30, 43.772972),
    (0.001, 100, 149.449252),
]


@pytest.mark.parametrize(("q", "dof", "x"), TABLE)
def test_table_values(q: float, dof: int, x: float) -> None:
    assert chi2_isf(q, dof) == pytest.approx(x, abs=2e-6)
    assert chi2_sf(x, dof) == pytest.approx(q, rel=1e-5)


def test_closed_forms() -> None:
    # Q(1, x) = e^-x; Q(1/2, x) = erfc(sqrt(x)); chi2(2) survival = e^(-x/2)
    for x in (1e-3, 0.5, 1.0, 2.0, 7.5, 40.0, 300.0):
        assert regularized_gamma_q(1.0, x) == pytest.approx(math.exp(-x), rel=1e-12)
        assert regularized_gamma_q(0.5, x) == pytest.approx(math.erfc(math.sqrt(x)), rel=1e-10)
        assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)
    # Q(n, x) = e^-x sum_{j<n} x^j / j! for integer n
    n, x = 5, 3.0
    want = math.exp(-x) * sum(x**j / math.factorial(j) for j in range(n))
    assert regularized_gamma_q(n, x) == pytest.approx(want, rel=1e-12)
    assert regularized_gamma_q(2.0, 0.0) == 1.0 and chi2_sf(0.0, 3) == 1.0


def test_tiny_p_values_keep_their_precision() -> None:
    assert chi2_sf(400.0, 2) == pytest.approx(math.exp(-200), rel=1e-10)
    assert chi2_sf(200.0, 1) == pytest.approx(math.erfc(10.0), rel=1e-10)


def test_noncentral_against_the_one_dof_closed_form() -> None:
    # X = (Z + sqrt(lambda))^2: P(X > x) = Phi(-sqrt x - sqrt l) + Phi(-sqrt x + sqrt l)
    def phi(z: float) -> float:
        return 0.5 * math.erfc(-z / math.sqrt(2))

    for x, lam in ((5.0, 3.0), (10.8, 20.0), (1.0, 0.1), (3.84, 60.0)):
        want = phi(-math.sqrt(x) - math.sqrt(lam)) + phi(-math.sqrt(x) + math.sqrt(lam))
        assert ncx2_sf(x, 1, lam) == pytest.approx(want, rel=1e-9)
    assert ncx2_sf(7.0, 4, 0.0) == pytest.approx(chi2_sf(7.0, 4), rel=1e-12)
    # the mean of a noncentral chi-square is k + lambda: its survival at the mean ~ 1/2
    assert 0.4 < ncx2_sf(30.0, 10, 20.0) < 0.5


def test_bad_arguments_raise() -> None:
    for call in (
        lambda: chi2_sf(1.0, 0),
        lambda: chi2_sf(math.nan, 1),
        lambda: chi2_isf(0.0, 1),
        lambda: regularized_gamma_q(0.0, 1.0),
        lambda: regularized_gamma_q(1.0, -1.0),
        lambda: ncx2_sf(1.0, 1, math.inf),
    ):
        with pytest.raises(ValueError):
            call()
