"""Chance agreement of two seeds, and the samples a distance needs, by hand."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.metrics.sampling import (
    Expected,
    agreement_probability,
    all_agree_probability,
    detectable_tv,
    samples_needed,
)


def test_agreement_is_the_sum_of_squares() -> None:
    assert agreement_probability(Expected({0: 0.5, 1: 0.3, 2: 0.2})) == pytest.approx(
        0.25 + 0.09 + 0.04
    )
    # a tail of .2 adds at most .04 (all its mass on one token)
    assert agreement_probability(Expected({0: 0.8}, tail=0.2)) == pytest.approx(0.64 + 0.04)
    assert agreement_probability(Expected({7: 1.0})) == 1.0
    # two positions: the product
    positions = [Expected({0: 0.5, 1: 0.5}), Expected({0: 0.9, 1: 0.1})]
    assert all_agree_probability(positions) == pytest.approx(0.5 * (0.81 + 0.01))
    with pytest.raises(ValueError):
        agreement_probability(Expected({0: math.nan}))


def test_samples_needed_inverts_detectable_tv() -> None:
    for cells in (2, 5, 40):
        n = samples_needed(0.05, cells, 0.001)
        # the chi-square part of detectable_tv (no Williams factor) at n is <= .05, at n - 1 > .05
        assert detectable_tv(n, [1 / cells] * cells, 0.001, williams=False) <= 0.05
        assert detectable_tv(n - 1, [1 / cells] * cells, 0.001, williams=False) > 0.05
    # one cell: 1 - (1 - .01)^n >= .8 -> n >= log(.2) / log(.99) = 160.1
    assert samples_needed(0.01, 1, 0.001) == 161
    # 2 cells, alpha .05: critical 3.841; lambda* for 80% power is 7.849 (the textbook value)
    assert samples_needed(0.1, 2, 0.05) == math.ceil(7.849 / (4 * 0.01))
