"""The test's error rates, simulated with seeded numpy: false failures within alpha, the
power its ``detectable_tv`` claims, and dropped parameters caught at n = 2000."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_infercheck.metrics.sampling import (
    Expected,
    SamplingParams,
    detectable_tv,
    expected_distribution,
    goodness_of_fit,
)
from pytest_infercheck.metrics.sampling.exact import POWER_LEVEL

# A spread next-token distribution: 40 tokens, p_i proportional to 1 / (i + 1)
SPREAD_RAW = np.array([1.0 / (i + 1) for i in range(40)])
SPREAD_RAW /= SPREAD_RAW.sum()
SPREAD = {i: math.log(p) for i, p in enumerate(SPREAD_RAW)}


def _draws(rng: np.random.Generator, probs: dict[int, float], n: int) -> dict[int, int]:
    tokens = list(probs)
    p = np.array([probs[t] for t in tokens])
    counts = rng.multinomial(n, p / p.sum())
    return {t: int(c) for t, c in zip(tokens, counts, strict=True) if c}


def _rejected(counts: dict[int, int], expected: Expected, alpha: float) -> bool:
    fit = goodness_of_fit(counts, expected, alpha=alpha)
    return bool(fit.outside_support) or fit.p_value <= alpha


def _three_sigma(alpha: float, reps: int) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)


@pytest.mark.parametrize(
    ("params", "engine"),
    [
        (SamplingParams(0.8, top_p=0.9), "llama-server"),
        (SamplingParams(1.0, top_k=10), "vllm"),
        (SamplingParams(0.7, min_p=0.05), "vllm"),
        (SamplingParams(1.2), "mlx-lm"),
    ],
)
def test_false_failure_rate_is_within_alpha(params: SamplingParams, engine: str) -> None:
    """Draws from the expected distribution itself fail at most alpha + 3 sigma of the time
    (300 checks of n = 2000 at alpha .05, the same draws at alpha .001)."""
    expected = expected_distribution(SPREAD, params, engine)
    rng = np.random.default_rng(2026)
    reps = 300
    at_05 = at_001 = 0
    for _ in range(reps):
        counts = _draws(rng, expected.probs, 2000)
        at_05 += _rejected(counts, expected, 0.05)
        at_001 += _rejected(counts, expected, 0.001)
    assert at_05 / reps <= _three_sigma(0.05, reps)
    assert at_001 / reps <= _three_sigma(0.001, reps)


def test_a_dropped_top_p_is_rejected_at_2000() -> None:
    expected = expected_distribution(SPREAD, SamplingParams(1.0, top_p=0.9), "llama-server")
    assert len(expected.excluded) > 10
    untruncated = expected_distribution(SPREAD, SamplingParams(1.0), "llama-server")
    rng = np.random.default_rng(7)
    for _ in range(50):
        counts = _draws(rng, untruncated.probs, 2000)
        fit = goodness_of_fit(counts, expected)
        assert fit.outside_support  # tokens the truncation removed were sampled


def test_an_ignored_temperature_is_rejected_at_2000() -> None:
    """T = 0.7 asked, T = 1 applied (inside the same support): the G statistic alone."""
    expected = expected_distribution(SPREAD, SamplingParams(0.7, top_k=20), "vllm")
    applied = expected_distribution(SPREAD, SamplingParams(1.0, top_k=20), "vllm")
    tv = sum(abs(expected.probs[t] - applied.probs[t]) for t in expected.probs) / 2
    fit = goodness_of_fit(_draws(np.random.default_rng(0), expected.probs, 2000), expected)
    assert tv > fit.detectable_tv  # so the claim says it is seen with power >= .8
    rng = np.random.default_rng(11)
    reps = 100
    rejected = sum(
        _rejected(_draws(rng, applied.probs, 2000), expected, 0.001) for _ in range(reps)
    )
    assert rejected / reps >= 0.8


def test_detectable_tv_is_monotone_in_n() -> None:
    expected = Expected({i: float(p) for i, p in enumerate(SPREAD_RAW)})
    previous = 1.0
    for n in (50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000):
        counts = {i: max(1, round(n * p)) for i, p in enumerate(SPREAD_RAW)}
        d = goodness_of_fit(counts, expected).detectable_tv
        assert d <= previous, n
        previous = d
    for k in (2, 5, 40):
        cells = [1 / k] * k
        values = [detectable_tv(n, cells, 0.001) for n in (10, 100, 1000, 100000)]
        assert values == sorted(values, reverse=True)
        # the chi-square part shrinks as 1 / sqrt(n) (Williams' factor -> 1): x100, /10
        assert values[3] == pytest.approx(values[2] / 10, rel=0.01)


@pytest.mark.parametrize(
    ("p", "n", "alpha", "direction"),
    [
        ([0.5, 0.5], 400, 0.01, [1, -1]),
        ([0.25] * 4, 1000, 0.001, [0.5, 0.5, -0.5, -0.5]),
        # A = {0, 3} holds half the mass: mass d moves to it in proportion to p
        ([0.4, 0.3, 0.2, 0.1], 2000, 0.001, [0.8, -0.6, -0.4, 0.2]),
    ],
)
def test_detectable_tv_has_the_power_it_claims(
    p: list[float], n: int, alpha: float, direction: list[float]
) -> None:
    """The least detectable alternative at distance ``detectable_tv`` (mass moved between
    two halves in proportion to p) is rejected 80% of the time; at half the distance far
    less often."""
    expected = Expected(dict(enumerate(p)))
    d = goodness_of_fit(
        dict(enumerate(round(n * x) for x in p)), expected, alpha=alpha
    ).detectable_tv
    # the distance the item reports is the chi-square's at POWER_LEVEL x alpha (the valid
    # p-value is a little more conservative: at the chi-square's own distance its power
    # measured 0.778, 0.795 and 0.775 here)
    assert d == pytest.approx(detectable_tv(n, p, alpha * POWER_LEVEL))
    shift = np.array(direction)
    assert np.abs(shift).sum() / 2 == pytest.approx(1.0)
    q = np.array(p) + d * shift
    rng = np.random.default_rng(5)
    reps = 600

    def rate(probs: np.ndarray) -> float:
        hits = 0
        for _ in range(reps):
            counts = rng.multinomial(n, probs)
            hits += _rejected(dict(enumerate(int(c) for c in counts)), expected, alpha)
        return hits / reps

    sigma = math.sqrt(0.8 * 0.2 / reps)
    assert abs(rate(q) - 0.8) <= 3 * sigma
    assert rate(np.array(p) + d / 2 * shift) < 0.5
