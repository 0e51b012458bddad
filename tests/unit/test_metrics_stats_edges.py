"""Edges of the statistics helpers that the mutation run (mutmut) found unguarded.

Each test names the bug it would catch; values are worked by hand or by the defining
inequality, never by calling the function under test a second way.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from pytest_infercheck.metrics.stats import (
    clustered_mean_se,
    mcnemar_exact,
    normal_quantile,
    percentile,
    rms,
    wilson_interval,
    wilson_min_trials,
)


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5])
def test_normal_quantile_names_the_bad_p(p: float) -> None:
    # Not a math domain error from log(0) / log1p(-1): the check itself must reject p.
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\)"):
        normal_quantile(p)


@pytest.mark.parametrize(("k", "n"), [(1, 0), (11, 10)])
def test_wilson_rejects_more_successes_than_trials(k: int, n: int) -> None:
    # (1, 0) must not fall through to the n == 0 answer (0, 1).
    with pytest.raises(ValueError, match="need 0 <= successes <= n"):
        wilson_interval(k, n)


@pytest.mark.parametrize("conf", [0.0, 1.0, 1.5])
def test_wilson_and_min_trials_reject_bad_confidence(conf: float) -> None:
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
        wilson_interval(1, 10, conf)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
        wilson_min_trials(0.1, conf)


@pytest.mark.parametrize("n", [5, 9, 14])
def test_wilson_upper_is_exactly_one_at_k_equals_n(n: int) -> None:
    # For these n, centre + half rounds to just below 1 in floats; k == n must give 1.0.
    assert wilson_interval(n, n) == (
        pytest.approx(1 - (1.959963984540054**2 / n) / (1 + 1.959963984540054**2 / n), rel=1e-12),
        1.0,
    )


@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_wilson_min_trials_is_the_smallest_passing_n(conf: float) -> None:
    # Definition: n passes when wilson_interval(0, n)[1] <= rate, and n - 1 does not.
    # Rates exactly at (and one ulp around) a bound put the closed-form guess off by one,
    # so both correcting loops must run and stop at the right place.
    for n in range(1, 121):
        bound = wilson_interval(0, n, conf)[1]
        assert wilson_min_trials(bound, conf) == n
        for rate in (math.nextafter(bound, 0.0), math.nextafter(bound, 1.0)):
            m = wilson_min_trials(rate, conf)
            assert m is not None
            assert wilson_interval(0, m, conf)[1] <= rate
            assert m == 1 or wilson_interval(0, m - 1, conf)[1] > rate
        assert wilson_min_trials(math.nextafter(bound, 0.0), conf) == n + 1


def test_mcnemar_names_negative_counts() -> None:
    with pytest.raises(ValueError, match="counts must be >= 0"):
        mcnemar_exact(0, -1)


@pytest.mark.parametrize("q", [-0.5, 100.5])
def test_percentile_rejects_q_outside_0_100(q: float) -> None:
    with pytest.raises(ValueError, match=r"q must be in \[0, 100\]"):
        percentile([1.0, 2.0], q)


def test_integer_inputs_are_summed_as_floats() -> None:
    # int64 would overflow: 2**62 + 2**62 wraps negative, and (2**40)**2 wraps to 0.
    big = 2**62
    mean, _ = clustered_mean_se([[big, big], [0]])
    assert mean == pytest.approx(2.0 * big / 3.0, rel=1e-15)
    assert rms([2**40]) == pytest.approx(2.0**40, rel=1e-15)


def test_infinities_give_nan_without_numpy_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, se = clustered_mean_se([np.array([math.inf]), np.array([-math.inf])])
        inf_mean, inf_se = clustered_mean_se([np.array([math.inf]), np.array([1.0])])
    assert inf_mean == math.inf
    assert math.isnan(inf_se)
    assert math.isnan(mean)
    assert math.isnan(se)
