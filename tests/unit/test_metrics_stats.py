"""Unit tests for pytest_infercheck.metrics.stats against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.metrics.stats import (
    DistributionSummary,
    clustered_mean_se,
    mcnemar_exact,
    normal_quantile,
    percentile,
    rms,
    summarize,
    wilson_interval,
)

# ------------------------------------------------------------------ normal quantile


@pytest.mark.parametrize(
    ("p", "z"),
    [
        (0.5, 0.0),
        (0.975, 1.959963984540054),  # standard table values
        (0.025, -1.959963984540054),
        (0.95, 1.6448536269514722),
        (0.995, 2.5758293035489004),
        (0.01, -2.3263478740408408),
        (1e-10, -6.361340902404056),
    ],
)
def test_normal_quantile_table_values(p: float, z: float) -> None:
    assert normal_quantile(p) == pytest.approx(z, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5])
def test_normal_quantile_rejects_out_of_range(p: float) -> None:
    with pytest.raises(ValueError):
        normal_quantile(p)


# ------------------------------------------------------------------ Wilson interval


def test_wilson_by_hand_5_of_100() -> None:
    k, n, z = 5, 100, 1.959964
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lower, upper = wilson_interval(5, 100)
    assert lower == pytest.approx(centre - half, abs=1e-6)
    assert upper == pytest.approx(centre + half, abs=1e-6)
    assert lower == pytest.approx(0.02154, abs=1e-5)
    assert upper == pytest.approx(0.11175, abs=1e-5)


def test_wilson_other_confidence_by_hand() -> None:
    # 90%: z = 1.6448536; k = 3, n = 10.
    k, n, z = 3, 10, 1.6448536269514722
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert wilson_interval(3, 10, confidence=0.90) == pytest.approx(
        (centre - half, centre + half), abs=1e-12
    )


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lower, upper = wilson_interval(0, 10)
    # k = 0: upper = z^2/n / (1 + z^2/n) (centre + half collapse to the same term twice).
    z2 = 1.959963984540054**2
    assert lower == 0.0
    assert upper == pytest.approx((z2 / 10) / (1 + z2 / 10), rel=1e-12)
    lower, upper = wilson_interval(10, 10)
    assert upper == 1.0
    assert lower == pytest.approx(1 - (z2 / 10) / (1 + z2 / 10), rel=1e-12)


@pytest.mark.parametrize(
    ("k", "n", "conf"), [(-1, 10, 0.95), (11, 10, 0.95), (1, -1, 0.95), (1, 10, 1.0)]
)
def test_wilson_rejects_bad_arguments(k: int, n: int, conf: float) -> None:
    with pytest.raises(ValueError):
        wilson_interval(k, n, conf)


# ------------------------------------------------------------------ McNemar


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (0, 0, 1.0),
        (5, 0, 2 * (1 / 32)),  # 2 * C(5,0) / 2^5 = 0.0625
        (0, 5, 0.0625),
        (1, 1, 1.0),  # 2 * (C(2,0) + C(2,1)) / 4 = 1.5 -> capped at 1
        (3, 5, 2 * (1 + 8 + 28 + 56) / 2**8),  # = 0.7265625
        (0, 10, 2 / 1024),
        (2, 8, 2 * (1 + 10 + 45) / 2**10),  # = 0.109375
    ],
)
def test_mcnemar_by_hand(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-15)


def test_mcnemar_large_counts_and_validation() -> None:
    p = mcnemar_exact(1500, 1500)
    assert p == 1.0
    assert 0.0 <= mcnemar_exact(1000, 1200) < 0.01
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


# ------------------------------------------------------------------ clustered mean / SE


def test_clustered_mean_se_three_clusters_by_hand() -> None:
    clusters = [np.array([1.0, 2.0, 3.0]), np.array([4.0]), np.array([5.0, 6.0])]
    # N = 6, mean = 21 / 6 = 3.5
    # cluster sums of deviations: (-2.5 - 1.5 - 0.5) = -4.5, (0.5), (1.5 + 2.5) = 4.0
    # SE = sqrt(3/2 * (4.5^2 + 0.5^2 + 4.0^2)) / 6 = sqrt(1.5 * 36.5) / 6
    mean, se = clustered_mean_se(clusters)
    assert mean == 3.5
    assert se == pytest.approx(math.sqrt(1.5 * 36.5) / 6, rel=1e-12)


def test_clustered_mean_se_ignores_empty_clusters() -> None:
    # N = 3, mean = 2; deviations sums: (1-2)+(2-2) = -1, (3-2) = 1; G = 2 (empty ignored)
    # SE = sqrt(2/1 * (1 + 1)) / 3 = 2 / 3
    mean, se = clustered_mean_se([np.array([1.0, 2.0]), np.array([]), np.array([3.0])])
    assert mean == 2.0
    assert se == pytest.approx(2 / 3, rel=1e-12)


@pytest.mark.parametrize(
    "clusters",
    [[np.array([1.0, 2.0, 4.0])], [np.array([1.0, 2.0]), np.array([], dtype=np.float64)]],
)
def test_clustered_single_cluster_has_nan_se(clusters: list[np.ndarray]) -> None:
    mean, se = clustered_mean_se(clusters)
    assert not math.isnan(mean)
    assert math.isnan(se)


@pytest.mark.parametrize("clusters", [[], [np.array([])], [np.array([]), np.array([])]])
def test_clustered_empty(clusters: list[np.ndarray]) -> None:
    mean, se = clustered_mean_se(clusters)
    assert math.isnan(mean) and math.isnan(se)


# ------------------------------------------------------------------ percentile / summarize


def test_percentile_by_hand_and_matches_numpy() -> None:
    values = [3.0, 1.0, 2.0, 4.0]
    # sorted 1,2,3,4; q=50: h = 3 * 0.5 = 1.5 -> 2 + 0.5 * (3 - 2) = 2.5
    assert percentile(values, 50) == 2.5
    # q=90: h = 2.7 -> 3 + 0.7 * (4 - 3) = 3.7
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    rng = np.random.default_rng(0)
    x = rng.standard_normal(101)
    for q in (0.0, 12.5, 50.0, 90.0, 99.0, 100.0):
        assert percentile(x, q) == pytest.approx(float(np.percentile(x, q)), rel=1e-12)
    assert math.isnan(percentile([], 50))


def test_percentile_with_infinity() -> None:
    values = [1.0, 2.0, math.inf]
    assert percentile(values, 50) == 2.0  # np.percentile would give nan here
    assert percentile(values, 90) == math.inf  # h = 1.8, between 2 and inf
    assert percentile([1.0, math.inf, math.inf], 99) == math.inf


def test_summarize_by_hand() -> None:
    clusters = [np.arange(1.0, 6.0), np.arange(6.0, 12.0)]  # pooled 1..11
    s = summarize(clusters)
    assert isinstance(s, DistributionSummary)
    assert s.n == 11
    assert s.mean == 6.0  # 66 / 11
    # deviations: sum(1..5) - 5*6 = -15 ; sum(6..11) - 6*6 = 51 - 36 = 15
    # SE = sqrt(2/1 * (225 + 225)) / 11 = 30 / 11
    assert s.se == pytest.approx(30 / 11, rel=1e-12)
    assert s.median == 6.0  # h = 10 * 0.5 = 5 -> x_5 = 6
    assert s.p90 == 10.0  # h = 9 -> x_9 = 10
    assert s.p99 == pytest.approx(10.9)  # h = 9.9 -> 10 + 0.9 * 1
    assert s.max == 11.0


def test_summarize_empty_is_nan() -> None:
    s = summarize([])
    assert s.n == 0
    for v in (s.mean, s.se, s.median, s.p90, s.p99, s.max):
        assert math.isnan(v)
    assert summarize([np.array([])]).n == 0


def test_summarize_with_inf() -> None:
    s = summarize([np.array([0.0, 1.0]), np.array([math.inf])])
    assert s.n == 3
    assert s.mean == math.inf
    assert s.median == 1.0
    assert s.max == math.inf


# ------------------------------------------------------------------ rms


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([3.0, 4.0], math.sqrt((9 + 16) / 2)),
        ([-2.0], 2.0),
        ([0.0, 0.0, 0.0], 0.0),
        ([1.0, -1.0, 1.0, -1.0], 1.0),
    ],
)
def test_rms_by_hand(values: list[float], expected: float) -> None:
    assert rms(np.array(values)) == pytest.approx(expected, rel=1e-15)


def test_rms_empty() -> None:
    assert math.isnan(rms([]))
